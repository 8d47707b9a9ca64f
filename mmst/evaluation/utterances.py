"""The utterances of an evaluation: rows of ``DATA/<split>.tsv`` with their references.

Each utterance is re-read from its audio (``wav``, ``offset``, ``duration``, seconds) by
:func:`mmst.evaluation.frontend.read_utterance_audio`; the manifest's stored features are not used,
so the evaluation streams what a live system would hear.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mmst.evaluation.bundle import LoadError

logger = logging.getLogger("mmst.evaluation.utterances")

AUDIO_COLUMNS = ("id", "wav", "offset", "duration")
"""Manifest columns needed to re-read an utterance's audio."""


def load_utterances(data_dir: str | Path | None, split: str, langs: list[str],
                    limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of ``DATA/<split>.tsv`` as ``{"id", "wav", "offset", "duration", "refs": {lang: str | None}}``.

    A language without a reference column, or an utterance with an empty reference, is kept with
    ``None`` (left out of BLEU, with a warning).

    Args:
        data_dir: DATA directory (``None``: a model folder was loaded without ``--data``; an error).
        split: manifest split name.
        langs: target languages whose ``tgt_text_<lang>`` columns are the references.
        limit: keep the first ``limit`` rows (``None``/0 = all).

    Raises:
        LoadError: no DATA directory, missing manifest, no rows, a missing audio column, or no reference
            column for any requested language (the message names the file).
    """
    from mmst.data.manifest import read_manifest

    if data_dir is None:
        raise LoadError(f"no DATA directory for the {split} utterances: with --model MODEL_DIR, --data DATA "
                        "names the prepared test data (the model folder holds no utterances)")
    path = Path(data_dir) / f"{split}.tsv"
    if not path.is_file():
        raise LoadError(f"manifest not found: {path} (is --data/--split right?)")
    rows = read_manifest(path)
    if not rows:
        raise LoadError(f"{path}: no utterances")
    cols = set(rows[0])
    missing = [c for c in AUDIO_COLUMNS if c not in cols]
    if missing:
        raise LoadError(f"{path}: missing column(s) {', '.join(missing)} (needed to re-read the audio)")
    no_ref = [lang for lang in langs if f"tgt_text_{lang}" not in cols]
    if len(no_ref) == len(langs):
        raise LoadError(f"{path}: no reference column for {', '.join(no_ref)}")
    if no_ref:
        logger.warning("%s: no reference column for %s: BLEU not computed for them", path, ", ".join(no_ref))
    out = []
    for r in rows[:limit] if limit else rows:
        refs = {lang: (r.get(f"tgt_text_{lang}") or None) for lang in langs}
        out.append({"id": r["id"], "wav": r["wav"], "offset": r["offset"], "duration": r["duration"], "refs": refs})
    for lang in langs:
        n_missing = sum(1 for u in out if u["refs"][lang] is None)
        if n_missing:
            logger.warning("%s: %d of %d utterances have no %s reference (left out of BLEU)", split, n_missing,
                           len(out), lang)
    return out
