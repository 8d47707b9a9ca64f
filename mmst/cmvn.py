"""Cepstral mean and variance normalisation (CMVN) of fbank features.

:class:`CMVNAccumulator` gathers float64 streaming sums over training features and yields a
:class:`GlobalCMVN` (saved as ``gcmvn.npz`` with keys ``mean`` and ``std``, fairseq-compatible);
:func:`utterance_cmvn` is the per-utterance alternative. Both act on numpy arrays or torch tensors
``(..., 80)`` from :mod:`mmst.features`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from mmst.atomic import atomic_path


def _as_backend(arr: np.ndarray, like: Any) -> Any:
    """Return ``arr`` as the array type of ``like`` (numpy or torch, same device and dtype)."""
    if isinstance(like, np.ndarray):
        return arr.astype(like.dtype if np.issubdtype(like.dtype, np.floating) else np.float32, copy=False)
    import torch  # local import: data prep must not require torch

    if isinstance(like, torch.Tensor):
        dtype = like.dtype if like.is_floating_point() else torch.float32
        return torch.as_tensor(arr, dtype=dtype, device=like.device)
    raise TypeError(f"expected numpy array or torch tensor, got {type(like).__name__}")


@dataclass
class GlobalCMVN:
    """Global mean/variance normalisation: ``(feats - mean) / std`` per feature dimension.

    Attributes:
        mean: float32 ``(80,)``.
        std: float32 ``(80,)``, strictly positive.
        count: number of frames the statistics came from (0 if unknown).
    """

    mean: np.ndarray
    std: np.ndarray
    count: int = 0

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> GlobalCMVN:
        """Load ``gcmvn.npz`` (keys ``mean``, ``std``; optional ``count``).

        Raises:
            FileNotFoundError: missing file. ValueError: missing keys, bad shapes or non-positive std.
        """
        with np.load(os.fspath(path)) as z:
            if "mean" not in z or "std" not in z:
                raise ValueError(f"{path}: gcmvn file must contain 'mean' and 'std', has {list(z.keys())}")
            mean = np.asarray(z["mean"], dtype=np.float32)
            std = np.asarray(z["std"], dtype=np.float32)
            count = int(z["count"]) if "count" in z else 0
        if mean.ndim != 1 or mean.shape != std.shape:
            raise ValueError(f"{path}: mean/std must be 1-D of equal shape, got {mean.shape} and {std.shape}")
        if not (np.isfinite(mean).all() and np.isfinite(std).all() and (std > 0).all()):
            raise ValueError(f"{path}: mean/std must be finite and std > 0")
        return cls(mean=mean, std=std, count=count)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``gcmvn.npz`` atomically (keys ``mean``, ``std``, ``count``)."""
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, mean=self.mean.astype(np.float32), std=self.std.astype(np.float32),
                     count=np.int64(self.count))

    def __call__(self, feats: Any) -> Any:
        """Normalise features: ``(feats - mean) / std`` over the last dimension.

        Args:
            feats: numpy array or torch tensor ``(..., 80)`` (e.g. ``(T, 80)`` or ``(B, T, 80)``).

        Returns:
            Same type, shape, device (and float dtype) as ``feats``.
        """
        if feats.shape[-1] != self.mean.shape[0]:
            raise ValueError(f"GlobalCMVN: feature dim {feats.shape[-1]} != {self.mean.shape[0]}")
        return (feats - _as_backend(self.mean, feats)) / _as_backend(self.std, feats)

    cmvn = __call__
    normalize = __call__


class CMVNAccumulator:
    """Streaming float64 sums for global CMVN (count, sum, sum of squares per dimension).

    Order-independent up to float64 rounding; feed utterances in a fixed order for bit-identical
    results. ``var = E[x^2] - E[x]^2`` computed in float64 and floored at ``min_std**2``.
    """

    def __init__(self, dim: int = 80) -> None:  # 80 = mmst.features.NUM_MEL_BINS
        self.dim = dim
        self.count = 0
        self.sum = np.zeros(dim, dtype=np.float64)
        self.sumsq = np.zeros(dim, dtype=np.float64)

    def add(self, feats: np.ndarray) -> None:
        """Add the frames of one utterance, ``(T, dim)``."""
        f = np.asarray(feats, dtype=np.float64)
        if f.ndim != 2 or f.shape[1] != self.dim:
            raise ValueError(f"CMVNAccumulator.add: expected (T, {self.dim}), got {f.shape}")
        self.add_stats(f.shape[0], f.sum(axis=0), np.square(f).sum(axis=0))

    def add_stats(self, count: int, sum_: np.ndarray, sumsq: np.ndarray) -> None:
        """Add precomputed sums (``count`` frames, ``sum`` and ``sumsq`` each ``(dim,)`` float64)."""
        self.count += int(count)
        self.sum += np.asarray(sum_, dtype=np.float64)
        self.sumsq += np.asarray(sumsq, dtype=np.float64)

    def finalize(self, min_std: float = 1e-3) -> GlobalCMVN:
        """Return the :class:`GlobalCMVN`. Raises ``ValueError`` when no frame was added."""
        if self.count == 0:
            raise ValueError("CMVNAccumulator.finalize: no frames were added")
        mean = self.sum / self.count
        var = np.maximum(self.sumsq / self.count - mean**2, min_std**2)
        return GlobalCMVN(mean=mean.astype(np.float32), std=np.sqrt(var).astype(np.float32), count=self.count)


def utterance_cmvn(feats: Any, norm_vars: bool = True, eps: float = 1e-5) -> Any:
    """Per-utterance CMVN over the time axis (the alternative to :class:`GlobalCMVN`).

    Args:
        feats: numpy or torch ``(T, D)`` features of one utterance.
        norm_vars: also divide by the per-dimension std (floored at ``sqrt(eps)``).
        eps: variance floor.

    Returns:
        Same type and shape as ``feats``.
    """
    mean = feats.mean(axis=0) if isinstance(feats, np.ndarray) else feats.mean(dim=0)
    out = feats - mean
    if norm_vars:
        if isinstance(feats, np.ndarray):
            out = out / np.sqrt(np.maximum((out**2).mean(axis=0), eps))
        else:
            out = out / (out.pow(2).mean(dim=0).clamp_min(eps)).sqrt()
    return out
