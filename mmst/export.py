"""``mmst-export``: a training checkpoint to a self-contained model folder (the public format).

Usage::

    mmst-export --checkpoint exp/model/checkpoint_avg.pt --out exp/model_export \\
        [--data DATA] [--scores exp/eval]

The folder (layout in :mod:`mmst.models.checkpoint`) holds ``config.json`` (the model, data and
feature configuration, the vocabulary fingerprints, how it was trained and exported),
``model.safetensors`` (the weights only: no optimiser, no RNG state, no pickle), the SentencePiece
models, ``gcmvn.npz``, for a model over a pretrained Hugging Face encoder its config in ``hf_encoder/``
(the folder the model was trained from is not needed afterwards), and a ``README.md`` model card (languages, training data, scores when
``--scores`` is given, the export command and commit). Every consumer takes it as ``--model MODEL_DIR``
(evaluation scripts, the SimulEval agent, ``mmst-serve``), and training can start from it
(``checkpoint.init_from``).

``--data`` defaults to the DATA directory recorded in the checkpoint (where it was at training time: when it
has moved, the error names that recorded path, and ``--data`` gives the current one); its vocabularies
must be the ones the checkpoint was trained with (size and SHA-256), else the export stops. The folder is written
beside ``--out`` and renamed into place, so an interrupted export never leaves a half-written folder
under that name; an existing folder is replaced. The folder gets the usual mode of a new folder,
``0o777 & ~umask`` (0755 under umask 022), its files ``0o666 & ~umask``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from mmst.atomic import atomic_copy, atomic_write_json, atomic_write_text
from mmst.cli_help import ArgumentParser, run_cli
from mmst.models.checkpoint import (
    MODEL_CONFIG_FILE,
    MODEL_FORMAT,
    MODEL_FORMAT_VERSION,
    MODEL_WEIGHTS_FILE,
    CheckpointError,
    check_vocab_compat,
    load_model_from_checkpoint,
)

HF_ENCODER_DIR = "hf_encoder"
"""Subfolder of a model folder with the pretrained Hugging Face encoder's config (``encoder_type: hf``)."""
_DATA_KEYS = ("src_lang", "tgt_langs", "input_feat_per_channel", "sample_rate", "fbank")


class ExportError(RuntimeError):
    """The checkpoint cannot be exported as asked (message names the file)."""


def _vocab_files(dcfg: dict[str, Any]) -> dict[str, Any]:
    """``{"joint": rel, "src": rel, "per_lang": {lang: rel}}`` of the DATA config (entries present only)."""
    v = dcfg.get("vocab") or {}
    out: dict[str, Any] = {k: v[k] for k in ("joint", "src") if v.get(k)}
    if v.get("per_lang"):
        out["per_lang"] = dict(v["per_lang"])
    return out


def _fingerprints(ckpt: dict[str, Any], data_dir: Path, vocab: dict[str, Any], langs: list[str]) -> dict[str, Any]:
    """The vocabulary fingerprints of the DATA files the model decodes with, checked against the checkpoint's.

    Raises:
        ExportError: a file missing, or a vocabulary that differs from the checkpoint's.
    """
    from mmst.data.vocab import Vocab, vocab_fingerprint

    mode = ckpt.get("vocab_mode") or "joint"
    tgt: dict[str, Any] = {}
    for lang in langs:
        rel = (vocab.get("per_lang") or {}).get(lang) if mode == "per_lang" else vocab.get("joint")
        if not rel:
            raise ExportError(f"{data_dir}/config.yaml: no {'vocab.per_lang.' + lang if mode == 'per_lang' else 'vocab.joint'}"
                              " entry (the checkpoint decodes with it)")
        p = data_dir / rel
        if not p.is_file():
            raise ExportError(f"vocabulary file not found: {p}")
        tgt[lang] = vocab_fingerprint(p, len(Vocab.load(p)))
    src = None
    if vocab.get("src") and (data_dir / vocab["src"]).is_file():
        p = data_dir / vocab["src"]
        src = vocab_fingerprint(p, len(Vocab.load(p)))
    saved = ckpt.get("vocab") or {}
    try:
        check_vocab_compat({"tgt": saved.get("tgt") or {}, "src": saved.get("src")}, {"tgt": tgt, "src": src},
                           where="checkpoint")
    except CheckpointError as e:
        raise ExportError(f"{data_dir} is not the DATA this checkpoint was trained on: {e}") from None
    rel = {"tgt": {lang: {**fp, "path": os.path.basename(fp["path"])} for lang, fp in tgt.items()},
           "src": None if src is None else {**src, "path": os.path.basename(src["path"])}}
    return rel


