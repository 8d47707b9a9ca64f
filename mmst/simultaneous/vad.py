"""Online voice activity detection for long-form streaming: Silero VAD (``silero-vad`` on PyPI) over 16 kHz audio.

:class:`StreamingVad` takes audio of any length, incrementally, and reports speech boundaries as
:class:`VadEvent` s, in ms (and samples) since the stream start. The Silero model (Silero Team 2024,
"Silero VAD", github.com/snakers4/silero-vad) scores windows of 512 samples (32 ms) with a recurrent
state; ``silero_vad.VADIterator`` turns the scores into events:

- *start*: the first window whose speech probability is ``>= threshold``; the boundary is placed
  ``speech_pad_ms`` before that window;
- *end*: the probability stayed below ``threshold - 0.15`` for ``min_silence_ms``; the boundary is
  placed ``speech_pad_ms`` after the first silent window. The end is reported ``min_silence_ms``
  after that window (the decision delay of the segmenter).

On top of the iterator, a segment longer than ``max_segment_s`` (speech without pauses) is cut:
an *end* and a *start* at the same sample (``forced=True``). The weights ship with the package
(``load_silero_vad(onnx=False)``: the bundled TorchScript model); nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mmst.models.stacked import Steps, run_alone

#: Silero VAD window at 16 kHz, in samples (32 ms); the model accepts exactly this size.
VAD_WINDOW_SAMPLES = 512
#: samples of the previous window the 16 kHz Silero model sees before each window
VAD_CONTEXT_SAMPLES = 64
#: Silero's LSTM state width (the state is ``(2, batch, VAD_STATE_SIZE)``)
VAD_STATE_SIZE = 128
SAMPLE_RATE = 16000


def _silero():
    """The ``silero_vad`` module. Importing it sets torch's intra-op threads to 1 as a side effect; the
    caller's setting is restored here."""
    n_threads = torch.get_num_threads()
    import silero_vad

    torch.set_num_threads(n_threads)
    return silero_vad


def load_vad_model():
    """The bundled Silero VAD TorchScript model (``silero_vad.load_silero_vad(onnx=False)``; nothing is
    downloaded). One model can serve any number of streams: each :class:`StreamingVad` keeps its own
    recurrent state and calls the model with it."""
    return _silero().load_silero_vad(onnx=False)


@dataclass(frozen=True)
class VadEvent:
    """A speech boundary.

    Attributes:
        kind: ``"start"`` or ``"end"`` of a speech segment.
        sample: boundary position, samples since the stream start (16 kHz).
        detected_sample: stream position when the boundary was decided (``>= sample`` for ends;
            for starts, the end of the window that triggered it).
        forced: an end/start pair cut by the maximum segment length, not by a pause.
    """

    kind: str
    sample: int
    detected_sample: int
    forced: bool = False

    @property
    def time_ms(self) -> float:
        """Boundary position in ms since the stream start."""
        return self.sample * 1000.0 / SAMPLE_RATE


