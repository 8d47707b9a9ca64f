"""Reading mmst models: the one loader (:func:`load_model`) for an exported model folder or a training
checkpoint, strict loading, vocabulary compatibility.

Two formats:

- a **model folder** (the public format, written by ``mmst-export``, :mod:`mmst.models.export`)::

      MODEL_DIR/config.json        format "mmst-model", version; model (ModelConfig), tgt_langs, vocab_mode,
                                   vocab fingerprints {"tgt": {lang: {path, size, sha256}}, "src": ...},
                                   data (vocab, gcmvn and fbank settings: the DATA config.yaml keys a
                                   decoder needs, paths relative to MODEL_DIR), training, export
      MODEL_DIR/model.safetensors  the weights (safetensors: no pickle, nothing executed on load)
      MODEL_DIR/spm_*.model|.txt   SentencePiece models (and fairseq dictionaries)
      MODEL_DIR/gcmvn.npz          global CMVN
      MODEL_DIR/README.md          model card
      MODEL_DIR/hf_encoder/        a model over a pretrained Hugging Face encoder (``encoder_type: hf``):
                                   the encoder's ``transformers`` config (``config.json``; Whisper also
                                   ``preprocessor_config.json``), named by ``model.hf_encoder_path``
                                   relative to MODEL_DIR; its weights are in ``model.safetensors``

  Loading a folder reads ``config.json`` and ``model.safetensors`` only (never ``torch.load``; an
  ``hf_encoder/`` is built from its JSON config, its weights read from ``model.safetensors``), so it
  needs neither the training checkpoint nor the pretrained folder the model was trained from;
- a **training checkpoint** (``checkpoint_*.pt``, read with ``torch.load(weights_only=True)``); the write
  side (atomic saves, rotation, RNG capture, exact resume) and its format are
  :mod:`mmst.training.checkpoint`.

Everything here only reads, so evaluation, the SimulEval agent and ``mmst-serve`` load models without
importing the trainer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FORMAT = "mmst-checkpoint"
"""Value of the ``format`` key of every mmst checkpoint."""
MODEL_FORMAT = "mmst-model"
"""Value of the ``format`` key of a model folder's ``config.json``."""
MODEL_FORMAT_VERSION = 1
MODEL_CONFIG_FILE = "config.json"
MODEL_WEIGHTS_FILE = "model.safetensors"
_MODEL_KEYS = ("model", "tgt_langs", "vocab_mode", "vocab", "data")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, not ours, or incompatible with the current run."""


class VocabMismatchError(CheckpointError):
    """The vocabulary of the data does not match the one the checkpoint was trained with."""


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load one of OUR checkpoints with ``torch.load(weights_only=True)`` (never executes pickle code).

    Raises:
        CheckpointError: the file is missing, cannot be loaded safely, or is not an mmst checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:
        raise CheckpointError(f"cannot load {path} with weights_only=True (not an mmst checkpoint, "
                              f"or corrupted): {e}") from e
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not an mmst checkpoint (missing format={CHECKPOINT_FORMAT!r})")
    return ckpt


def check_vocab_compat(saved: dict[str, Any], current: dict[str, Any], where: str = "checkpoint") -> None:
    """Raise :class:`VocabMismatchError` when ``current`` vocab info differs from ``saved``.

    Both are ``{"tgt": {lang: fingerprint}, "src": fingerprint | None}`` (see :func:`vocab_fingerprint`).
    Sizes and SHA-256 must match for every language of the checkpoint.
    """
    s_tgt, c_tgt = saved.get("tgt", {}), current.get("tgt", {})
    for lang, s in s_tgt.items():
        c = c_tgt.get(lang)
        if c is None:
            raise VocabMismatchError(f"{where} has a vocabulary for language {lang!r} but the data does not")
        if int(s["size"]) != int(c["size"]) or s.get("sha256") != c.get("sha256"):
            raise VocabMismatchError(
                f"vocabulary for {lang!r} does not match the {where}: {where} used {s['path']} "
                f"(size {s['size']}, sha256 {str(s.get('sha256'))[:12]}), data has {c['path']} "
                f"(size {c['size']}, sha256 {str(c.get('sha256'))[:12]})")
    s_src, c_src = saved.get("src"), current.get("src")
    if s_src and c_src and (int(s_src["size"]) != int(c_src["size"]) or s_src.get("sha256") != c_src.get("sha256")):
        raise VocabMismatchError(f"source (CTC) vocabulary does not match the {where}: {s_src['path']} "
                                 f"(size {s_src['size']}) vs {c_src['path']} (size {c_src['size']})")


def load_model_from_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[Any, dict[str, Any]]:
    """Rebuild an ``MMSTModel`` from one of our checkpoints (``weights_only=True``).

    Returns:
        ``(model in eval mode, checkpoint dict)``.

    Raises:
        CheckpointError: unreadable or foreign file, or no ``model_cfg`` in the checkpoint.
    """
    from mmst.models.config import ModelConfig
    from mmst.models.registry import build_model

    ckpt = load_checkpoint(path, map_location)
    if not ckpt.get("model_cfg"):
        raise CheckpointError(f"{path}: no model_cfg in checkpoint")
    # every weight is in the checkpoint: a pretrained encoder's folder is read for its config only
    model = build_model(ModelConfig.from_dict(ckpt["model_cfg"]), pretrained_weights=False)
    model.load_state_dict(ckpt["model"])
    model.eval()
    return model, ckpt


# ------------------------------------------------------------------------------------------ model folder


def is_model_dir(path: str | Path) -> bool:
    """True when ``path`` is a directory (then it must be a model folder; a checkpoint is a file)."""
    return Path(path).is_dir()


def model_dir_files(cfg: dict[str, Any]) -> list[str]:
    """The files a model folder's ``config.json`` names (weights, SentencePiece models, CMVN, the pretrained
    encoder's config), relative."""
    data = cfg.get("data") or {}
    vocab = data.get("vocab") or {}
    files = [MODEL_WEIGHTS_FILE] + [v for k, v in vocab.items() if k != "per_lang" and v]
    files += list((vocab.get("per_lang") or {}).values())
    if data.get("gcmvn"):
        files.append(data["gcmvn"])
    model = cfg.get("model") or {}
    if model.get("encoder_type") == "hf" and model.get("hf_encoder_path"):
        files.append(f"{model['hf_encoder_path']}/config.json")
    return files


