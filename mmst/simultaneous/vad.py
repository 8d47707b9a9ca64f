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

On top of the iterator, a segment that reaches ``max_segment_s`` (speech without pauses) is cut
(``forced=True`` events) at the best point of its last :data:`CUT_SEARCH_MS` (2 s; half the segment when
``max_segment_s`` is under 4 s), decided when the segment reaches the cap:

- if the iterator's silence timer is running (speech stopped less than ``min_silence_ms`` ago), the
  segment *ends* where a pause would have ended it (the first silent window plus ``speech_pad_ms``). No
  segment is opened then: if the speech resumes before the silence has lasted ``min_silence_ms``, a
  *start* at that same sample follows (the gap belongs to the next segment, so no sample is left out);
  if the silence lasts, the next segment starts at the next speech, as after any pause;
- otherwise the segment ends, and the next one starts, in the middle of the lowest-energy
  :data:`CUT_WINDOW_MS` (100 ms) window of that span (the quietest point: a gap between words), chosen
  so that both sides contain a window of speech (probability ``>= threshold``).

A segment therefore never exceeds ``max_segment_s`` and never holds only silence. Starts never fall
before the previous end. Audio is read in blocks of at most :data:`VAD_BLOCK_WINDOWS` windows, so memory
does not grow with the size of one :meth:`StreamingVad.accept` call. The weights ship with the package
(``load_silero_vad(onnx=False)``: the bundled TorchScript model); nothing is downloaded.
"""

from __future__ import annotations

from collections import deque
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
#: span before the cap in which a forced cut looks for a pause or the quietest point, ms
CUT_SEARCH_MS = 2000.0
#: width of the energy window a forced cut is centred on, ms
CUT_WINDOW_MS = 100.0
#: hop between candidate energy windows, samples (10 ms)
_CUT_HOP_SAMPLES = 160
#: windows scored by one model request at most (2 s): bounds the front end's memory for any push
VAD_BLOCK_WINDOWS = 64
#: window probabilities kept for :meth:`StreamingVad.take_window_probs` between two calls (131 s)
WINDOW_PROBS_KEPT = 4096


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
        max_segment_s: longest segment in seconds (> 0); longer speech is cut at its best point of
            the last 2 s (module docstring).
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
        #: the cap, samples
        self.max_segment_samples = int(round(self.max_segment_s * SAMPLE_RATE))
        #: a forced cut falls at most this many samples before the cap (a caller may feed a segment's
        #: audio up to ``start + max_segment_samples - cut_lookback_samples`` without passing a cut)
        self.cut_lookback_samples = min(int(CUT_SEARCH_MS * SAMPLE_RATE / 1000), self.max_segment_samples // 2)
        self._pad_samples = int(round(self.speech_pad_ms)) * SAMPLE_RATE // 1000
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
        self._last_end = 0  # where the last segment ended: no start before it
        self._resume_at: int | None = None  # a cut at a running silence timer: where speech may resume
        # the recent windows (end sample, speech probability, samples): where a forced cut may fall
        self._recent: deque[tuple[int, float, torch.Tensor]] = deque(
            maxlen=self.cut_lookback_samples // VAD_WINDOW_SAMPLES + 3)
        # (end sample, speech probability) of the windows not yet taken (:meth:`take_window_probs`)
        self._window_probs: deque[tuple[int, float]] = deque(maxlen=WINDOW_PROBS_KEPT)
        self._finished = False

    def take_window_probs(self) -> list[tuple[int, float]]:
        """The ``(end_sample, speech probability)`` of every 32 ms window scored since the last call, in stream
        order (at most the last :data:`WINDOW_PROBS_KEPT`); the caller's record of how much speech the stream
        holds (:class:`mmst.simultaneous.restart.SpeechTrack`)."""
        out = list(self._window_probs)
        self._window_probs.clear()
        return out

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
        for b in range(0, n_win, VAD_BLOCK_WINDOWS):  # blocks of at most 2 s: bounded front-end memory
            m = min(VAD_BLOCK_WINDOWS, n_win - b)
            block = buf[b * VAD_WINDOW_SAMPLES:(b + m) * VAD_WINDOW_SAMPLES]
            wins = torch.from_numpy(np.array(block, dtype=np.float32)).view(m, -1)  # (m, 512), a copy
            probs = yield VadWindows(self, wins)
            for win, prob in zip(wins, probs):
                self._prob.value = prob
                events += self._step(win, float(prob))
        self._pending = buf[n_win * VAD_WINDOW_SAMPLES:].copy()
        return events

    def _step(self, win: torch.Tensor, prob: float) -> list[VadEvent]:
        it = self._it
        res = it(win)
        now = it.current_sample
        self._recent.append((now, prob, win))
        self._window_probs.append((now, prob))
        out: list[VadEvent] = []
        if self._resume_at is not None:  # closed at a running silence timer; the iterator is still in speech
            if res is not None and "end" in res:  # the silence became a pause: nothing to resume
                self._resume_at = None
            elif prob >= self.threshold:  # speech resumed within min_silence_ms: the gap opens the next segment
                self._seg_start, self._resume_at = self._resume_at, None
                out.append(VadEvent("start", self._seg_start, now, forced=True))
        elif res is not None and "start" in res and self._seg_start is None:
            self._seg_start = max(int(res["start"]), self._last_end)
            out.append(VadEvent("start", self._seg_start, now))
        elif res is not None and "end" in res and self._seg_start is not None:
            end = max(int(res["end"]), self._seg_start)
            out.append(VadEvent("end", end, now))
            self._seg_start, self._last_end = None, end
        if self._seg_start is not None and now - self._seg_start >= self.max_segment_samples:
            out += self._cut(now)
        return out

    def _cut(self, now: int) -> list[VadEvent]:
        """The open segment reached the cap: cut it at its best point (module docstring)."""
        start = self._seg_start
        cap = start + self.max_segment_samples
        lo = cap - self.cut_lookback_samples
        it = self._it
        if it.temp_end:  # silence timer running: end where a pause would (first silent window + pad)
            cut = min(max(it.temp_end - VAD_WINDOW_SAMPLES + self._pad_samples, lo), cap)
            self._seg_start, self._last_end, self._resume_at = None, cut, cut
            return [VadEvent("end", cut, now, forced=True)]
        cut = self._quietest_point(lo, cap)
        self._seg_start = self._last_end = cut
        return [VadEvent("end", cut, now, forced=True), VadEvent("start", cut, now, forced=True)]

    def _quietest_point(self, lo: int, hi: int) -> int:
        """Centre of the lowest-energy :data:`CUT_WINDOW_MS` window inside ``[lo, hi]`` (samples), leaving a
        speech window (probability ``>= threshold``) after it when there is one; ties: the middle of the
        run of equally quiet windows."""
        first = self._recent[0][0] - VAD_WINDOW_SAMPLES  # absolute sample of the kept audio's start
        audio = torch.cat([w for _, _, w in self._recent]).numpy().astype(np.float64)
        width = int(CUT_WINDOW_MS * SAMPLE_RATE / 1000)
        a, b = max(lo, first), hi
        after = [e - VAD_WINDOW_SAMPLES for e, p, _ in self._recent if p >= self.threshold and e - VAD_WINDOW_SAMPLES >= a]
        if after and min(b, max(after)) - a >= width:  # keep a window of speech after the cut
            b = min(b, max(after))
        if b - a < width:
            return (a + b) // 2
        c = np.concatenate([[0.0], np.cumsum(audio[a - first:b - first] ** 2)])
        starts = np.arange(0, b - a - width + 1, _CUT_HOP_SAMPLES)
        energy = c[starts + width] - c[starts]
        low = energy <= energy.min() + 1e-9 * (c[-1] + 1e-12)  # equally quiet, up to float rounding
        i = int(np.argmax(low))
        j = i
        while j + 1 < low.size and low[j + 1]:
            j += 1
        return a + int(starts[(i + j) // 2]) + width // 2

    def finish(self) -> list[VadEvent]:
        """End of stream: closes an open segment at the last sample (its ``end`` event), if any."""
        if self._finished:
            return []
        self._finished = True
        self._resume_at = None
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
            p = torch.mean(torch.squeeze(out, 1), [1]).tolist()  # (B,) floats, one conversion
            for k, (i, v) in enumerate(zip(live, vads)):
                v._state = state[:, k : k + 1].clone()
                probs[i].append(p[k])
        return probs
