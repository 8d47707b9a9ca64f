"""SpecAugment on fbank features, per utterance, at training time (Park et al. 2019).

The options and their semantics are fairseq's ``SpecAugmentTransform`` (``fairseq/data/audio/
feature_transforms/specaugment.py``), applied, as there, to one ``(T, 80)`` utterance after global CMVN:

1. time warp (``time_warp_W = W``, 0 = off): a centre ``w0`` drawn from ``[W, T - W)`` and a shift
   ``w`` from ``(-W, W)``; frames ``[0, w0)`` are stretched to ``w0 + w`` frames and ``[w0, T)`` to
   ``T - w0 - w`` frames by linear interpolation along time (fairseq's ``cv2.resize``; the paper uses a
   sparse image warp). The number of frames is unchanged. Skipped when ``2 W >= T``.
2. ``freq_mask_N`` frequency masks: width ``f`` drawn from ``[0, freq_mask_F)``, start ``f0`` from
   ``[0, 80 - f)``; channels ``[f0, f0 + f)`` are set to the mask value.
3. ``time_mask_N`` time masks: width ``t`` drawn from ``[0, T')`` with
   ``T' = min(time_mask_T, floor(time_mask_p * T))`` (no time mask when ``T' < 1``), start ``t0`` from
   ``[0, T - t)``; frames ``[t0, t0 + t)`` are set to the mask value.

The mask value is ``mask_value``, or the mean of the utterance's features when it is ``None`` (fairseq's
default; after global CMVN that mean is close to 0).

Presets (:data:`SPECAUGMENT_POLICIES`) are fairseq's ``S2TDataConfigWriter`` policies (the paper's
LB/LD/SM/SS with time warp off, as fairseq uses them): LB ``F=27 mF=1 T=100 mT=1 p=1.0``, LD ``F=27 mF=2
T=100 mT=2 p=1.0``, SM ``F=15 mF=2 T=70 mT=2 p=0.2``, SS ``F=27 mF=2 T=70 mT=2 p=0.2``. The paper's
``W = 80`` is ``time_warp_W: 80``.

fairseq's config writer spells the warp key ``time_wrap_W``, which its transform never reads (so warping
is silently off there). :func:`specaugment_from_config` accepts that spelling for ``time_warp_W`` and
warns.

Determinism: every draw comes from ``numpy.random.default_rng([seed, STREAM, epoch, index])`` of the
utterance (:func:`augment_rng`), so the masks of an utterance depend only on the seed, the epoch and its
dataset index, not on batch order, worker processes or what ran before; a resumed run draws the same
masks as an uninterrupted one.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch

SPECAUGMENT_POLICIES: dict[str, dict[str, float]] = {
    "LB": {"freq_mask_N": 1, "freq_mask_F": 27, "time_mask_N": 1, "time_mask_T": 100, "time_mask_p": 1.0,
           "time_warp_W": 0},
    "LD": {"freq_mask_N": 2, "freq_mask_F": 27, "time_mask_N": 2, "time_mask_T": 100, "time_mask_p": 1.0,
           "time_warp_W": 0},
    "SM": {"freq_mask_N": 2, "freq_mask_F": 15, "time_mask_N": 2, "time_mask_T": 70, "time_mask_p": 0.2,
           "time_warp_W": 0},
    "SS": {"freq_mask_N": 2, "freq_mask_F": 27, "time_mask_N": 2, "time_mask_T": 70, "time_mask_p": 0.2,
           "time_warp_W": 0},
}
"""fairseq's SpecAugment policies (``S2TDataConfigWriter.set_specaugment_*_policy``)."""

MISSPELLED_KEYS = {"time_wrap_W": "time_warp_W"}
"""Spellings accepted with a warning (fairseq's config writer writes ``time_wrap_W``)."""

STREAM = 0x5A4D
"""Constant in the RNG seed sequence that separates SpecAugment draws from other seeded streams."""

_INT_KEYS = ("freq_mask_N", "freq_mask_F", "time_mask_N", "time_mask_T", "time_warp_W")