def _training_summary(ckpt: dict[str, Any], checkpoint: Path, data_dir: Path) -> dict[str, Any]:
    """Where the model came from: checkpoint, updates, averaging, DATA splits (from ``prep_report.json``)."""
    state = ckpt.get("train_state") or {}
    out: dict[str, Any] = {"checkpoint": str(checkpoint.resolve()), "num_updates": state.get("num_updates"),
                           "averaged_from": ckpt.get("averaged_from"), "data_dir": str(data_dir.resolve()),
                           "config": ckpt.get("config")}
    rep = data_dir / "prep_report.json"
    if rep.is_file():
        try:
            r = json.loads(rep.read_text(encoding="utf-8"))
            out["data_splits"] = {s: {"utterances": v.get("kept"), "hours": v.get("hours")}
                                  for s, v in (r.get("splits") or {}).items()}
            out["data_tool"] = r.get("tool")
        except (OSError, ValueError):
            pass
    return out


def read_scores(path: str | os.PathLike[str]) -> dict[str, dict[str, dict[str, float]]]:
    """``{setting (k3, ...): {lang: {metric: value}}}`` of an evaluation (its ``scores.json`` or its folder).

    Raises:
        ExportError: not an evaluation written by ``mmst-eval``.
    """
    from mmst.evaluation.compare import CompareError, read_eval_dir

    p = Path(path)
    try:
        res, _ = read_eval_dir(p.parent if p.is_file() else p)
    except CompareError as e:
        raise ExportError(f"--scores {p}: {e}") from None
    return res


def _is_named_size(m: dict[str, Any]) -> bool:
    """True when the model config ``m`` has every dimension of its named size (:data:`mmst.models.config.SIZES`;
    overrides such as ``d_model=64`` make it a custom model, whatever ``size`` says). An ``hf`` encoder's
    unused ``encoder_layers`` / ``ffn_dim`` are not compared."""
    from mmst.models.config import SIZES

    unused = ("encoder_layers", "ffn_dim") if m.get("encoder_type") == "hf" else ()
    dims = SIZES.get(m.get("size"))
    return dims is not None and all(m.get(k) == v for k, v in dims.items() if k not in unused)


