"""English ASR view of a multi-way DATA directory (encoder pretraining).

TED-MMST and fairseq SimulST initialise the speech-translation encoder from an English ASR model
trained with CTC + attention on the same audio. :func:`make_asr_view` turns a multi-way DATA
directory (docs/CONTRACTS.md) into a second DATA directory in which the ONLY target language is
``en`` and its text is the English transcript ``src_text``, so ``mmst-train`` trains an ASR model
without any new code path:

* the features are NOT copied: ``fbank80.zip`` and ``gcmvn.npz`` are relative symlinks to the source
  DATA (``link="symlink"``, default) or, where symlinks are impossible, every manifest ``audio`` cell and
  the config paths point into the source directory through a relative path (``link="relpath"``);
* the English SentencePiece model (``vocab.src`` of the source) is the target vocabulary: the view's
  ``vocab.joint``, ``vocab.src`` and ``vocab.per_lang.en`` all name it (symlinked as ``spm_src.model``,
  plus ``spm_src.txt`` when the source has the fairseq dictionary), so the CTC head and the attention
  decoder share one English vocabulary;
* ``<split>.tsv`` has the multi-way columns for one language (``id, audio, n_frames, speaker, src_text,
  tgt_text_en, wav, offset, duration``), ``tgt_text_en == src_text``; utterances with an empty
  transcript are dropped (counted in ``asr_view.json``). fairseq-style ``<split>_asr.tsv`` manifests
  (``id, audio, n_frames, tgt_text, speaker``) are written next to them;
* speed-perturbed copies of an included split (``speed_perturb`` in the source config, see
  :mod:`mmst.corpora.speed_perturb`) get their manifest in the view too, and their feature zip a symlink;
* ``config.yaml`` is the source config with ``tgt_langs: [en]``, the vocab entries above, the same
  ``fbank`` block (dither settings, so a streaming evaluation re-creates the same features) and
  ``asr_view: {source, lang, ...}``.

Train it with ``model.arch=separate`` (one ``en`` decoder starting from bos): the English vocabulary
has no ``<lang:xx>`` tags, so ``unified`` (tag start) is not available on the view. The resulting
checkpoint's encoder is loaded by ``checkpoint.load_pretrained_encoder_from`` for ST training on the
source DATA (the encoder does not depend on the vocabulary).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mmst.atomic import atomic_write_json, atomic_write_text
from mmst.data.corpus import load_data_config
from mmst.data.manifest import manifest_columns, read_manifest, write_manifest

#: Columns of the fairseq ``speech_to_text`` ASR manifests (``<split>_asr.tsv``).
FAIRSEQ_ASR_COLUMNS = ("id", "audio", "n_frames", "tgt_text", "speaker")

LINK_MODES = ("symlink", "relpath")


class AsrViewError(ValueError):
    """The source DATA directory cannot be turned into an ASR view (message names the file/key)."""


def _link(target: Path, link: Path) -> None:
    """Create (or replace) ``link`` as a RELATIVE symlink to ``target``."""
    rel = os.path.relpath(target.resolve(), link.parent.resolve())
    if link.is_symlink() or link.exists():
        if link.is_symlink() and os.readlink(link) == rel:
            return
        if link.is_dir() and not link.is_symlink():
            raise AsrViewError(f"{link} exists and is a directory")
        link.unlink()
    os.symlink(rel, link)


def _rewrite_audio(audio: str, prefix: str) -> str:
    """``fbank80.zip:12:34`` -> ``<prefix>/fbank80.zip:12:34`` for a relative store path."""
    from mmst.data.store import parse_audio_field

    path, _, _ = parse_audio_field(audio)
    if os.path.isabs(path):
        return audio
    return f"{prefix}/{audio}"


def make_asr_view(data_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
                  splits: Sequence[str] | None = None, lang: str = "en", link: str = "symlink") -> dict[str, Any]:
    """Write the English ASR view of ``data_dir`` into ``out_dir`` (see module docstring).

    Args:
        data_dir: source multi-way DATA directory (``config.yaml`` with ``vocab.src``).
        out_dir: view directory (created; rerunning overwrites the view's files, never the source).
        splits: splits to include (default: the source ``config.yaml`` ``splits`` whose manifest exists).
        lang: the target-language code of the view (``en``; the manifest column is ``tgt_text_<lang>``).
        link: ``"symlink"`` (relative symlinks to the features, CMVN and SentencePiece model) or
            ``"relpath"`` (no links: manifest ``audio`` cells and config paths are relative paths into
            the source directory, e.g. ``../data/fbank80.zip:<offset>:<size>``).

    Returns:
        summary dict (also written to ``out_dir/asr_view.json``): ``source``, ``lang``, ``link``,
        ``splits`` ``{split: {"utterances": n, "dropped_empty": m, "frames": total 10 ms frames}}``.

    Raises:
        AsrViewError: ``out_dir`` is the source directory, the source has no ``vocab.src`` or no
            ``src_text`` column, a requested split has no manifest, or ``link`` is unknown.
        mmst.data.corpus.DataConfigError: the source ``config.yaml`` is missing or malformed.
    """
    if link not in LINK_MODES:
        raise AsrViewError(f"link must be one of {LINK_MODES}, got {link!r}")
    src, out = Path(data_dir), Path(out_dir)
    cfg = load_data_config(src)
    out.mkdir(parents=True, exist_ok=True)
    if src.resolve() == out.resolve():
        raise AsrViewError(f"the ASR view must be a new directory, not the source {src}")
    vcfg = cfg.get("vocab") or {}
    if not vcfg.get("src"):
        raise AsrViewError(f"{src}/config.yaml: no vocab.src (English SentencePiece model) to use as the ASR vocab")
    spm = src / vcfg["src"]
    if not spm.is_file():
        raise AsrViewError(f"{spm}: English SentencePiece model named by vocab.src is missing")
    features, gcmvn = str(cfg["features"]), str(cfg["gcmvn"])
    for rel in (features, gcmvn):
        if not (src / rel).is_file():
            raise AsrViewError(f"{src / rel}: missing (named in {src}/config.yaml)")

    # resources: symlinks, or paths relative to the view
    prefix = os.path.relpath(src.resolve(), out.resolve())
    spm_txt = spm.with_suffix(".txt")
    if link == "symlink":
        _link(src / features, out / Path(features).name)
        _link(src / gcmvn, out / Path(gcmvn).name)
        _link(spm, out / "spm_src.model")
        if spm_txt.is_file():
            _link(spm_txt, out / "spm_src.txt")
        features_rel, gcmvn_rel, spm_rel = Path(features).name, Path(gcmvn).name, "spm_src.model"
        dict_rel = "spm_src.txt" if spm_txt.is_file() else None
    else:
        features_rel, gcmvn_rel = f"{prefix}/{features}", f"{prefix}/{gcmvn}"
        spm_rel = f"{prefix}/{vcfg['src']}"
        dict_rel = f"{prefix}/{Path(vcfg['src']).with_suffix('.txt')}" if spm_txt.is_file() else None

    wanted = list(splits) if splits is not None else [s for s in cfg["splits"] if (src / f"{s}.tsv").is_file()]
    # speed-perturbed copies of an included split (mmst.corpora.speed_perturb) come along, same names
    sp = {k: v for k, v in (cfg.get("speed_perturb") or {}).items() if k in wanted}
    for entry in sp.values():
        if entry.get("features") and link == "symlink":
            _link(src / entry["features"], out / Path(entry["features"]).name)
    manifests = wanted + [str(e["manifest"]) for e in sp.values()]
    cols = manifest_columns([lang])
    tcol = f"tgt_text_{lang}"
    summary: dict[str, Any] = {"source": prefix, "lang": lang, "link": link, "splits": {}}
    for split in manifests:
        path = src / f"{split}.tsv"
        if not path.is_file():
            raise AsrViewError(f"{path}: no manifest for split {split!r}")
        rows = read_manifest(path)
        if rows and "src_text" not in rows[0]:
            raise AsrViewError(f"{path}: no src_text column (English transcript)")
        out_rows, asr_rows, dropped, frames = [], [], 0, 0
        for r in rows:
            text = r.get("src_text", "")
            if not text.strip():
                dropped += 1
                continue
            audio = r["audio"] if link == "symlink" else _rewrite_audio(r["audio"], prefix)
            row = {c: r.get(c, "") for c in cols}
            row.update(audio=audio, **{tcol: text})
            out_rows.append(row)
            asr_rows.append({"id": r["id"], "audio": audio, "n_frames": r["n_frames"], "tgt_text": text,
                             "speaker": r.get("speaker", "")})
            frames += int(r["n_frames"])
        write_manifest(out / f"{split}.tsv", out_rows, cols)
        write_manifest(out / f"{split}_asr.tsv", asr_rows, FAIRSEQ_ASR_COLUMNS)
        summary["splits"][split] = {"utterances": len(out_rows), "dropped_empty": dropped, "frames": frames}

    view = dict(cfg)
    view.update({
        "src_lang": cfg.get("src_lang", "en"),
        "tgt_langs": [lang],
        "features": features_rel,
        "gcmvn": gcmvn_rel,
        "vocab": {"joint": spm_rel, "src": spm_rel, "per_lang": {lang: spm_rel}},
        "splits": list(wanted),
        "bpe_tokenizer": {"bpe": "sentencepiece", "sentencepiece_model": spm_rel},
        "global_cmvn": {"stats_npz_path": gcmvn_rel},
        "prepend_tgt_lang_tag": False,
        "asr_view": {"source": prefix, "lang": lang, "link": link},
    })
    if sp:
        view["speed_perturb"] = sp
    else:
        view.pop("speed_perturb", None)
    if dict_rel:
        view["vocab_filename"] = dict_rel
    else:
        view.pop("vocab_filename", None)
    if "audio_root" in view:
        view["audio_root"] = str(out.resolve())
    import yaml

    atomic_write_text(out / "config.yaml", yaml.safe_dump(view, sort_keys=False, allow_unicode=True))
    atomic_write_json(out / "asr_view.json", summary)
    return summary
