"""Reading mmst checkpoints: strict loading, vocabulary compatibility, rebuilding the model.

The write side (atomic saves, rotation, RNG capture, exact resume) is :mod:`mmst.training.checkpoint`;
the format is described there. Everything here only reads, so evaluation and the SimulEval agent load
models without importing the trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FORMAT = "mmst-checkpoint"
"""Value of the ``format`` key of every mmst checkpoint."""


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
    model = build_model(ModelConfig.from_dict(ckpt["model_cfg"]))
    model.load_state_dict(ckpt["model"])
    model.eval()
    return model, ckpt