def model_card(cfg: dict[str, Any], scores: dict[str, Any] | None) -> str:
    """The ``README.md`` of a model folder (Markdown) from its ``config.json`` content and scores."""
    m, tr, ex = cfg["model"], cfg.get("training") or {}, cfg.get("export") or {}
    n_params = cfg.get("num_parameters")
    lines = [f"# mmst model: English speech -> {', '.join(cfg['tgt_langs'])}", "",
             "A simultaneous speech translation model of mmst in its model-folder format "
             f"(`{MODEL_CONFIG_FILE}`, `{MODEL_WEIGHTS_FILE}`, SentencePiece models, CMVN).", "",
             "## Model", "",
             f"- architecture: `{m.get('arch')}`" + (f", size `{m['size']}`" if _is_named_size(m) else "")
             + f": d_model {m.get('d_model')}, "
             + (f"pretrained Hugging Face encoder (config in `{m.get('hf_encoder_path')}/`, trained from "
                f"`{tr.get('hf_encoder_path')}`)" if m.get("encoder_type") == "hf"
                else f"encoder {m.get('encoder_layers')} layers ({m.get('encoder_attention')})")
             + f", decoder {m.get('decoder_layers')} layers, {m.get('attention_heads')} attention heads, "
             f"FFN {m.get('ffn_dim')}; {n_params} parameters",
             f"- source language: {cfg['data'].get('src_lang', 'en')}; target languages: {', '.join(cfg['tgt_langs'])}",
             f"- vocabulary: {cfg['vocab_mode']} ("
             + ", ".join(f"{lang}: {fp['path']} ({fp['size']} pieces)" for lang, fp in cfg["vocab"]["tgt"].items()) + ")",
             "", "## Training data", ""]
    lines.append(f"- DATA: `{tr.get('data_dir')}`" + (f" (built by {tr['data_tool']})" if tr.get("data_tool") else ""))
    for split, s in (tr.get("data_splits") or {}).items():
        lines.append(f"- {split}: {s.get('utterances')} utterances, {s.get('hours')} h")
    lines.append(f"- updates: {tr.get('num_updates')}"
                 + (f"; average of {len(tr['averaged_from'])} checkpoints" if tr.get("averaged_from") else ""))
    if scores:
        langs = sorted({lang for per in scores.values() for lang in per})
        lines += ["", "## Scores", "", f"From `{cfg['export'].get('scores')}`.", "",
                  "| setting | language | BLEU | AL (ms) | LAAL (ms) |", "|---|---|---|---|---|"]
        for setting, per in scores.items():
            for lang in langs:
                v = per.get(lang) or {}

                def f(k: str) -> str:
                    return f"{v[k]:.1f}" if isinstance(v.get(k), (int, float)) else "-"  # noqa: B023
                lines.append(f"| {setting} | {lang} | {f('BLEU')} | {f('AL')} | {f('LAAL')} |")
    lines += ["", "## Use", "", "```bash",
              "mmst-serve --model MODEL_DIR",
              "mmst-eval --model MODEL_DIR --data DATA --split tst-COMMON --out OUT",
              "```", "", "## Export", "",
              f"- command: `{ex.get('command')}`", f"- commit: `{ex.get('git_commit')}`", f"- date: {ex.get('date')}", ""]
    return "\n".join(lines)