@dataclass(frozen=True)
class MaskDraw:
    """The random choices of one SpecAugment application (for inspection and tests).

    Attributes:
        warp: ``(w0, w)`` centre frame and shift in frames, or ``None`` (no warp).
        freq: ``(f0, f)`` start channel and width of each frequency mask (width 0 = no-op).
        time: ``(t0, t)`` start frame and width of each time mask (width 0 = no-op).
    """

    warp: tuple[int, int] | None = None
    freq: list[tuple[int, int]] = field(default_factory=list)
    time: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class SpecAugment:
    """SpecAugment parameters with fairseq's key names (see the module docstring for the rules).

    Attributes:
        freq_mask_N: number of frequency masks (mF).
        freq_mask_F: frequency masks are narrower than this many channels (F).
        time_mask_N: number of time masks (mT).
        time_mask_T: time masks are narrower than this many frames (T).
        time_mask_p: a time mask covers less than this share of the utterance (p). Default 1.0 (the
            paper's LB/LD value); fairseq's default when the key is absent is 0.0, which disables time masks.
        time_warp_W: time warp parameter in frames (W, 0 = off).
        mask_value: value written into masks; ``None`` = the utterance's mean.

    Raises:
        ValueError: a negative count or width, ``time_mask_p`` outside ``[0, 1]``, or masks requested
            with a zero maximum width (fairseq asserts the same).
    """

    freq_mask_N: int = 0
    freq_mask_F: int = 0
    time_mask_N: int = 0
    time_mask_T: int = 0
    time_mask_p: float = 1.0
    time_warp_W: int = 0
    mask_value: float | None = None

    def __post_init__(self) -> None:
        for k in _INT_KEYS:
            if getattr(self, k) < 0:
                raise ValueError(f"SpecAugment {k}: must be >= 0, got {getattr(self, k)}")
        if not 0.0 <= self.time_mask_p <= 1.0:
            raise ValueError(f"SpecAugment time_mask_p: must be in [0, 1], got {self.time_mask_p}")
        if self.freq_mask_N > 0 and self.freq_mask_F <= 0:
            raise ValueError(f"SpecAugment freq_mask_F: must be > 0 when freq_mask_N={self.freq_mask_N}")
        if self.time_mask_N > 0 and self.time_mask_T <= 0:
            raise ValueError(f"SpecAugment time_mask_T: must be > 0 when time_mask_N={self.time_mask_N}")

    @property
    def active(self) -> bool:
        """True when some mask or warp can change a feature matrix."""
        return self.freq_mask_N > 0 or self.time_mask_N > 0 or self.time_warp_W > 0

    def to_dict(self) -> dict[str, Any]:
        """The parameters under fairseq's keys (for logs and ``config.yaml``-style dumps)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def draw(self, num_frames: int, num_freqs: int, rng: np.random.Generator) -> MaskDraw:
        """Draw warp and masks for a ``(num_frames, num_freqs)`` matrix (fairseq's order and ranges).

        Returns an empty :class:`MaskDraw` when ``num_frames == 0`` or ``num_freqs < freq_mask_F``
        (fairseq returns the input unchanged then).
        """
        if num_frames == 0 or num_freqs < self.freq_mask_F:
            return MaskDraw()
        warp = None
        W = self.time_warp_W
        if W > 0 and 2 * W < num_frames:
            w0 = int(rng.integers(W, num_frames - W))
            w = int(rng.integers(-W + 1, W))
            warp = (w0, w)
        freq = []
        for _ in range(self.freq_mask_N):
            f = int(rng.integers(0, self.freq_mask_F))
            f0 = int(rng.integers(0, num_freqs - f))
            freq.append((f0, f))
        time = []
        max_t = min(self.time_mask_T, math.floor(num_frames * self.time_mask_p))
        if max_t >= 1:
            for _ in range(self.time_mask_N):
                t = int(rng.integers(0, max_t))
                t0 = int(rng.integers(0, num_frames - t))
                time.append((t0, t))
        return MaskDraw(warp, freq, time)

    def apply(self, feats: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        """Return an augmented copy of ``feats``.

        Args:
            feats: ``(T, F)`` float tensor (one utterance, CMVN applied); not modified.
            rng: the utterance's generator (:func:`augment_rng`).

        Returns:
            ``(T, F)`` tensor, same dtype; ``feats`` itself when nothing is active.

        Raises:
            ValueError: ``feats`` is not 2-D.
        """
        if feats.dim() != 2:
            raise ValueError(f"SpecAugment: expected a (T, F) matrix, got shape {tuple(feats.shape)}")
        if not self.active:
            return feats
        T, F = int(feats.shape[0]), int(feats.shape[1])
        d = self.draw(T, F, rng)
        out = feats.clone()
        mask_value = float(feats.mean()) if self.mask_value is None and T > 0 else float(self.mask_value or 0.0)
        if d.warp is not None:
            w0, w = d.warp
            out = torch.cat([_resize_time(out[:w0], w0 + w), _resize_time(out[w0:], T - w0 - w)], dim=0)
        for f0, f in d.freq:
            if f:
                out[:, f0: f0 + f] = mask_value
        for t0, t in d.time:
            if t:
                out[t0: t0 + t, :] = mask_value
        return out


def _resize_time(x: torch.Tensor, n: int) -> torch.Tensor:
    """Linear resize of ``(T, F)`` to ``(n, F)`` along time (half-pixel centres, as ``cv2.INTER_LINEAR``)."""
    y = torch.nn.functional.interpolate(x.t().unsqueeze(0), size=n, mode="linear", align_corners=False)
    return y.squeeze(0).t().contiguous()


def specaugment_from_config(policy: str | None = None, params: Mapping[str, Any] | None = None,
                            where: str = "specaugment") -> SpecAugment | None:
    """Build :class:`SpecAugment` from a policy name and/or fairseq-style keys.

    Args:
        policy: ``"none"``/``None`` or one of :data:`SPECAUGMENT_POLICIES` (case-insensitive).
        params: fairseq ``SpecAugmentTransform`` keys (``freq_mask_N``, ``freq_mask_F``, ``time_mask_N``,
            ``time_mask_T``, ``time_mask_p``, ``time_warp_W``, ``mask_value``); they override the policy's
            values. ``time_wrap_W`` (fairseq's config writer's spelling) is read as ``time_warp_W`` with
            a :class:`UserWarning`.
        where: name used in error messages (e.g. the config key).

    Returns:
        the parameters, or ``None`` when neither a policy nor any key is given.

    Raises:
        ValueError: unknown policy or key, a non-integer count/width, both spellings with different
            values, or invalid values (see :class:`SpecAugment`).
    """
    name = (policy or "none").strip()
    base: dict[str, Any] = {}
    if name.lower() != "none":
        if name.upper() not in SPECAUGMENT_POLICIES:
            raise ValueError(f"{where}: unknown SpecAugment policy {policy!r} "
                             f"(none, {', '.join(SPECAUGMENT_POLICIES)})")
        base = dict(SPECAUGMENT_POLICIES[name.upper()])
    known = {f.name for f in fields(SpecAugment)}
    given: dict[str, Any] = {}
    for k, v in (params or {}).items():
        key = k
        if k in MISSPELLED_KEYS:
            key = MISSPELLED_KEYS[k]
            warnings.warn(f"{where}.{k}: read as {key} (fairseq's config writer spells it {k}, which "
                          "fairseq's SpecAugmentTransform ignores); please write " + key, UserWarning, stacklevel=2)
            if key in (params or {}) and (params or {})[key] != v:
                raise ValueError(f"{where}: both {k}={v} and {key}={(params or {})[key]} given")
        elif k not in known:
            raise ValueError(f"{where}.{k}: unknown SpecAugment key (known: {', '.join(sorted(known))}; "
                             "time_wrap_W is accepted for time_warp_W)")
        given[key] = v
    if not base and not given:
        return None
    merged = {**base, **given}
    for k in _INT_KEYS:
        if k in merged:
            v = merged[k]
            if isinstance(v, bool) or not float(v).is_integer():
                raise ValueError(f"{where}.{k}: expected an integer, got {v!r}")
            merged[k] = int(v)
    if "time_mask_p" in merged:
        merged["time_mask_p"] = float(merged["time_mask_p"])
    try:
        return SpecAugment(**merged)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from e


def augment_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator of utterance ``index`` in ``epoch`` (1-based epochs, 0-based dataset indices)."""
    return np.random.default_rng([int(seed), STREAM, int(epoch), int(index)])


class FeatureAugment:
    """Training-time feature augmentation of a dataset's items (currently SpecAugment).

    Args:
        specaugment: the SpecAugment parameters (``None`` = off).
        seed: the training seed (``cfg.seed``).

    Call :meth:`__call__` with the epoch and the utterance's dataset index; the result is a new tensor
    (the input, possibly a cached feature matrix, is never modified).
    """

    def __init__(self, specaugment: SpecAugment | None, seed: int) -> None:
        self.specaugment = specaugment
        self.seed = int(seed)

    @property
    def active(self) -> bool:
        """True when some augmentation can change features."""
        return self.specaugment is not None and self.specaugment.active

    def __call__(self, feats: torch.Tensor, epoch: int, index: int) -> torch.Tensor:
        """Augment ``(T, F)`` ``feats`` of utterance ``index`` in ``epoch``; returns ``(T, F)``."""
        if not self.active:
            return feats
        assert self.specaugment is not None
        return self.specaugment.apply(feats, augment_rng(self.seed, epoch, index))


class SpeedPerturbError(ValueError):
    """A DATA directory has no speed-perturbed copy of a split with the requested factors."""


def speed_perturbed_split(data_cfg: Mapping[str, Any], split: str, factors: list[float] | tuple[float, ...],
                          data_dir: str = "DATA") -> str:
    """Name of the manifest that holds ``split`` with speed-perturbed copies at ``factors``.

    The copies are made at prep time (``data_prep/speed_perturb.py``, :mod:`mmst.corpora.speed_perturb`),
    which records them in ``DATA/config.yaml`` as ``speed_perturb: {<split>: {manifest, factors, features}}``.

    Args:
        data_cfg: ``DATA/config.yaml`` as a dict.
        split: the plain split (``data.train_subset``).
        factors: the requested factors (order ignored; ``1.0`` = the original utterances).
        data_dir: the DATA directory, for the error message.

    Raises:
        SpeedPerturbError: no such entry, or it was built with other factors (the message gives the
            command that builds it).
    """
    want = sorted(round(float(f), 6) for f in factors)
    entry = (data_cfg.get("speed_perturb") or {}).get(split)
    hint = (f"build it with: python data_prep/speed_perturb.py --data {data_dir} --split {split} "
            f"--factors {','.join(f'{f:g}' for f in want)}")
    if not entry:
        raise SpeedPerturbError(f"{data_dir}/config.yaml: no speed-perturbed copy of split {split!r}; {hint}")
    have = sorted(round(float(f), 6) for f in entry.get("factors", []))
    if have != want:
        raise SpeedPerturbError(f"{data_dir}/config.yaml: the speed-perturbed copy of {split!r} has factors {have}, "
                                f"not {want}; {hint}")
    return str(entry["manifest"])
