"""Long-form streaming: a whole unsegmented talk as one stream, cut online into VAD segments.

:class:`LongFormTranslator` takes 16 kHz audio of any length, in pushes of any size, and processes it
in chunks of ``chunk_ms`` (default 320 ms). Each chunk goes through the segmenter (a
:class:`~mmst.simultaneous.vad.StreamingVad` by default: Silero VAD, segments of at most
``max_segment_s``); the audio inside a segment streams into a
:class:`~mmst.simultaneous.joint.StreamingTranslator` (any policy, joint decoding of all its
languages), as if the segment were one utterance:

- at a segment's *start* the translator is reset, and fed from the start sample (up to
  ``speech_pad_ms`` before the window that triggered it; a short buffer of recent audio keeps it);
- inside the segment it gets the chunk's audio and writes what its policies allow;
- at the segment's *end* it gets the audio up to the end sample with ``finished=True`` and writes
  what its policies still hold (until EOS or the length cap), then a :class:`SegmentEnd` follows.

A push is processed chunk by chunk, whatever its size, so memory does not grow with the push. A
segmenter with ``eager = True`` (Silero VAD: fixed windows from the stream start) reads each piece of
audio as it is pushed (at most one chunk at a time), and each chunk takes the boundaries decided inside
it (``detected_sample`` up to the chunk's end): the same boundaries as feeding it chunk by chunk, and a
server can stack its windows with other streams' (:mod:`mmst.models.stacked`). The segmenter's compute
for a chunk's audio counts in that chunk's processing time (``compute_s``, ``time_ca_ms``).

A segmenter with a cap (``max_segment_samples`` and ``cut_lookback_samples``, as
:class:`~mmst.simultaneous.vad.StreamingVad`) may cut a long segment up to ``cut_lookback_samples``
before the cap. The audio of that span is held back from the translator until the segment ends or is
cut, so every sample of a capped talk is fed exactly once: the part before the cut to the segment it
ends, the rest to the next one. :meth:`LongFormTranslator.push_steps` /
:meth:`~LongFormTranslator.finish_steps` are ``push`` / ``finish`` as generators of compute requests.

**Sentence restarts** (``restart=True``, the default). A segment may hold several sentences (pauses shorter
than the VAD's ``min_silence_ms``, or a segment cut by the cap), and a model trained on single sentences
ends its output after the first. When a language has ended its sentence (EOS written, the length cap, or,
for an adaptive policy, EOS predicted on partial input for ``restart_eos_chunks`` consecutive chunks) while
its segment is open, the driver finds where that sentence ended in the source
(:func:`mmst.simultaneous.restart.find_restart_point`: the cross-attention of its last written tokens, the
CTC head's token ends when the model has one, the nearest pause in the VAD's speech probability) and, once
at least ``restart_min_speech_ms`` of speech has followed that point, restarts the language there
(:meth:`~mmst.simultaneous.joint.StreamingTranslator.restart`): a new sentence whose decoder cross-attends
the states from that point on. Languages restart independently; the encoder is shared and not reset.
At a segment's end the same happens with the whole segment read, until the speech after a language's
restart point is shorter than :data:`FINAL_RESTART_SPEECH_FACTOR` times ``restart_min_speech_ms``. Nothing
written is revised. A point at or before the sentence's own start (its nearest pause is the one it started in)
gives no progress: the language then restarts at the states read when the sentence ended (its next sentence's
first words may be missed, but it is not silent for the rest of the segment, and the states before its start
can be freed on an endless stream).

**Untranslated speech.** Each :class:`SegmentEnd` reports the segment's speech (``speech_ms``: 32 ms VAD
windows with probability ``>=`` the VAD threshold, counted inside the segment; every sample counts for a
segmenter without probabilities, such as :class:`OracleSegmenter`) and, per language, the speech after the
point where it ended its last sentence when that was before the segment closed
(``untranslated_speech_ms``). :meth:`LongFormTranslator.untranslated_speech_share` = untranslated / all
segment speech, per language, over the stream.

Encoder and decoder state is NOT carried across segments: the models are trained on sentences,
and mmst's streaming encoder keeps every state of its input (unbounded left context by default),
so carrying it would grow memory with the talk. Per-segment state is bounded by ``max_segment_s``
(:attr:`SegmentEnd.state_numel` reports it; docs/longform.md shows the measurement).

Times (ms since the stream start, float):

- ``LongFormWord.time_ms``: the stream position when the word was written = the audio received by
  then (the end of the chunk being processed; its delay, as SimulEval's ``delays``);
- ``LongFormWord.time_ca_ms``: computation-aware: the wall-clock time at which the word would be
  out if the audio arrived in real time, chunk by chunk: chunk ``c`` (ending at ``t_c`` ms) is
  processed from ``max(t_c, end of the previous chunk's processing)``, and its words are out when
  the translator call that wrote them returns. A system slower than real time accumulates lag
  here; one faster than real time has ``time_ca_ms - time_ms`` = the processing time of one chunk.
  A chunk's processing time includes the segmenter's compute on its audio (run when that audio was
  pushed) and the translator's.

What a caller (e.g. a live server) may rely on:

- :meth:`LongFormTranslator.push` and :meth:`~LongFormTranslator.finish` return events in stream
  order; a segment's words (all languages; within one translator call grouped by language) come before its
  :class:`SegmentEnd`; segments are numbered 0, 1, 2, ... without gaps; words are never revised.
- ``time_ms`` never decreases across events, and ``time_ms <= `` the audio pushed so far.
- Words of character languages (``ja``, ``zh``) are the characters added by a write (no spaces);
  other languages' are whitespace words.
- Silence gives no events; :meth:`finish` closes an open segment; after :meth:`finish`, push
  raises ``ValueError`` until :meth:`reset`. Memory does not grow with the stream length.
- ``push`` accepts float32 mono 16 kHz samples only (resample and downmix before, e.g. with
  :class:`mmst.evaluation.frontend.StreamInput`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mmst.models.stacked import Steps, run_alone, steps_of

from .restart import RESTART_LAST_TOKENS, SpeechTrack, find_restart_point
from .vad import SAMPLE_RATE, VAD_WINDOW_SAMPLES, StreamingVad, VadEvent

#: defaults of the sentence restart (:class:`LongFormTranslator`)
RESTART_MIN_SPEECH_MS = 200.0
RESTART_EOS_CHUNKS = 6
#: at a segment's end (the whole segment read, EOS forced by the source's end rather than predicted on partial
#: input) a restart needs this many times ``restart_min_speech_ms`` of speech after its point: a model that has
#: read everything often attends before its sentence's last word, and a pause there is not a sentence end
FINAL_RESTART_SPEECH_FACTOR = 2.5
#: restarts of one language at one segment end at most (each needs progress in the source anyway)
MAX_FINAL_RESTARTS = 200


@dataclass(frozen=True)
class LongFormWord:
    """One output word (or, for ``ja``/``zh``, the characters of one write).

    Attributes:
        lang: target language.
        text: the word.
        segment: index of the VAD segment it belongs to (0-based).
        time_ms: stream position (ms since the stream start) when it was written: its delay.
        time_ca_ms: computation-aware time, ms since the stream start (see the module docstring).
    """

    lang: str
    text: str
    segment: int
    time_ms: float
    time_ca_ms: float


@dataclass(frozen=True)
class SegmentEnd:
    """A VAD segment was closed (after its words).

    Attributes:
        segment: its index (0-based).
        start_ms, end_ms: its boundaries (the segmenter's), ms since the stream start. The translator
            received the audio from ``start_ms`` up to ``end_ms`` or, when the end was decided later
            (the VAD waits for ``min_silence_ms`` of silence), up to the chunk in which it was decided.
        forced: cut by the maximum segment length (no pause).
        state_numel: tensor and array elements held by the translator's caches (encoder and decoder)
            when the segment closed, before the reset (bounded memory check).
        speech_ms: speech inside the segment, ms (VAD windows with probability ``>=`` its threshold; the
            whole segment for a segmenter without probabilities).
        untranslated_speech_ms: ``{lang: ms}``: speech after the point where the language ended its last
            sentence, when that was before the segment closed (0 when it translated up to the close).
        restarts: the sentence restarts inside the segment, in order.
    """

    segment: int
    start_ms: float
    end_ms: float
    forced: bool = False
    state_numel: int = 0
    speech_ms: float = 0.0
    untranslated_speech_ms: dict[str, float] = field(default_factory=dict)
    restarts: tuple[SentenceRestart, ...] = ()


@dataclass(frozen=True)
class SentenceRestart:
    """A language started a new sentence inside a segment.

    Attributes:
        lang: the language.
        reason: how its previous sentence ended (``eos``, ``cap``, ``eos-partial``).
        ended_ms: when it ended (stream position, ms since the stream start).
        restart_ms: where the new sentence starts in the source (its first attended encoder state), ms since
            the stream start.
        time_ms: stream position when the restart was decided.
    """

    lang: str
    reason: str
    ended_ms: float
    restart_ms: float
    time_ms: float


class OracleSegmenter:
    """Known segments instead of a VAD (gold segmentation, e.g. a talk's reference sentence times).

    Has the segmenter protocol of :class:`~mmst.simultaneous.vad.StreamingVad` (``accept``,
    ``finish``, ``reset``): each start and end is reported once the stream has reached it.

    Args:
        segments: ``[(start_s, end_s), ...]`` in seconds, sorted, not overlapping.
        speech: a :class:`~mmst.simultaneous.vad.StreamingVad` fed the same audio for its speech probabilities
            only (:meth:`take_window_probs`: the untranslated speech and the pauses of a sentence restart);
            its boundaries are ignored. None: every sample counts as speech and a restart needs no pause.

    Raises:
        ValueError: unsorted, overlapping or empty segments.
    """

    def __init__(self, segments: Sequence[tuple[float, float]], speech: Any = None) -> None:
        self.speech = speech
        self.threshold = float(getattr(speech, "threshold", 0.5))
        bounds = [(int(round(a * SAMPLE_RATE)), int(round(b * SAMPLE_RATE))) for a, b in segments]
        for i, (a, b) in enumerate(bounds):
            if b <= a:
                raise ValueError(f"segment {i}: end {b / SAMPLE_RATE:.3f} s <= start {a / SAMPLE_RATE:.3f} s")
            if i and a < bounds[i - 1][1]:
                raise ValueError(f"segment {i} starts before segment {i - 1} ends")
        self.bounds = bounds
        self.reset()

    def reset(self) -> None:
        """Start a new stream."""
        self.num_samples = 0
        self._next = 0  # next boundary index: 2*i = start of segment i, 2*i+1 = its end
        if self.speech is not None:
            self.speech.reset()

    @property
    def has_speech_probs(self) -> bool:
        """Whether :meth:`take_window_probs` gives probabilities (a ``speech`` VAD was given)."""
        return self.speech is not None

    def take_window_probs(self) -> list[tuple[int, float]]:
        """The ``speech`` VAD's window probabilities since the last call (``[]`` without one)."""
        return self.speech.take_window_probs() if self.speech is not None else []

    def accept(self, samples: np.ndarray) -> list[VadEvent]:
        """Advance by ``len(samples)``; the boundaries reached."""
        self.num_samples += int(np.asarray(samples).size)
        if self.speech is not None:
            self.speech.accept(samples)
        out = []
        while self._next < 2 * len(self.bounds):
            i, is_end = divmod(self._next, 2)
            pos = self.bounds[i][is_end]
            if pos > self.num_samples:
                break
            out.append(VadEvent("end" if is_end else "start", pos, self.num_samples))
            self._next += 1
        return out

    def finish(self) -> list[VadEvent]:
        """End of stream: closes a segment that is still open at the last sample."""
        if self._next % 2 == 1:
            self._next += 1
            return [VadEvent("end", self.num_samples, self.num_samples)]
        return []


class WholeStreamSegmenter(OracleSegmenter):
    """The whole stream as one segment: an input that is already segmented (a SimulEval instance, one
    utterance), so the long-form driver's sentence restarts apply inside it. Starts at sample 0 once audio
    comes; ends at :meth:`finish`, at the last sample.

    Args:
        speech: as :class:`OracleSegmenter`: a :class:`~mmst.simultaneous.vad.StreamingVad` fed the same audio
            for its speech probabilities only (the untranslated speech, the pauses of a restart), or None.
    """

    def __init__(self, speech: Any = None) -> None:
        super().__init__([], speech=speech)

    def accept(self, samples: np.ndarray) -> list[VadEvent]:
        """Advance by ``len(samples)``; the segment's start with the first audio."""
        super().accept(samples)
        if self._next == 0 and self.num_samples > 0:
            self._next = 1
            return [VadEvent("start", 0, self.num_samples)]
        return []


class _RecentAudio:
    """The last ``capacity`` samples of a stream, addressed by absolute sample index."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self._chunks: deque[np.ndarray] = deque()
        self._len = 0
        self.end = 0  # absolute index after the last sample

    @property
    def first(self) -> int:
        """Absolute index of the oldest sample kept."""
        return self.end - self._len

    def append(self, x: np.ndarray) -> None:
        if x.size == 0:
            return
        self._chunks.append(x)
        self._len += x.size
        self.end += x.size
        while self._chunks and self._len - self._chunks[0].size >= self.capacity:
            self._len -= self._chunks.popleft().size

    def slice(self, start: int, stop: int) -> np.ndarray:
        """Samples ``[start, stop)`` (absolute), clipped to what is kept."""
        first = self.first
        start, stop = max(start, first), min(stop, self.end)
        if stop <= start:
            return np.zeros(0, dtype=np.float32)
        buf = np.concatenate(list(self._chunks)) if len(self._chunks) > 1 else self._chunks[0]
        return buf[start - first:stop - first]


def state_numel(obj: Any) -> int:
    """Elements of every torch tensor and numpy array reachable from ``obj``'s attributes, lists and
    dicts, excluding ``torch.nn.Module`` s (the model's weights): the size of a translator's caches.
    Allocated capacity counts (a cache buffer's spare rows included)."""
    seen: set[int] = set()
    total = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, torch.nn.Module | str | bytes | int | float | bool) or o is None:
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            total += o.numel()
        elif isinstance(o, np.ndarray):
            total += o.size
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, list | tuple | deque | set):
            stack.extend(o)
        else:
            stack.extend(getattr(o, "__dict__", {}).values())
            for slot in getattr(type(o), "__slots__", ()):
                stack.append(getattr(o, slot, None))
    return total


def pooled_untranslated_share(drivers: Sequence[Any]) -> dict[str, float | None]:
    """Untranslated speech / speech per language over several :class:`LongFormTranslator` s (e.g. a server's
    open streams; each counts its closed segments): the sums of their ``untranslated_speech_ms`` over the sum
    of their ``speech_ms`` (None for a language without speech)."""
    speech: dict[str, float] = {}
    lost: dict[str, float] = {}
    for d in drivers:
        for lang, ms in getattr(d, "untranslated_speech_ms", {}).items():
            lost[lang] = lost.get(lang, 0.0) + ms
            speech[lang] = speech.get(lang, 0.0) + float(getattr(d, "speech_ms", 0.0))
    return {lang: (lost[lang] / speech[lang] if speech[lang] > 0 else None) for lang in sorted(lost)}


class LongFormTranslator:
    """Streams a whole talk through a :class:`~mmst.simultaneous.joint.StreamingTranslator`, segment by
    segment (see the module docstring for the behaviour and what callers may rely on).

    Args:
        translator: a ``StreamingTranslator`` (or a wrapper with its ``reset`` / ``accept_audio``,
            e.g. from :meth:`mmst.evaluation.bundle.ModelBundle.translator`); its words carry ``text``.
        vad: the segmenter: a :class:`~mmst.simultaneous.vad.StreamingVad`, an :class:`OracleSegmenter`,
            or None = ``StreamingVad(max_segment_s=max_segment_s)``.
        max_segment_s: maximum segment length in seconds for the default VAD (> 0).
        chunk_ms: processing chunk in ms (> 0): audio is segmented and translated every ``chunk_ms``.
        lookback_ms: recent audio kept to start a segment before the window that triggered it (ms).
        measure_state: report the translator's cache size in each :class:`SegmentEnd` (``state_numel``, a
            walk over every tensor it holds, a few ms per segment); False reports 0 (a server, which does
            not use it).
        restart: restart a language that ended its sentence while its segment goes on (module docstring);
            needs a translator with ``restart`` (streaming, sync model), otherwise off.
        restart_min_speech_ms: speech (ms, VAD) needed after the restart point before a restart (>= 0).
        restart_eos_chunks: adaptive policies: EOS predicted on partial input for this many consecutive
            chunks ends the sentence (>= 1).

    An offline encoder (a pretrained one, :mod:`mmst.models.hf_encoder`) re-encodes the current segment
    at every chunk, so ``max_segment_s`` also bounds the cost of one chunk.

    Raises:
        ValueError: ``chunk_ms`` or ``max_segment_s`` not positive; segments longer than the encoder's
            input window (Whisper); ``restart_min_speech_ms`` < 0 or ``restart_eos_chunks`` < 1.

    Usage::

        lf = LongFormTranslator(StreamingTranslator(model, vocab, ["de", "ja"], policy="waitk:k=3", cmvn=cmvn),
                                vad=StreamingVad())
        for block in microphone_blocks:           # float32 (n,) 16 kHz, any n
            for ev in lf.push(block):
                ...                               # LongFormWord | SegmentEnd
        tail = lf.finish()
    """

    def __init__(self, translator: Any, *, vad: Any = None, max_segment_s: float = 20.0, chunk_ms: float = 320.0,
                 lookback_ms: float = 2000.0, measure_state: bool = True, restart: bool = True,
                 restart_min_speech_ms: float = RESTART_MIN_SPEECH_MS,
                 restart_eos_chunks: int = RESTART_EOS_CHUNKS) -> None:
        if chunk_ms <= 0:
            raise ValueError(f"chunk_ms must be > 0, got {chunk_ms}")
        if restart_min_speech_ms < 0 or restart_eos_chunks < 1:
            raise ValueError(f"restart_min_speech_ms must be >= 0 and restart_eos_chunks >= 1, got "
                             f"{restart_min_speech_ms}, {restart_eos_chunks}")
        if max_segment_s <= 0:
            raise ValueError(f"max_segment_s must be > 0, got {max_segment_s}")
        self.translator = translator
        self.vad = vad if vad is not None else StreamingVad(max_segment_s=max_segment_s)
        model = getattr(translator, "model", None)
        window = getattr(getattr(model, "encoder", None), "max_input_samples", None)
        seg_s = float(getattr(self.vad, "max_segment_s", max_segment_s))
        if window is not None and seg_s * SAMPLE_RATE > window:
            raise ValueError(f"max_segment_s={seg_s:g}: the model's encoder reads at most {window / SAMPLE_RATE:g} s "
                             f"(Whisper's window); set --max-segment-s at most {window / SAMPLE_RATE:g}")
        self.max_segment_s = float(max_segment_s)
        self.measure_state = bool(measure_state)
        self.chunk_ms = float(chunk_ms)
        self.chunk_samples = max(1, int(round(chunk_ms * SAMPLE_RATE / 1000.0)))
        self._cap_samples = getattr(self.vad, "max_segment_samples", None)
        self._cut_lookback = int(getattr(self.vad, "cut_lookback_samples", 0) or 0)
        self.lookback_samples = int(lookback_ms * SAMPLE_RATE / 1000.0) + 2 * self.chunk_samples + self._cut_lookback
        self.restart = bool(restart) and bool(getattr(translator, "supports_restart", False))
        self.restart_min_speech_ms = float(restart_min_speech_ms)
        self.restart_eos_chunks = int(restart_eos_chunks)
        self.langs = list(getattr(translator, "tgt_langs", []) or [])
        state_ms = float(getattr(getattr(model, "encoder", None), "state_ms", 40.0))
        self.state_samples = max(1, int(round(state_ms * SAMPLE_RATE / 1000.0)))
        self._speech = SpeechTrack(float(getattr(self.vad, "threshold", 0.5)), VAD_WINDOW_SAMPLES, SAMPLE_RATE)
        self._has_probs = bool(getattr(self.vad, "has_speech_probs", hasattr(self.vad, "take_window_probs")))
        self.reset()

    def reset(self) -> None:
        """Start a new stream (segmenter, translator, clocks and counters)."""
        self.vad.reset()
        self.translator.reset()
        self._pending: list[np.ndarray] = []  # pushed audio of the incomplete chunk
        self._pending_len = 0
        self._vad_ahead: deque[VadEvent] = deque()  # eager segmenter: events not yet consumed by a chunk
        self._recent = _RecentAudio(self.lookback_samples)
        self.num_samples = 0  # samples pushed
        self._processed = 0  # samples segmented and translated
        self.num_segments = 0  # segments opened
        self._seg_start: int | None = None
        self._fed = 0  # absolute sample up to which the open segment was fed
        self._free_at_ms = 0.0  # computation-aware clock: when the previous chunk's processing ended
        self.compute_s = 0.0  # wall-clock seconds spent processing (segmenter included)
        self.vad_compute_s = 0.0  # of which in the segmenter
        self._vad_pending_s = 0.0  # segmenter seconds on the incomplete chunk's audio
        self._finished = False
        self._speech = SpeechTrack(self._speech.threshold, VAD_WINDOW_SAMPLES, SAMPLE_RATE)
        self._utt_start = 0  # absolute sample of the open segment's first sample fed to the translator
        self._restarts: list[SentenceRestart] = []  # of the open segment
        self._points: dict[str, tuple] = {}  # lang -> (its ended sentence, its restart point): found once
        #: speech in closed segments and, per language, the part left untranslated (ms)
        self.speech_ms = 0.0
        self.untranslated_speech_ms: dict[str, float] = {lang: 0.0 for lang in self.langs}

    def untranslated_speech_share(self) -> dict[str, float | None]:
        """Per language: untranslated speech / all speech of the closed segments (module docstring); None
        before any speech."""
        return {lang: (ms / self.speech_ms if self.speech_ms > 0 else None)
                for lang, ms in self.untranslated_speech_ms.items()}

    @property
    def in_segment(self) -> bool:
        """True while a segment is open."""
        return self._seg_start is not None

    def push(self, samples: np.ndarray) -> list[LongFormWord | SegmentEnd]:
        """Feed float32 mono 16 kHz samples ``(n,)`` in [-1, 1] (any ``n``); process every complete chunk.

        Returns:
            The words written and the segments closed by these samples, in stream order.

        Raises:
            ValueError: audio after :meth:`finish` (call :meth:`reset`), non-1-D or non-float audio.
        """
        return run_alone(self.push_steps(samples))

    def push_steps(self, samples: np.ndarray) -> Steps:
        """:meth:`push` as a generator of compute requests (:mod:`mmst.models.stacked`: VAD windows,
        encoder blocks, decoder steps), so a server can stack them with other streams'; same value."""
        if self._finished:
            raise ValueError("stream already finished; call reset() for a new stream")
        x = np.asarray(samples)
        if x.dtype.kind not in "f":
            raise ValueError(f"audio must be float samples in [-1, 1], got dtype {x.dtype} (scale integer PCM first)")
        if x.ndim != 1:
            raise ValueError(f"audio must be 1-D float32 mono 16 kHz (n,), got shape {x.shape}")
        x = x.astype(np.float32, copy=False)
        self.num_samples += x.size
        eager = getattr(self.vad, "eager", False)
        out: list[LongFormWord | SegmentEnd] = []
        n = self.chunk_samples
        pos = 0
        while pos < x.size:  # one chunk at a time: memory and segmenter calls bounded for any push
            piece = x[pos:pos + n - self._pending_len]
            pos += piece.size
            if eager:
                # the segmenter reads the audio as it comes (its windows do not depend on the chunking); a
                # chunk then takes the events decided inside it, as if it had fed the segmenter itself
                t0 = time.perf_counter()
                self._vad_ahead.extend((yield from steps_of(self.vad, "accept", piece)))
                self._vad_pending_s += time.perf_counter() - t0
            self._pending.append(piece if piece.size == n else piece.copy())  # the caller may reuse its buffer
            self._pending_len += piece.size
            if self._pending_len == n:
                chunk = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0].copy()
                self._pending, self._pending_len = [], 0
                out += yield from self._process(chunk, last=False)
        return out

    def finish(self) -> list[LongFormWord | SegmentEnd]:
        """End of stream: process the last partial chunk, close an open segment and write what is held.

        Returns:
            The remaining words and segment ends (nothing for a stream without speech).
        """
        return run_alone(self.finish_steps())

    def finish_steps(self) -> Steps:
        """:meth:`finish` as a generator of compute requests (see :meth:`push_steps`)."""
        if self._finished:
            return []
        chunk = np.concatenate(self._pending) if self._pending else np.zeros(0, dtype=np.float32)
        self._pending, self._pending_len = [], 0
        out = yield from self._process(chunk, last=True)
        self._finished = True
        return out

    # ------------------------------------------------------------------ internals
    def _process(self, chunk: np.ndarray, last: bool) -> Steps:
        t_start = time.perf_counter()
        eager = getattr(self.vad, "eager", False)
        vad_s, self._vad_pending_s = self._vad_pending_s, 0.0  # the segmenter's time on this chunk's audio
        arrival_ms = (self._processed + chunk.size) * 1000.0 / SAMPLE_RATE
        begin_ms = max(arrival_ms, self._free_at_ms)  # real-time simulation: when processing may start
        self._recent.append(chunk)
        self._processed += chunk.size
        now = self._processed
        if eager:
            events = []
            while self._vad_ahead and self._vad_ahead[0].detected_sample <= now:
                events.append(self._vad_ahead.popleft())
        else:
            t0 = time.perf_counter()
            events = (yield from steps_of(self.vad, "accept", chunk)) if chunk.size else []
            vad_s += time.perf_counter() - t0
        if last:
            t0 = time.perf_counter()
            events += self.vad.finish()
            vad_s += time.perf_counter() - t0
        if self._has_probs:
            for end, prob in self.vad.take_window_probs():
                self._speech.add(end, prob)
        out: list[LongFormWord | SegmentEnd] = []

        def clock_ca() -> float:
            return begin_ms + (time.perf_counter() - t_start) * 1000.0 + (vad_s if eager else 0.0) * 1000.0

        for ev in events:
            if ev.kind == "start":
                if self._seg_start is not None:  # defensive: a start while open closes the open segment
                    yield from self._close(ev.sample, now, False, out, clock_ca)
                self.translator.reset()
                self._seg_start = ev.sample
                # a forced start continues the segment just cut: from where that one's audio stopped
                self._fed = max(ev.sample, self._recent.first, self._fed if ev.forced else 0)
                self._utt_start = self._fed
                self._restarts = []
                self._points = {}
                self.num_segments += 1
            elif ev.kind == "end" and self._seg_start is not None:
                yield from self._close(max(ev.sample, self._seg_start), now, ev.forced, out, clock_ca)
        if self._seg_start is not None:
            stop = now
            if self._cap_samples is not None:  # hold back the span a cut of this segment may fall in
                stop = min(now, max(self._fed, self._seg_start + self._cap_samples - self._cut_lookback))
            if self._fed < stop:
                yield from self._feed(self._recent.slice(self._fed, stop), False, now, out, clock_ca)
                self._fed = stop
                if self.restart and (yield from self._restart_ended(self._fed, now, False)):
                    yield from self._feed(np.zeros(0, np.float32), False, now, out, clock_ca)
        else:
            self._speech.forget_before(now - self.lookback_samples)
        dt = time.perf_counter() - t_start + (vad_s if eager else 0.0)
        self.compute_s += dt
        self.vad_compute_s += vad_s
        self._free_at_ms = begin_ms + dt * 1000.0
        return out

    def _close(self, end: int, now: int, forced: bool, out: list, clock_ca) -> Steps:
        # the translator may already hold audio past the boundary: the chunks read while the VAD was
        # still waiting for min_silence_ms of silence
        fed_to = max(end, self._fed)
        tr = self.translator
        before = self._ended_before_close()
        yield from self._feed(self._recent.slice(self._fed, fed_to), True, now, out, clock_ca)
        n_before = len(self._restarts)
        for _ in range(MAX_FINAL_RESTARTS if self.restart else 0):  # the whole segment read: restart while speech is left
            if not (yield from self._restart_ended(end, now, True)):
                break
            yield from self._feed(np.zeros(0, np.float32), True, now, out, clock_ca)
        again = {r.lang for r in self._restarts[n_before:]}  # they translated up to the close after all
        before = {lang: (None if lang in again else e) for lang, e in before.items()}
        speech = self._speech_ms(self._seg_start, end)
        lost = {lang: (self._speech_ms(max(self._seg_start, e), end) if e is not None else 0.0)
                for lang, e in before.items()}
        self.speech_ms += speech
        for lang, ms in lost.items():
            self.untranslated_speech_ms[lang] = self.untranslated_speech_ms.get(lang, 0.0) + ms
        seg = self.num_segments - 1
        out.append(SegmentEnd(seg, self._seg_start * 1000.0 / SAMPLE_RATE, end * 1000.0 / SAMPLE_RATE, forced,
                              state_numel(tr) if self.measure_state else 0, speech, lost, tuple(self._restarts)))
        self._seg_start = None
        self._fed = fed_to
        self._speech.forget_before(end - self.lookback_samples)

    # ------------------------------------------------------------------ sentence restarts, untranslated speech
    def _speech_ms(self, start: int, stop: int) -> float:
        """Speech in samples ``[start, stop)``, ms (every sample when the segmenter gives no probabilities)."""
        if not self._has_probs:
            return max(0, stop - start) * 1000.0 / SAMPLE_RATE
        return self._speech.speech_ms(start, stop)

    def _ended_before_close(self) -> dict[str, int | None]:
        """Per language: the stream sample where it ended its sentence, if it has before the segment's close
        (EOS, the cap, or an adaptive EOS predicted for ``restart_eos_chunks`` chunks); None otherwise."""
        tr = self.translator
        out: dict[str, int | None] = {}
        for lang in self.langs:
            ended = getattr(tr, "ended", {}).get(lang)
            since = getattr(tr, "eos_since", {}).get(lang)
            if ended is not None:
                out[lang] = self._utt_start + int(round(ended.source_ms * SAMPLE_RATE / 1000.0))
            elif getattr(tr, "eos_chunks", {}).get(lang, 0) >= self.restart_eos_chunks and since is not None:
                out[lang] = self._utt_start + int(round(since * SAMPLE_RATE / 1000.0))
            else:
                out[lang] = None
        return out

    def restart_point(self, lang: str) -> int | None:
        """Where the next sentence of ``lang`` starts (state of the open segment's utterance), from its ended
        sentence's attention, the CTC head and the VAD probabilities (:func:`~.restart.find_restart_point`;
        None when no pause is near the attention estimate); the states its sentence saw when it wrote
        nothing; None when it saw none."""
        return self.restart_points([lang])[lang]

    def restart_points(self, langs: list[str]) -> dict[str, int | None]:
        """:meth:`restart_point` of every language of ``langs``; the evidence of those not known yet comes from
        one :meth:`~mmst.simultaneous.joint.StreamingTranslator.sentence_evidence_many` call (one decoder call
        for a unified model)."""
        tr = self.translator
        keys = {lang: (tr.origin(lang), tr.ended.get(lang)) for lang in langs}
        todo = [lang for lang in langs if not (lang in self._points and self._points[lang][0] == keys[lang])]
        evidence = tr.sentence_evidence_many(todo) if todo else {}
        for lang in todo:  # an ended sentence's evidence does not change: only the current end is asked again
            self._points[lang] = (keys[lang], self._point_from_evidence(lang, *evidence[lang]))
        return {lang: self._points[lang][1] for lang in langs}

    def _point_from_evidence(self, lang: str, attn: torch.Tensor, ctc, origin: int, hi: int) -> int | None:
        if hi <= origin:
            return None
        if attn.size(0) == 0:
            return hi
        tr = self.translator
        ended = tr.ended.get(lang)
        probs = None
        if self._has_probs:
            probs = self._speech.state_probs(self._utt_start + origin * self.state_samples, hi - origin,
                                             self.state_samples)
        blank = int(getattr(getattr(getattr(tr, "model", None), "cfg", None), "bos_id", 0))
        partial = ended is not None and ended.partial
        # a sentence ended by the source's end has read everything: its latest attended state, over all its
        # tokens, is its end (its last tokens may attend early); one that ended on partial input: its last tokens
        rel = find_restart_point(attn, ctc_labels=ctc, blank=blank, speech_prob=probs, threshold=self._speech.threshold,
                                 search_all=partial, last_tokens=RESTART_LAST_TOKENS if partial else attn.size(0))
        return None if rel is None else origin + rel

    def _restart_ended(self, stop: int, now: int, finished: bool) -> Steps:
        """Restart every language that ended its sentence and has ``restart_min_speech_ms`` of speech after its
        restart point, up to sample ``stop`` (a generator without requests; its value: whether any restarted)."""
        tr = self.translator
        any_restart = False
        if not finished:
            for lang in self.langs:
                if tr.ended.get(lang) is None and tr.eos_chunks.get(lang, 0) >= self.restart_eos_chunks:
                    tr.end_sentence(lang)
        # languages are independent (a restart changes only its own language): their evidence in one call
        points = self.restart_points([lang for lang in self.langs if tr.ended.get(lang) is not None and tr.done.get(lang)])
        for lang in self.langs:
            ended = tr.ended.get(lang)
            if ended is None or not tr.done.get(lang):
                continue
            p = points[lang]
            if p is not None and p <= tr.origin(lang):
                # the evidence shows no progress (its nearest pause is the one the sentence started in): restart
                # where the sentence ended, or the language would stay silent for the rest of an endless segment
                p = ended.n_states
            if p is None or p <= tr.origin(lang):
                continue
            p = min(p, tr.frontend.num_states)
            at = self._utt_start + p * self.state_samples
            need = self.restart_min_speech_ms * (FINAL_RESTART_SPEECH_FACTOR if finished else 1.0)
            if self._speech_ms(at, stop) < need or (finished and p >= tr.frontend.num_states):
                continue
            tr.restart(lang, p)
            self._restarts.append(SentenceRestart(
                lang, ended.reason, (self._utt_start + ended.source_ms * SAMPLE_RATE / 1000.0) * 1000.0 / SAMPLE_RATE,
                at * 1000.0 / SAMPLE_RATE, now * 1000.0 / SAMPLE_RATE))
            any_restart = True
        return any_restart
        yield  # a generator, like the other steps (the evidence's decoder call runs inline)

    def _feed(self, x: np.ndarray, finished: bool, now: int, out: list, clock_ca) -> Steps:
        words = yield from steps_of(self.translator, "accept_audio", x, finished=finished)
        t_ca = clock_ca()
        t_ms = now * 1000.0 / SAMPLE_RATE
        seg = self.num_segments - 1
        for lang, ws in (words or {}).items():
            for w in ws:
                text = w if isinstance(w, str) else str(getattr(w, "text", w))
                if text:
                    out.append(LongFormWord(lang, text, seg, t_ms, t_ca))
