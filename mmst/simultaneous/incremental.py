"""Streaming front end: audio -> online fbank -> global CMVN -> encoder states, chunk by chunk.

Two encoder modes:

* ``"incremental"`` (chunk-causal models): :class:`mmst.models.EncoderStream` with cached keys/values;
  states of complete pre-decision chunks are final and equal the training forward.
* ``"reencode"`` (any model; required for ``encoder_attention="offline"``): the whole received prefix is
  re-encoded (lazily, only when the decoder needs states), as fairseq SimulST does. For a chunk-causal
  model this yields the same usable states as ``"incremental"`` (slower; used as a baseline).

In both modes the usable states are those of complete chunks (a chunk is complete once the conv
receptive field of its last state has arrived, see :mod:`mmst.models.encoder`), plus, once the source
is finished, everything.

Waveform encoders (``model.encoder.input_kind == "waveform"``: the pretrained encoders of
:mod:`mmst.models.hf_encoder`) are offline: they always re-encode, from the received 16 kHz samples (no
fbank, no CMVN). The re-encoded span is the current utterance, which the long-form driver bounds by its
``max_segment_s`` (:mod:`.longform`), so the cost of one re-encoding grows within a segment up to that cap
(Whisper's encoder always reads its whole 30 s window: constant cost).
"""

from __future__ import annotations

import numpy as np
import torch

from mmst.models.stacked import Steps, run_alone

from .frontend_request import FrontEndFrames

ENCODER_MODES = ("auto", "incremental", "reencode")


class StreamingFrontEnd:
    """Incremental features and encoder states for ONE utterance at a time.

    Args:
        model: an ``MMSTModel`` (in eval mode).
        cmvn: callable applied to fbank ``(n, 80)`` numpy (e.g. ``mmst.features.GlobalCMVN``), or None.
        mode: ``"auto"`` (incremental for chunk-causal encoders, else reencode), ``"incremental"`` or
            ``"reencode"``.
        sample_rate: input rate (16000).

    Raises:
        ValueError: unknown mode, or ``"incremental"`` with an offline encoder.
    """

    def __init__(self, model, cmvn=None, mode: str = "auto", sample_rate: int = 16000) -> None:
        if mode not in ENCODER_MODES:
            raise ValueError(f"encoder mode must be one of {ENCODER_MODES}, got {mode!r}")
        chunk_causal = model.cfg.encoder_attention == "chunk-causal"
        if mode == "auto":
            mode = "incremental" if chunk_causal else "reencode"
        if mode == "incremental" and not chunk_causal:
            raise ValueError("incremental encoding needs a chunk-causal encoder; use mode='reencode'")
        self.model = model
        self.cmvn = cmvn
        self.mode = mode
        self.waveform = getattr(model.encoder, "input_kind", "fbank") == "waveform"
        self.sample_rate = sample_rate
        self.ratio = model.pre_decision_ratio
        self.reset()

    def reset(self) -> None:
        """Start a new utterance."""
        from mmst.features import OnlineFbank

        self.fbank = OnlineFbank(self.sample_rate)
        self.num_samples = 0
        self.finished = False
        self.version = 0  # incremented whenever previously returned states may have changed
        self._stream = self.model.encoder.stream() if self.mode == "incremental" else None
        self._frames: list[np.ndarray] = []  # fbank frames, or samples for a waveform encoder
        self._num_frames = 0
        self._encoded_frames = -1
        self._states: torch.Tensor | None = None

    @property
    def source_ms(self) -> float:
        """Audio received so far, in ms."""
        return self.num_samples * 1000.0 / self.sample_rate

    def accept_audio(self, samples: np.ndarray, finished: bool = False) -> None:
        """Feed float32 samples ``(n,)`` in [-1, 1] at ``sample_rate``; ``finished`` on the last call.

        Raises ``ValueError`` after the source was finished (call :meth:`reset`).
        """
        run_alone(self.accept_audio_steps(samples, finished))

    def accept_audio_steps(self, samples: np.ndarray, finished: bool = False) -> Steps:
        """:meth:`accept_audio` as a generator (:mod:`mmst.models.stacked`): the front end (CMVN and conv
        subsampler, :class:`~mmst.simultaneous.frontend_request.FrontEndFrames`) and the incremental
        encoder's block are yielded requests."""
        if self.finished:
            raise ValueError("source already finished; call reset() for a new utterance")
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        self.num_samples += x.size
        if self.waveform:
            self.finished = finished
            self._num_frames += x.size
            if x.size:
                self._frames.append(x)
            return
        self.fbank.accept_waveform(x)
        if finished:
            self.fbank.input_finished()
        feats = self.fbank.pop_frames()
        self.finished = finished
        self._num_frames += len(feats)
        if self._stream is not None:
            # CMVN and the conv subsampler: a request, stacked across streams by a server
            if len(feats) or finished:
                yield FrontEndFrames(self._stream, feats, self.cmvn, finished)
            yield from self._stream.accept_frames_steps(feats[:0], finished=finished)
            return
        if self.cmvn is not None and len(feats):
            feats = np.asarray(self.cmvn(feats), dtype=np.float32)
        if len(feats):
            self._frames.append(feats)

    @property
    def num_states(self) -> int:
        """Usable encoder states now (complete chunks; all once finished)."""
        if self._stream is not None:
            return self._stream.num_states
        n = self.model.encoder.num_states(self._num_frames, self.finished)
        return n if self.finished else (n // self.ratio) * self.ratio

    @property
    def num_chunks(self) -> int:
        """Usable pre-decision chunks now (the last one may be partial once finished)."""
        return -(-self.num_states // self.ratio)

    @property
    def states_start(self) -> int:
        """Stream position of the first state :meth:`states` returns (0 unless states were forgotten)."""
        return self._stream.states_start if self._stream is not None else 0

    def forget_states_before(self, first: int) -> int:
        """No decoder reads the states before ``first`` any more (incremental mode: they may be freed,
        :meth:`mmst.models.encoder.EncoderStream.forget_states_before`; re-encode mode keeps them, as it
        re-encodes the whole prefix anyway). Returns the states dropped now (:attr:`states_start` moved by
        that much)."""
        return self._stream.forget_states_before(first) if self._stream is not None else 0

    @torch.no_grad()
    def states(self) -> torch.Tensor:
        """Usable encoder states ``(1, num_states - states_start, D)``: row r is state ``states_start + r``
        (re-encodes the prefix in reencode mode)."""
        if self._stream is not None:
            return self._stream.states
        n = self.num_states
        if self._encoded_frames != self._num_frames:
            p = next(self.model.parameters())
            if self._num_frames == 0:
                self._states = torch.zeros(1, 0, self.model.cfg.d_model, device=p.device, dtype=p.dtype)
            else:
                feats = torch.from_numpy(np.concatenate(self._frames, 0)).to(p.device, p.dtype)[None]
                if self.waveform:
                    feats = feats[..., None]  # (1, T, 1) samples
                enc = self.model.encode(feats, torch.tensor([feats.size(1)], device=p.device))
                self._states = enc.states
            self._encoded_frames = self._num_frames
            self.version += 1
        return self._states[:, :n]