class StreamingVad:
    """Silero VAD over a 16 kHz stream, fed incrementally (see the module docstring).

    Args:
        threshold: speech probability threshold (Silero's default 0.5).
        min_silence_ms: silence that ends a segment, ms (> 0). Pauses inside a sentence are usually
            shorter than 250 ms; a larger value merges sentences, a smaller one cuts them.
        speech_pad_ms: padding added to each side of a segment, ms (>= 0).
        max_segment_s: longest segment in seconds (> 0); longer speech is cut there.
        model: a loaded Silero model (default :func:`load_vad_model`); it may be shared by many
            streams (the recurrent state is this object's), and streams sharing it can have their
            windows stacked into one call (:class:`VadWindows`).

    Raises:
        ValueError: a parameter out of range.

    Usage::

        vad = StreamingVad()
        for chunk in chunks:                       # float32 (n,) 16 kHz, any n
            for ev in vad.accept(chunk):           # VadEvent("start" | "end", sample, ...)
                ...
        events = vad.finish()                      # closes an open segment at the stream end
    """

    #: an event depends only on the audio up to its ``detected_sample`` (fixed 32 ms windows from the
    #: stream start), so a caller may feed audio ahead of the chunk that consumes the events
    #: (:class:`~mmst.simultaneous.longform.LongFormTranslator` does, so that a server stacks the VAD
    #: windows of every stream that received audio, not only of those that completed a chunk)
    eager = True

    def __init__(self, threshold: float = 0.5, min_silence_ms: float = 250.0, speech_pad_ms: float = 30.0,
                 max_segment_s: float = 20.0, model=None) -> None:
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"VAD threshold must be in (0, 1), got {threshold}")
        if min_silence_ms <= 0:
            raise ValueError(f"min_silence_ms must be > 0, got {min_silence_ms}")
        if speech_pad_ms < 0:
            raise ValueError(f"speech_pad_ms must be >= 0, got {speech_pad_ms}")
        if max_segment_s <= 0:
            raise ValueError(f"max_segment_s must be > 0, got {max_segment_s}")
        VADIterator = _silero().VADIterator  # noqa: N806

        self.threshold = float(threshold)
        self.min_silence_ms = float(min_silence_ms)
        self.speech_pad_ms = float(speech_pad_ms)
        self.max_segment_s = float(max_segment_s)
        self.model = model if model is not None else load_vad_model()
        self._prob = _GivenProb(self)
        self._it = VADIterator(self._prob, threshold=self.threshold, sampling_rate=SAMPLE_RATE,
                               min_silence_duration_ms=int(round(self.min_silence_ms)),
                               speech_pad_ms=int(round(self.speech_pad_ms)))
        self.reset()

    def reset(self) -> None:
        """Start a new stream (clears the recurrent state)."""
        self._it.reset_states()  # calls self._clear_state()
        self._pending = np.zeros(0, dtype=np.float32)
        self.num_samples = 0  # samples accepted
        self._seg_start: int | None = None
        self._finished = False

    @property
    def in_speech(self) -> bool:
        """True while a segment is open (a start was reported and no end yet)."""
        return self._seg_start is not None

    @property
    def segment_start(self) -> int | None:
        """Start sample of the open segment, or None."""
        return self._seg_start

    def accept(self, samples: np.ndarray) -> list[VadEvent]:
        """Feed float32 samples ``(n,)`` in [-1, 1] at 16 kHz (any ``n``, may be 0).

        Returns:
            The boundaries decided by these samples, in stream order (starts and ends alternate).

        Raises:
            ValueError: audio after :meth:`finish` (call :meth:`reset`), or non-1-D audio.
        """
        return run_alone(self.accept_steps(samples))

    def accept_steps(self, samples: np.ndarray) -> Steps:
        """:meth:`accept` as a generator (:mod:`mmst.models.stacked`): the model calls of the new 32 ms
        windows are one yielded :class:`VadWindows` request, so they can be stacked with other streams'."""
        if self._finished:
            raise ValueError("VAD stream already finished; call reset() for a new stream")
        x = np.asarray(samples, dtype=np.float32)
        if x.ndim != 1:
            raise ValueError(f"audio must be 1-D (n,), got shape {x.shape}")
        self.num_samples += x.size
        buf = np.concatenate([self._pending, x]) if self._pending.size else x
        n_win = buf.size // VAD_WINDOW_SAMPLES
        events: list[VadEvent] = []
        if n_win:
            wins = torch.from_numpy(np.ascontiguousarray(buf[: n_win * VAD_WINDOW_SAMPLES])).view(n_win, -1)
            probs = yield VadWindows(self, wins)
            for win, prob in zip(wins, probs):
                self._prob.value = prob
                events += self._step(win)
        self._pending = buf[n_win * VAD_WINDOW_SAMPLES:].copy()
        return events

    def _step(self, win: torch.Tensor) -> list[VadEvent]:
        it = self._it
        res = it(win)
        now = it.current_sample
        out: list[VadEvent] = []
        if res is not None and "start" in res and self._seg_start is None:
            self._seg_start = int(res["start"])
            out.append(VadEvent("start", self._seg_start, now))
        elif res is not None and "end" in res and self._seg_start is not None:
            end = max(int(res["end"]), self._seg_start)
            out.append(VadEvent("end", end, now))
            self._seg_start = None
        max_len = int(self.max_segment_s * SAMPLE_RATE)
        if self._seg_start is not None and now - self._seg_start >= max_len:
            cut = self._seg_start + max_len
            out += [VadEvent("end", cut, now, forced=True), VadEvent("start", cut, now, forced=True)]
            self._seg_start = cut
        return out

    def finish(self) -> list[VadEvent]:
        """End of stream: closes an open segment at the last sample (its ``end`` event), if any."""
        if self._finished:
            return []
        self._finished = True
        if self._seg_start is None:
            return []
        end = max(self.num_samples, self._seg_start)
        self._seg_start = None
        return [VadEvent("end", end, self.num_samples)]


