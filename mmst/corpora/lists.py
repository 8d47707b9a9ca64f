"""A training DATA directory from lists of your own recordings: one list per split.

Each list is an audio list (:mod:`mmst.corpora.audiolist`: ``id, audio, en, de, es, ...``, optional
``offset``/``duration`` for a segment of a longer recording, ``speaker``, ``duration_s``). The lists
become the splits ``train``, ``dev`` and one test split per ``name=file`` (``tst-COMMON=tst.tsv``),
and go through the same builder as the MuST-C and synthetic corpora
(:func:`mmst.corpora.multiway.build_from_rows`): the fbank features, the filters, and the
SentencePiece models and global CMVN estimated on the **train** list only (or copied from
``vocab_from``, a DATA directory or an exported model folder, to fine-tune that model). Test splits
are never filtered; train and dev follow the builder's filtering rules.

Bad input: a list that cannot be read, or a bad row, is an :class:`~mmst.corpora.audiolist.AudioListError`
naming the file, line and field; an id listed in two lists is a
:class:`~mmst.corpora.multiway.BuildError` naming both places; bad audio (see
:func:`~mmst.corpora.audiolist.check_audio`) stops the build with one line per clip unless
``skip_bad``, which leaves those rows out and lists them under ``skipped_bad_audio`` in
``prep_report.json``; each split's ``rows_in`` counts every data row of its list, and its ``dropped``
counts the left-out clips as ``bad_audio``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mmst.corpora.audiolist import AudioListError, drop_bad_audio, read_audio_list
from mmst.corpora.multiway import build_from_rows

_SPLIT_RE = re.compile(r"[A-Za-z0-9][\w.\-]*")


def parse_test_lists(specs: Sequence[str]) -> dict[str, str]:
    """``["tst-COMMON=tst.tsv", ...]`` -> ``{"tst-COMMON": "tst.tsv", ...}`` (order kept).

    Raises:
        AudioListError: a spec without ``=``, a split name that is not a plain file name, ``train`` or
            ``dev`` as a test name, or a name given twice.
    """
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise AudioListError(f"--test {spec!r}: expected NAME=FILE (e.g. tst-COMMON=tst.tsv)")
        if not _SPLIT_RE.fullmatch(name) or name in ("train", "dev"):
            raise AudioListError(f"--test {spec!r}: {name!r} is not usable as a test split name "
                                 "(letters, digits, '.', '-', '_'; not train or dev)")
        if name in out:
            raise AudioListError(f"--test {spec!r}: split {name!r} given twice")
        out[name] = path
    return out


def build_from_lists(
    train: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    dev: str | os.PathLike[str] | None = None,
    tests: Mapping[str, str | os.PathLike[str]] | None = None,
    tgt_langs: Sequence[str] | None = None,
    src_col: str = "en",
    skip_bad: bool = False,
    jobs: int = 1,
    **options: Any,
) -> dict[str, Any]:
    """Build a DATA directory (splits ``train``, ``dev``, and each test name) from audio lists.

    Args:
        train: the training list; its kept utterances train the vocabularies and CMVN.
        out_dir: DATA directory (created; a rerun reuses the feature cache).
        dev: the validation list (optional).
        tests: ``{split name: list}``; these splits are never filtered.
        tgt_langs: target language columns; default: every language-code column of the train list
            except ``src_col`` (the other lists must have the same columns).
        src_col: column with the English transcript.
        skip_bad: leave out bad clips (reported) instead of stopping.
        jobs: feature extraction processes.
        **options: fields of :class:`mmst.corpora.multiway.BuildOptions` (``vocab_size``,
            ``vocab_from``, ``max_frames``, ``dither``, ``progress`` ...).

    Returns:
        The build report (also ``DATA/prep_report.json``), with ``lists`` (split -> file) and
        ``skipped_bad_audio`` (``{"id", "source", "reason", "split"}`` per left-out clip, also counted in
        the split's ``rows_in`` and ``dropped["bad_audio"]``).

    Raises:
        AudioListError: unreadable list, bad row, a list without rows or with only bad audio, bad
            audio without ``skip_bad``.
        mmst.corpora.multiway.BuildError: an id in two lists, audio errors in a test split, no kept
            training utterance.
    """
    lists: dict[str, str] = {"train": os.fspath(train)}
    if dev is not None:
        lists["dev"] = os.fspath(dev)
    for name, path in (tests or {}).items():
        lists[name] = os.fspath(path)
    progress = bool(options.get("progress", True))
    langs = list(tgt_langs) if tgt_langs else None
    rows_by_split: dict[str, list[dict[str, Any]]] = {}
    skipped: list[dict[str, Any]] = []
    n_bad: dict[str, dict[str, int]] = {}
    for split, path in lists.items():
        if not Path(path).is_file():
            raise AudioListError(f"{path}: list of split {split!r} not found")
        rows, langs = read_audio_list(path, langs, src_col)
        if not rows:
            raise AudioListError(f"{path}: no data rows")
        good, bad = drop_bad_audio(rows, skip_bad, progress=progress)
        skipped += [{**b, "split": split} for b in bad]
        n_bad[split] = {"bad_audio": len(bad)}
        if not good:
            raise AudioListError(f"{path}: every clip is bad audio")
        rows_by_split[split] = good
    assert langs is not None
    test_splits = [s for s in lists if s not in ("train", "dev")]
    report = build_from_rows(
        rows_by_split, out_dir, langs, jobs=jobs, no_filter_splits=test_splits,
        extra_report={"lists": {s: os.path.abspath(p) for s, p in lists.items()}, "skipped_bad_audio": skipped},
        dropped_before=n_bad, fit_split="train", **{"tool": "prep_lists", **options},
    )
    return report