def read_model_config(model_dir: str | Path) -> dict[str, Any]:
    """Read and check ``MODEL_DIR/config.json``: its format, its keys, and that every file it names exists.

    Returns:
        The parsed ``config.json`` (paths in it are relative to ``model_dir``).

    Raises:
        CheckpointError: no such folder, no or unreadable ``config.json``, not an mmst model folder, a
            newer format version, a missing key, or a missing file (each message names the path).
    """
    d = Path(model_dir)
    path = d / MODEL_CONFIG_FILE
    if not d.is_dir():
        raise CheckpointError(f"model folder not found: {d}")
    if not path.is_file():
        raise CheckpointError(f"{path}: missing (is {d} a model folder written by mmst-export?)")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: cannot read ({e})") from None
    if not isinstance(cfg, dict) or cfg.get("format") != MODEL_FORMAT:
        raise CheckpointError(f"{path}: not an mmst model folder (missing format={MODEL_FORMAT!r})")
    if int(cfg.get("version", 0)) > MODEL_FORMAT_VERSION:
        raise CheckpointError(f"{path}: format version {cfg.get('version')} is newer than this mmst reads "
                              f"({MODEL_FORMAT_VERSION}); update mmst")
    for k in _MODEL_KEYS:
        if k not in cfg:
            raise CheckpointError(f"{path}: missing key {k!r}")
    for f in model_dir_files(cfg):
        if not (d / f).is_file():
            raise CheckpointError(f"{d / f}: missing (named by {path})")
    return cfg