def export_model(checkpoint: str | os.PathLike[str], out: str | os.PathLike[str],
                 data_dir: str | os.PathLike[str] | None = None, scores: str | os.PathLike[str] | None = None,
                 command: str | None = None) -> Path:
    """Write the model folder of ``checkpoint`` to ``out`` (see module docstring).

    Args:
        checkpoint: a training checkpoint (``checkpoint_best.pt``, ``checkpoint_avg.pt`` ...).
        out: the model folder (replaced when it exists).
        data_dir: its DATA directory (vocabularies, CMVN, feature settings); default: the checkpoint's.
        scores: an evaluation (``scores.json`` or its folder) to quote in the model card.
        command: the command line to record (default: this process's).

    Returns:
        ``out`` as a :class:`~pathlib.Path`.

    Raises:
        ExportError: unreadable checkpoint, no or bad DATA, vocabularies that differ from the
            checkpoint's, missing CMVN, bad ``scores``.
    """
    from safetensors.torch import save_file

    from mmst.data.corpus import DataConfigError, load_data_config
    from mmst.provenance import run_record

    checkpoint, out = Path(checkpoint), Path(out)
    try:
        model, ckpt = load_model_from_checkpoint(checkpoint)
    except CheckpointError as e:
        raise ExportError(str(e)) from None
    ddir = Path(data_dir) if data_dir is not None else (Path(ckpt["data_dir"]) if ckpt.get("data_dir") else None)
    if ddir is None:
        raise ExportError(f"{checkpoint} records no DATA directory: pass --data")
    try:
        dcfg = load_data_config(ddir)
    except DataConfigError as e:
        if data_dir is None:  # the path came from the checkpoint: the DATA may have moved since training
            raise ExportError(f"DATA directory {ddir} recorded in the checkpoint {checkpoint} is not usable ({e}); "
                              "pass --data DATA to give its current path") from None
        raise ExportError(str(e)) from None
    langs = list(ckpt.get("tgt_langs") or model.tgt_langs)
    vocab = _vocab_files(dcfg)
    fps = _fingerprints(ckpt, ddir, vocab, langs)
    gcmvn = ddir / dcfg["gcmvn"]
    if not gcmvn.is_file():
        raise ExportError(f"CMVN stats not found: {gcmvn}")
    score_table = read_scores(scores) if scores is not None else None
    rec = run_record(command)
    data = {k: dcfg[k] for k in _DATA_KEYS if k in dcfg}
    data["tgt_langs"] = langs
    data["vocab"] = {k: (os.path.basename(v) if isinstance(v, str) else {a: os.path.basename(b) for a, b in v.items()})
                     for k, v in vocab.items()}
    data["gcmvn"] = "gcmvn.npz"
    model_cfg = dict(ckpt["model_cfg"])
    training = _training_summary(ckpt, checkpoint, ddir)
    if model_cfg.get("encoder_type") == "hf":  # the encoder's config travels in hf_encoder/, its weights below
        training["hf_encoder_path"] = model_cfg["hf_encoder_path"]
        model_cfg["hf_encoder_path"] = HF_ENCODER_DIR
    cfg: dict[str, Any] = {
        "format": MODEL_FORMAT, "version": MODEL_FORMAT_VERSION, "model": model_cfg, "tgt_langs": langs,
        "vocab_mode": ckpt.get("vocab_mode") or "joint", "vocab": fps, "data": data,
        "num_parameters": int(model.num_parameters()) if hasattr(model, "num_parameters") else None,
        "training": training,
        "export": {"command": rec["command"], "date": rec["date"], "git_commit": rec["git_commit"],
                   "scores": None if scores is None else str(Path(scores).resolve()), "score_table": score_table},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        os.chmod(tmp, 0o777 & ~_current_umask())  # mkdtemp creates 0700; a folder to share gets the umask's mode
        state = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
        save_file(state, str(tmp / MODEL_WEIGHTS_FILE), metadata={"format": "pt", "mmst_format": MODEL_FORMAT})
        files = [v for k, v in vocab.items() if k != "per_lang"] + list((vocab.get("per_lang") or {}).values())
        for rel in files:
            for ext in (".model", ".txt"):
                src = ddir / (os.path.splitext(rel)[0] + ext)
                if src.is_file():
                    atomic_copy(src, tmp / src.name)
        atomic_copy(gcmvn, tmp / "gcmvn.npz")
        if model_cfg.get("encoder_type") == "hf":
            model.encoder.save_config(tmp / HF_ENCODER_DIR)
        atomic_write_json(tmp / MODEL_CONFIG_FILE, cfg)
        atomic_write_text(tmp / "README.md", model_card(cfg, score_table))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _current_umask() -> int:
    """The process's umask now (read and set back, as :data:`mmst.atomic._UMASK` does at import)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def build_parser() -> ArgumentParser:
    """Options of ``mmst-export``."""
    p = ArgumentParser(prog="mmst-export", description=__doc__)
    p.add_argument("--checkpoint", required=True, help="training checkpoint (.pt), e.g. checkpoint_avg.pt")
    p.add_argument("--data", default=None,
                   help="its DATA directory (default: the path recorded in the checkpoint at training time; "
                        "give --data when the DATA has moved since)")
    p.add_argument("--scores", default=None,
                   help="an evaluation of this model (scores.json of mmst-eval, or its folder) "
                        "quoted in the model card")
    p.add_argument("--out", required=True, help="model folder to write (replaced when it exists)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mmst-export``; 0 ok, 1 with a one-line error, 2 bad options."""

    command = shlex.join(["mmst-export", *(sys.argv[1:] if argv is None else argv)])

    def run(args: argparse.Namespace) -> int:
        out = export_model(args.checkpoint, args.out, data_dir=args.data, scores=args.scores, command=command)
        print(f"mmst-export: wrote {out} ({', '.join(sorted(p.name for p in out.iterdir()))})")
        return 0

    return run_cli(build_parser(), run, argv, errors=(ExportError,))


if __name__ == "__main__":
    sys.exit(main())
