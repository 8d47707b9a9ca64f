"""``torch.compile`` in training: the root config key ``compile`` (``false`` | ``true`` | ``blocks``).

- ``false``: eager (the default).
- ``true``: the whole model is compiled with ``dynamic=False`` (``nn.Module.compile``: parameters and
  checkpoints keep their names), one graph per batch shape. To keep the shapes few, every batch is padded
  to length buckets first (:func:`bucket_length`: frames, target and transcript tokens rounded up to one
  of 4 boundaries per octave, multiples of 8: about 19% longer at most); the padding this adds is logged
  (``bucket_pad_pct``). The batch size is not padded, so each (rows, bucket) pair is its own graph.
- ``blocks``: only the elementwise work between the matrix products is compiled
  (:class:`mmst.models.layers.ElementwiseBlocks`: residual + dropout + layer norm, ReLU + dropout) and
  the label-smoothed loss (:func:`mmst.losses.label_smoothed_nll_loss_dense`), with dynamic shapes; the
  matrix products stay eager (oneDNN on CPU, cuBLAS on GPU) and batches are not padded.

Both compiled modes count the graphs compiled (dynamo's ``unique_graphs``; ``compile_graphs`` in the
train log). Where inductor cannot run (no C++ compiler, an unsupported platform), a warning names the
error and training runs eager; so does an update whose compiled step fails (:meth:`TrainingCompiler.fall_back`:
the update is rerun eager and the rest of the run stays eager). Dropout draws different random numbers when
compiled, so a compiled run with dropout > 0 does not repeat an eager one number for number; exact resume is
checked in eager mode.

torch 2.13's on-disk AOTAutograd cache is switched off while compiling (``enable_autograd_cache``): with
it, a run whose graphs were cached by an earlier run of the same shapes fails at its first compiled step of
the whole model (a ``RuntimeError`` from ``gen_alias_from_base`` with an impossible view shape). Inductor's
own kernel cache stays on, so a second run still skips the C++ builds.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
import torch._functorch.config as functorch_config

from mmst.data.batching import Batch
from mmst.models.layers import EAGER_BLOCKS, ElementwiseBlocks

logger = logging.getLogger("mmst.train")

#: Values of the config key ``compile``.
COMPILE_CHOICES = (False, True, "blocks")


def bucket_length(n: int, per_octave: int = 4, multiple: int = 8) -> int:
    """The smallest length bucket ``>= n``: buckets are ``ceil(2**(i / per_octave))`` rounded up to a
    multiple of ``multiple`` (i = 0, 1, ...).

    With 4 per octave a padded length is at most ``2**(1/4)`` (19%) above ``n`` before the rounding up to a
    multiple of 8; e.g. 100 -> 112, 500 -> 512, 1000 -> 1024, 3000 -> 3448. ``n <= 0`` -> 0.
    """
    if n <= 0:
        return 0
    i = max(0, math.floor(per_octave * math.log2(n)) - 1)
    while True:
        b = math.ceil(math.ceil(2 ** (i / per_octave)) / multiple) * multiple
        if b >= n:
            return b
        i += 1


def _pad_to(t: torch.Tensor, length: int, dim: int, value: float) -> torch.Tensor:
    extra = length - t.size(dim)
    if extra <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t, t.new_full(shape, value)], dim=dim)


def pad_batch_to_buckets(batch: Batch, pad_id: int) -> Batch:
    """``batch`` with frames ``(B, T, 80)`` zero-padded to ``bucket_length(T)`` and targets, decoder
    inputs and transcripts pad-padded to the bucket of their length; lengths and token counts unchanged
    (the model masks frames past ``fbank_lengths``, the loss ignores ``pad_id``)."""
    fb = _pad_to(batch.fbank, bucket_length(batch.fbank.size(1)), 1, 0.0)
    tgt = {k: _pad_to(v, bucket_length(v.size(1)), 1, pad_id) for k, v in batch.target.items()}
    prev = {k: _pad_to(v, bucket_length(v.size(1)), 1, pad_id) for k, v in batch.prev_output_tokens.items()}
    src = _pad_to(batch.src_tokens, bucket_length(batch.src_tokens.size(1)), 1, pad_id)
    return Batch(ids=list(batch.ids), fbank=fb, fbank_lengths=batch.fbank_lengths, target=tgt,
                 prev_output_tokens=prev, src_tokens=src, src_lengths=batch.src_lengths,
                 ntokens=dict(batch.ntokens), indices=list(batch.indices))


def inductor_problem(device: torch.device | str = "cpu") -> str | None:
    """Compile and run a one-line function on ``device``; ``None`` when it works, else the error in one line."""
    try:
        torch._dynamo.reset()
        f = torch.compile(lambda x: torch.relu(x) * 2.0 + 1.0, dynamic=False)
        ok = bool((f(torch.ones(4, device=device)) == 3.0).all())
        torch._dynamo.reset()
        return None if ok else "a compiled test function returned a wrong value"
    except Exception as e:  # noqa: BLE001 - any backend failure means: run eager
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def _unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class TrainingCompiler:
    """Applies the ``compile`` mode to a model and its criterion, and prepares batches for it.

    Args:
        mode: one of :data:`COMPILE_CHOICES` (``"false"``/``"true"`` strings are accepted).
        model: the model (compiled in place: its parameters and state dict keep their names).
        criterion: ``mmst.losses.MultilingualCriterion`` (its ``token_loss`` is swapped when compiled).
        device: where training runs (inductor is tried there first).
        pad_id: padding id of targets and transcripts.

    Attributes:
        mode: the mode in effect (``False`` after a fallback to eager).

    Raises:
        ValueError: an unknown ``mode``.
    """

    def __init__(self, mode: Any, model: torch.nn.Module, criterion: Any, device: torch.device | str,
                 pad_id: int = 1) -> None:
        mode = {"false": False, "true": True}.get(mode, mode) if isinstance(mode, str) else mode
        if mode not in COMPILE_CHOICES:
            raise ValueError(f"compile must be one of false, true, blocks; got {mode!r}")
        self.pad_id = int(pad_id)
        self._frames = self._bucket_frames = 0
        self._model, self._criterion = model, criterion
        self._eager_token_loss = getattr(criterion, "token_loss", None)
        if mode is not False:
            functorch_config.enable_autograd_cache = False  # see the module docstring
            why = inductor_problem(device)
            if why is not None:
                logger.warning("compile=%s: torch.compile cannot run here (%s); training runs eager",
                               str(mode).lower(), why)
                mode = False
        self.mode = mode
        self._graphs0 = _unique_graphs()
        if mode is False:
            return
        from mmst.losses import label_smoothed_nll_loss_dense

        if mode is True:
            model.compile(dynamic=False)
            criterion.token_loss = torch.compile(label_smoothed_nll_loss_dense, dynamic=False)
        else:
            blocks = ElementwiseBlocks(lambda f: torch.compile(f, dynamic=True))
            for m in model.modules():
                if hasattr(m, "blocks") and isinstance(m.blocks, ElementwiseBlocks):
                    m.blocks = blocks
            criterion.token_loss = torch.compile(label_smoothed_nll_loss_dense, dynamic=True)
        logger.info("compile=%s: %s", str(mode).lower(), "the model, one graph per padded batch shape"
                    if mode is True else "the elementwise blocks and the loss, dynamic shapes")

    def prepare(self, batch: Batch) -> Batch:
        """The batch the compiled model gets: padded to length buckets for ``compile: true``, else as is."""
        if self.mode is not True:
            return batch
        out = pad_batch_to_buckets(batch, self.pad_id)
        self._frames += int(batch.fbank.shape[0] * batch.fbank.shape[1])
        self._bucket_frames += int(out.fbank.shape[0] * out.fbank.shape[1])
        return out

    def fall_back(self, error: BaseException) -> None:
        """Undo the compilation after ``error`` (raised by a compiled step): warn, naming the error, and put the
        eager forward, blocks and loss back; the caller reruns the step. ``mode`` becomes ``False``."""
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        logger.warning("compile=%s: a compiled step failed (%s: %s); this update is rerun eager and training "
                       "continues eager", str(self.mode).lower(), type(error).__name__, first[:300])
        self._model._compiled_call_impl = None  # what nn.Module.compile set
        for m in self._model.modules():
            if isinstance(getattr(m, "blocks", None), ElementwiseBlocks):
                m.blocks = EAGER_BLOCKS
        if self._eager_token_loss is not None:
            self._criterion.token_loss = self._eager_token_loss
        self.mode = False

    @property
    def graphs(self) -> int:
        """Graphs compiled since this object was made (each new batch shape of ``true`` is one)."""
        return _unique_graphs() - self._graphs0

    def window_stats(self) -> dict[str, float]:
        """``compile_graphs`` (so far) and, for ``true``, ``bucket_pad_pct`` (frames the buckets added, % of
        the padded frames) since the last call; ``{}`` when eager."""
        if self.mode is False:
            return {}
        out: dict[str, float] = {"compile_graphs": float(self.graphs)}
        if self._bucket_frames:
            out["bucket_pad_pct"] = 100.0 * (self._bucket_frames - self._frames) / self._bucket_frames
        self._frames = self._bucket_frames = 0
        return out
