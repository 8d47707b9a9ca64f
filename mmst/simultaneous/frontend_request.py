"""The front end of several streams in one call: global CMVN and the conv subsampler, stacked.

A compute request (:mod:`mmst.models.stacked`) that a stream's :class:`~mmst.simultaneous.incremental.
StreamingFrontEnd` yields with the fbank frames of its new samples, so a server stacks the front ends of
all the streams of a tick, as it stacks their encoder blocks and decoder steps:

* fbank: computed per stream by kaldi-native-fbank when the samples arrive (an online extractor per
  stream, no batched API; about 2% of a stream's compute);
* global CMVN: one call over the frames of every stream of the group (element-wise, so each row is
  exactly what it is alone);
* conv subsampler (:class:`mmst.models.encoder.Conv1dSubsampler`, 2 stride-2 convs + GLU): per conv
  layer, ONE ``conv1d`` over every stream's window of new outputs. A stream's window is the input rows
  its new outputs read (zero-padded at the utterance's start and, once the source is finished, its end,
  exactly as :meth:`~mmst.models.encoder.Conv1dSubsampler.conv_range` pads it alone); windows of
  different lengths are right-padded to the longest, and each stream keeps only its own outputs, whose
  receptive fields never reach the padding. The conv outputs are appended to the stream's
  :class:`~mmst.models.encoder.EncoderStream` buffers; the stream then embeds them and yields its
  encoder block as before.

Stacked and alone agree to float rounding of the batched conv (tested to 1e-5; oneDNN may block a
batch of windows differently from one window); :meth:`FrontEndFrames.run` (alone) is the encoder's own
``conv_range`` path, so a stream computed alone is bit for bit what it was before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mmst.models.encoder import EncoderStream, _conv_out_len


@dataclass
class FrontEndFrames:
    """Compute request: CMVN and the conv subsampler over one stream's new fbank frames.

    Attributes:
        stream: the stream's :class:`~mmst.models.encoder.EncoderStream` (its conv buffers grow).
        frames: float32 ``(n, 80)`` new fbank frames (10 ms each, before CMVN; ``n`` may be 0 when
            only ``finished`` is new).
        cmvn: callable ``(n, 80) -> (n, 80)`` (``mmst.features.GlobalCMVN``) or None.
        finished: these are the source's last frames (the remaining conv outputs see zero padding).

    The result is None: the conv outputs are in ``stream``'s buffers, ready for
    ``stream.accept_frames_steps(<no frames>, finished)`` to embed and encode.
    """

    stage = 1  # pipeline order (mmst.models.stacked): VAD 0, front end and encoder 1, decoder 2

    stream: EncoderStream
    frames: np.ndarray
    cmvn: Any = None
    finished: bool = False
    _cmvn_done: bool = field(default=False, repr=False)

    def stack_key(self) -> tuple:
        return ("frontend", id(self.stream.encoder), id(self.cmvn))

    def save_state(self):
        """A function that puts the stream's conv buffers and frame count back as they are now (undoes
        this request after a failed stacked call, :mod:`mmst.models.stacked`)."""
        bufs = self.stream._bufs
        ends = [b.end for b in bufs]
        n_frames = self.stream.num_frames

        def restore() -> None:
            for b, e in zip(bufs, ends):
                b.length = e - b.start
            self.stream.num_frames = n_frames
        return restore

    # ------------------------------------------------------------------ alone
    @torch.no_grad()
    def run(self) -> None:
        """This stream alone: CMVN, then each conv layer's new outputs by ``conv_range``."""
        self._append_input(self._normalized())
        sub = self.stream.encoder.subsample
        for layer in range(len(sub.kernel_sizes)):
            todo = self._todo(layer)
            if todo is not None:
                inp, first, n_total, done, ready = todo
                self.stream._bufs[layer + 1].append(sub.conv_range(layer, inp, n_total, done, ready, first))

    # ------------------------------------------------------------------ stacked
    @classmethod
    @torch.no_grad()
    def run_stacked(cls, reqs: list[FrontEndFrames]) -> list[None]:
        """CMVN of every request's frames in one call, then one ``conv1d`` per conv layer over the
        windows of every stream with new outputs at that layer (see the module docstring)."""
        sizes = [len(r.frames) for r in reqs]
        if reqs[0].cmvn is not None and sum(sizes):
            normed = np.asarray(reqs[0].cmvn(np.concatenate([r.frames for r in reqs])), dtype=np.float32)
            parts = np.split(normed, np.cumsum(sizes)[:-1])
        else:
            parts = [np.asarray(r.frames, dtype=np.float32) for r in reqs]
        for r, x in zip(reqs, parts):
            r._append_input(x)
        sub = reqs[0].stream.encoder.subsample
        for layer, k in enumerate(sub.kernel_sizes):
            conv = sub.conv_layers[layer]
            work = [(r, r._todo(layer)) for r in reqs]
            work = [(r, t) for r, t in work if t is not None]
            if not work:
                continue
            windows = [_window(inp, first, n_total, done, ready, k) for _, (inp, first, n_total, done, ready) in work]
            longest = max(w.size(0) for w in windows)
            x = windows[0].new_zeros(len(windows), windows[0].size(1), longest)  # (B, C_in, L_max)
            for i, w in enumerate(windows):
                x[i, :, : w.size(0)] = w.transpose(0, 1)
            y = F.glu(F.conv1d(x, conv.weight, conv.bias, stride=2), dim=1).transpose(1, 2)  # (B, L_out, C_out)
            for i, (r, (_, _, _, done, ready)) in enumerate(work):
                r.stream._bufs[layer + 1].append(y[i, : ready - done])
        return [None] * len(reqs)

    # ------------------------------------------------------------------ shared steps
    def _normalized(self) -> np.ndarray:
        x = np.asarray(self.frames, dtype=np.float32)
        if self.cmvn is not None and len(x):
            x = np.asarray(self.cmvn(x), dtype=np.float32)
        return x

    def _append_input(self, feats: np.ndarray) -> None:
        """Append the (normalised) frames to the conv input buffer; mark the source finished."""
        s = self.stream
        if s.finished:
            raise ValueError("EncoderStream: source already finished")
        p = next(s.encoder.parameters())
        x = torch.from_numpy(np.ascontiguousarray(feats)).to(device=p.device, dtype=p.dtype)
        x = x.reshape(-1, s.encoder.subsample.conv_layers[0].in_channels)
        if x.size(0):
            s._bufs[0].append(x)
        s.num_frames += x.size(0)

    def _todo(self, layer: int) -> tuple[torch.Tensor, int, int | None, int, int] | None:
        """``(inputs kept (n, C), stream position of their first row, n_total or None, first new output, end of
        new outputs)`` of conv ``layer``, or None when no new output is computable (the rule of
        ``EncoderStream``; positions are stream positions, the rows before the first were dropped)."""
        bufs = self.stream._bufs
        n_in, done = bufs[layer].end, bufs[layer + 1].end
        ready = _conv_out_len(n_in, self.stream.encoder.subsample.kernel_sizes[layer], finished=self.finished)
        if ready <= done:
            return None
        return bufs[layer].view(), bufs[layer].start, (n_in if self.finished else None), done, ready


def _window(inp: torch.Tensor, first: int, n_total: int | None, out_start: int, out_end: int, k: int) -> torch.Tensor:
    """The input rows (``(L, C)``, zero rows for the padding) that outputs ``[out_start, out_end)`` of a
    stride-2, padding ``k // 2`` conv read: the window of ``Conv1dSubsampler.conv_range`` (``inp``'s row r is
    input position ``first + r``)."""
    p = k // 2
    lo = 2 * out_start - p
    hi = 2 * (out_end - 1) - p + k  # exclusive
    n_avail = first + inp.size(0)
    if hi > n_avail and (n_total is None or n_avail < n_total):
        raise ValueError("conv window: receptive field not yet available")
    start, end = max(lo, 0), min(hi, n_avail)
    if start < first:
        raise ValueError(f"conv window: input row {start} was dropped (rows kept from {first})")
    return F.pad(inp[start - first:end - first], (0, 0, start - lo, hi - end))
