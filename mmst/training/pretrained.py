"""``--load-pretrained-encoder-from``: initialise our speech encoder from a fairseq s2t_transformer
checkpoint (the usual ASR-pretraining workflow of SimulST) or from an mmst checkpoint.

Name mapping fairseq -> mmst (applied to keys of ``ckpt["model"]``)::

    encoder.subsample.conv_layers.<i>.{weight,bias}            -> encoder.subsample.conv_layers.<i>.*
    encoder.transformer_layers.<n>.self_attn.{q,k,v,out}_proj.* -> encoder.layers.<n>.self_attn.*
    encoder.transformer_layers.<n>.self_attn_layer_norm.*      -> encoder.layers.<n>.self_attn_layer_norm.*
    encoder.transformer_layers.<n>.{fc1,fc2,final_layer_norm}.* -> encoder.layers.<n>.*
    encoder.layer_norm.*                                       -> encoder.layer_norm.*

Everything else (decoder, ``encoder.embed_positions._float_tensor``, CTC projection, ...) is reported as
not loaded. Our encoder must be pre-LN (fairseq ``encoder_normalize_before=True``, the s2t default for
``s2t_transformer_s``) for the weights to mean the same thing.

Safety: our own checkpoints load with ``torch.load(weights_only=True)``. A fairseq checkpoint usually
pickles an ``argparse.Namespace`` (``args``) and sometimes an omegaconf ``cfg``; we first try
``weights_only=True`` with ``argparse.Namespace`` allow-listed (``torch.serialization.safe_globals``),
which loads most fairseq s2t checkpoints safely. Only if that fails do we fall back to
``weights_only=False`` - which can execute arbitrary code from the file - and only when the user opts
in with ``checkpoint.allow_unsafe_pickle=true`` or the environment variable
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (the same opt-in torch itself honours). Never enable it for
files you do not trust.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mmst.training.checkpoint import CHECKPOINT_FORMAT, CheckpointError

logger = logging.getLogger(__name__)

#: the reason recorded for a checkpoint key outside the encoder (a decoder, a CTC head: expected, not a problem)
NOT_ENCODER = "not an encoder parameter of ours"

_FAIRSEQ_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^encoder\.subsample\.conv_layers\.(\d+)\.(weight|bias)$"), r"encoder.subsample.conv_layers.\1.\2"),
    (re.compile(r"^encoder\.transformer_layers\.(\d+)\.(.+)$"), r"encoder.layers.\1.\2"),
    (re.compile(r"^encoder\.layer_norm\.(weight|bias)$"), r"encoder.layer_norm.\1"),
]


@dataclass
class PretrainedLoadReport:
    """What :func:`load_pretrained_encoder` did.

    Attributes:
        source: ``"fairseq"`` or ``"mmst"``.
        loaded: our parameter names that were set.
        not_loaded: ``{checkpoint key: reason}`` for every checkpoint key that was NOT used.
        missing: our encoder parameters that the checkpoint did not provide (keep their init).
    """

    source: str
    loaded: list[str] = field(default_factory=list)
    not_loaded: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def unused_prefixes(self) -> dict[str, int]:
        """``{"decoders.*": n, ...}``: the checkpoint keys not used, counted by their first name component."""
        out: dict[str, int] = {}
        for k in sorted(self.not_loaded):
            prefix = k.split(".", 1)[0] + ".*" if "." in k else k
            out[prefix] = out.get(prefix, 0) + 1
        return out

    def log(self, path: str | Path) -> None:
        """Log the report: one INFO line (tensors loaded; checkpoint keys not used, counted by prefix), the
        unused keys one per line at DEBUG, and a WARNING for our encoder parameters the checkpoint did not
        provide and for encoder keys it has that could not be used (name or shape)."""
        unused = ", ".join(f"{p} {n}" for p, n in self.unused_prefixes().items())
        logger.info("pretrained encoder (%s) %s: loaded %d tensors; %d checkpoint keys not used%s",
                    self.source, path, len(self.loaded), len(self.not_loaded), f" ({unused})" if unused else "")
        for k, why in sorted(self.not_loaded.items()):
            logger.debug("  not used: %s (%s)", k, why)
        bad = {k: why for k, why in self.not_loaded.items() if why != NOT_ENCODER}
        if self.missing or bad:
            logger.warning("pretrained encoder %s: %d encoder parameters missing (kept their initialisation)%s%s",
                           path, len(self.missing), ": " + ", ".join(self.missing) if self.missing else "",
                           "; encoder keys not usable: " + ", ".join(f"{k} ({why})" for k, why in sorted(bad.items()))
                           if bad else "")

    def summary(self) -> str:
        """Multi-line human-readable report listing every key not loaded and every missing one."""
        lines = [f"pretrained encoder ({self.source}): loaded {len(self.loaded)} tensors, "
                 f"{len(self.not_loaded)} checkpoint keys not loaded, {len(self.missing)} encoder keys missing"]
        lines += [f"  not loaded: {k} ({why})" for k, why in sorted(self.not_loaded.items())]
        lines += [f"  missing (kept initialisation): {k}" for k in sorted(self.missing)]
        return "\n".join(lines)


def _unsafe_allowed(allow_unsafe_pickle: bool) -> bool:
    return allow_unsafe_pickle or os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0") not in ("", "0")


def load_foreign_checkpoint(path: str | Path, allow_unsafe_pickle: bool = False) -> dict[str, Any]:
    """Load a (possibly fairseq) checkpoint file for encoder initialisation (see module docstring).

    Raises:
        CheckpointError: missing file; or the file needs ``weights_only=False`` and the user did not
            opt in (message says how).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"pretrained checkpoint not found: {path}")
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # unpickling error: needs arbitrary globals
        if not _unsafe_allowed(allow_unsafe_pickle):
            raise CheckpointError(
                f"{path} cannot be loaded with torch.load(weights_only=True) ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:200]}). If it is a fairseq checkpoint you TRUST, rerun with "
                "checkpoint.allow_unsafe_pickle=true (or TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1): this "
                "unpickles the file with weights_only=False, which can execute code from it.") from e
        logger.warning("loading %s with torch.load(weights_only=False) (opted in; trusted file only)", path)
        return torch.load(path, map_location="cpu", weights_only=False)