class _GivenProb:
    """Stands in for the Silero model inside ``silero_vad.VADIterator``: returns the probability that
    the stream's :class:`VadWindows` request computed, and clears the stream's recurrent state on
    ``reset_states``."""

    def __init__(self, vad: StreamingVad) -> None:
        self.vad = vad
        self.value = 0.0

    def __call__(self, x: torch.Tensor, sr: int) -> torch.Tensor:
        return torch.tensor(self.value)

    def reset_states(self) -> None:
        self.vad._context = torch.zeros(1, VAD_CONTEXT_SAMPLES)
        self.vad._state = torch.zeros(0)


@dataclass
class VadWindows:
    """Compute request (:mod:`mmst.models.stacked`): the Silero model on the new 32 ms windows of one stream.

    Silero VAD (16 kHz) is a stateless front end (STFT and conv encoder over the window plus the
    :data:`VAD_CONTEXT_SAMPLES` samples before it) followed by an LSTM cell and a small head. The front end
    of every window is computed in one call (a window's context is the end of the previous window, known
    in advance); the LSTM steps through the windows in order from the stream's state. The stream's LSTM
    state (``(2, 1, 128)``, empty at the start) and last context live on its :class:`StreamingVad`, so one
    loaded model serves every stream. The result is the speech probability of each window (floats),
    what ``silero_vad``'s own ``forward`` computes window by window.

    Attributes:
        vad: the stream's :class:`StreamingVad` (its state and context are updated).
        windows: ``(W, 512)`` float32 samples, consecutive windows.
    """
    stage = 0  # pipeline order: VAD 0, encoder 1, decoder 2 (ties in run_stacked)

    vad: StreamingVad
    windows: torch.Tensor

    def stack_key(self) -> tuple:
        return ("silero-vad", id(self.vad.model))

    def save_state(self):
        """A function that puts the segmenter's LSTM state and context back as they are now (both are
        replaced, never changed in place): undoes this request after a failed stacked call."""
        v, context, state = self.vad, self.vad._context, self.vad._state

        def restore() -> None:
            v._context, v._state = context, state
        return restore

    def run(self) -> list[float]:
        """This stream's windows alone."""
        return self.run_stacked([self])[0]

    @classmethod
    @torch.no_grad()
    def run_stacked(cls, reqs: list[VadWindows]) -> list[list[float]]:
        """The windows of several streams: the front end of all windows in ONE call, then one LSTM + head
        call per window index with the streams that have that window stacked (batch = streams; a stream at
        its start gets a zero state, which is what the model uses for an empty one)."""
        m = reqs[0].vad.model._model
        xs, offsets = [], []
        n = 0
        for r in reqs:
            v, w = r.vad, r.windows
            ctx = torch.cat([v._context, w[:-1, -VAD_CONTEXT_SAMPLES:]], 0)  # (W, 64): each window's context
            xs.append(torch.cat([ctx, w], 1))  # (W, 64 + 512)
            v._context = w[-1:, -VAD_CONTEXT_SAMPLES:].clone()
            offsets.append(n)
            n += w.size(0)
        feats = m.encoder(m.run_extractors(torch.cat(xs, 0)))  # (sum W, 128, 1)
        probs: list[list[float]] = [[] for _ in reqs]
        for j in range(max(r.windows.size(0) for r in reqs)):
            live = [i for i, r in enumerate(reqs) if r.windows.size(0) > j]
            e = feats[[offsets[i] + j for i in live]]
            vads = [reqs[i].vad for i in live]
            if len(live) == 1:
                state = vads[0]._state
            else:
                state = torch.cat([v._state if v._state.numel() else torch.zeros(2, 1, VAD_STATE_SIZE) for v in vads], 1)
            out, state = m.decoder(e, state)  # (B, 1, 1), (2, B, 128)
            p = torch.mean(torch.squeeze(out, 1), [1])  # (B,)
            for k, (i, v) in enumerate(zip(live, vads)):
                v._state = state[:, k : k + 1].clone()
                probs[i].append(float(p[k]))
        return probs