def read_safetensors(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """All tensors of a ``.safetensors`` file (``safetensors.torch.load_file``: no pickle).

    Raises:
        CheckpointError: the file is missing or not a valid safetensors file (message names it).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: missing")
    try:
        return load_file(path, device=str(map_location))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None


def check_state_dict(path: str | Path, state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    """Raise when ``state`` (read from ``path``) does not fit a model whose state dict is ``expected``.

    Raises:
        CheckpointError: a missing or unexpected tensor, or a tensor of the wrong shape; the message
            names the file and every such tensor (the first 10) with both shapes.
    """
    problems = [f"tensor {k!r} missing" for k in expected if k not in state]
    problems += [f"unexpected tensor {k!r}" for k in state if k not in expected]
    problems += [f"tensor {k!r} has shape {tuple(v.shape)}, the model needs {tuple(expected[k].shape)}"
                 for k, v in state.items() if k in expected and tuple(v.shape) != tuple(expected[k].shape)]
    if problems:
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        raise CheckpointError(f"{path} does not match the model in its config.json: " + "; ".join(problems[:10])
                              + more)


def load_model_dir(model_dir: str | Path, map_location: str | torch.device = "cpu") -> tuple[Any, dict[str, Any]]:
    """Rebuild the model of an exported model folder (``config.json`` + ``model.safetensors``).

    Returns:
        ``(model in eval mode, info)``; ``info`` has the keys of a training checkpoint that decoding uses
        (``format`` = :data:`MODEL_FORMAT`, ``model_cfg`` (an ``hf_encoder_path`` made absolute), ``tgt_langs``, ``vocab_mode``, ``vocab``
        fingerprints with paths inside the folder, ``data_dir`` = ``None``) plus ``model_dir`` (absolute
        path) and ``data_config`` (the folder's ``data`` section).

    Raises:
        CheckpointError: see :func:`read_model_config`, :func:`read_safetensors`, :func:`check_state_dict`.
    """
    from mmst.models.config import ModelConfig
    from mmst.models.registry import build_model

    d = Path(model_dir).resolve()
    cfg = read_model_config(d)
    model_cfg = dict(cfg["model"])
    if model_cfg.get("encoder_type") == "hf" and model_cfg.get("hf_encoder_path"):
        model_cfg["hf_encoder_path"] = str(d / model_cfg["hf_encoder_path"])  # the folder's hf_encoder/
    try:
        model = build_model(ModelConfig.from_dict(model_cfg), pretrained_weights=False)
    except (TypeError, ValueError, KeyError, OSError) as e:
        raise CheckpointError(f"{d / MODEL_CONFIG_FILE}: bad 'model' section ({e})") from None
    weights = d / MODEL_WEIGHTS_FILE
    state = read_safetensors(weights, map_location)
    check_state_dict(weights, state, model.state_dict())
    model.load_state_dict(state)
    model.eval()

    def local(fp: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if not fp else {**fp, "path": str(d / fp["path"])}

    vocab = cfg.get("vocab") or {}
    info = {"format": MODEL_FORMAT, "model_dir": str(d), "model_cfg": model_cfg, "model_arch": model_cfg.get("arch"),
            "tgt_langs": list(cfg["tgt_langs"]), "vocab_mode": cfg["vocab_mode"], "data_dir": None,
            "vocab": {"tgt": {lang: local(fp) for lang, fp in (vocab.get("tgt") or {}).items()},
                      "src": local(vocab.get("src"))},
            "data_config": cfg["data"], "training": cfg.get("training") or {}}
    return model, info


def load_model(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[Any, dict[str, Any]]:
    """The one loader: an exported model folder (:func:`load_model_dir`) or a training checkpoint
    (:func:`load_model_from_checkpoint`), chosen by whether ``path`` is a directory.

    Returns:
        ``(model in eval mode, info)``: the checkpoint dict, or the folder's info (see :func:`load_model_dir`).

    Raises:
        CheckpointError: missing, unreadable, foreign or inconsistent model (the message names the file).
    """
    if is_model_dir(path):
        return load_model_dir(path, map_location)
    return load_model_from_checkpoint(path, map_location)