def _is_fairseq(state: dict[str, Any]) -> bool:
    return any(k.startswith("encoder.transformer_layers.") or k.startswith("encoder.subsample.") for k in state) \
        and not any(k.startswith("encoder.layers.") for k in state)


def map_fairseq_encoder_key(key: str) -> str | None:
    """Our parameter name for a fairseq s2t_transformer key, or None when it has no counterpart."""
    for pat, repl in _FAIRSEQ_RULES:
        if pat.match(key):
            return pat.sub(repl, key)
    return None


def load_pretrained_encoder(model: torch.nn.Module, path: str | Path, allow_unsafe_pickle: bool = False,
                            strict_shapes: bool = True) -> PretrainedLoadReport:
    """Copy encoder weights from ``path`` into ``model.encoder`` (by name; see module docstring).

    Args:
        model: a model whose encoder parameters are named ``encoder.*`` in ``model.state_dict()``.
        path: fairseq s2t_transformer checkpoint or mmst checkpoint.
        allow_unsafe_pickle: see module docstring.
        strict_shapes: a shape mismatch raises (True) or is reported as not loaded (False).

    Returns:
        A :class:`PretrainedLoadReport`, also logged (:meth:`PretrainedLoadReport.log`: one INFO line,
        the unused keys at DEBUG, a WARNING for missing or unusable encoder keys).

    Raises:
        CheckpointError: unreadable file, no ``model`` state dict, no encoder key at all, or a shape
            mismatch when ``strict_shapes``.
    """
    ckpt = load_foreign_checkpoint(path, allow_unsafe_pickle)
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
        raise CheckpointError(f"{path}: no 'model' state dict in the checkpoint")
    state: dict[str, torch.Tensor] = ckpt["model"]
    ours = model.state_dict()
    enc_keys = [k for k in ours if k.startswith("encoder.")]
    source = "mmst" if ckpt.get("format") == CHECKPOINT_FORMAT else ("fairseq" if _is_fairseq(state) else "mmst")
    report = PretrainedLoadReport(source=source)
    new: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if not torch.is_tensor(v):
            report.not_loaded[k] = "not a tensor"
            continue
        if source == "fairseq":
            tgt = map_fairseq_encoder_key(k)
        else:
            tgt = k if k.startswith("encoder.") else None
        if tgt is None:
            report.not_loaded[k] = NOT_ENCODER
            continue
        if tgt not in ours:
            report.not_loaded[k] = f"mapped to {tgt}, which our encoder does not have"
            continue
        if tuple(ours[tgt].shape) != tuple(v.shape):
            msg = f"shape {tuple(v.shape)} != ours {tuple(ours[tgt].shape)} ({tgt})"
            if strict_shapes:
                raise CheckpointError(f"{path}: {k}: {msg}")
            report.not_loaded[k] = msg
            continue
        new[tgt] = v
    if not new:
        raise CheckpointError(f"{path}: no encoder parameter could be mapped to our model "
                              f"({len(state)} keys, e.g. {list(state)[:3]})")
    with torch.no_grad():
        for name, v in new.items():
            ours[name].copy_(v.to(ours[name].dtype))
    report.loaded = sorted(new)
    report.missing = sorted(k for k in enc_keys if k not in new)
    report.log(path)
    return report
