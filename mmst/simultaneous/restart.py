"""Where a sentence ended in the source, and how much speech a stream holds: the signals of a sentence restart.

A model trained on single sentences writes end-of-sentence (EOS) after the first sentence of a segment that
holds several. The long-form driver (:mod:`.longform`) then restarts that language: a new sentence whose
decoder cross-attends only the encoder states from the *restart point* on. The point is found from signals
the model and the segmenter already have, in this order (units: encoder states of the current utterance,
40 ms each; all indices relative to the first state the finished sentence could attend):

1. **Cross-attention** of the sentence's last written tokens (``attn``, one row per written token, the
   row of the decoder position that predicted it, as AlignAtt reads it; Papi et al. 2023): the state after
   the latest of the argmax positions of the last ``last_tokens`` rows, ``a = max_t argmax(attn[t]) + 1``
   (the long-form driver takes every row for a sentence that read its whole segment).
2. **CTC** (when the model has a source CTC head): ``ctc_labels`` is its greedy label per state. The point
   moves to the nearest *token end* within ``window_states`` of ``a``: a state whose label is blank or a
   new label right after a non-blank one (the source token the last target words translate ends there).
3. **VAD speech probability** per state (``speech_prob``): among the states within ``window_states`` of
   the point so far (for a sentence that ended on partial input, among every state it read: its EOS says
   the sentence was over by then, and a language that lags, writing more tokens than chunks, attends the
   newest states however early its sentence ended), the runs of non-speech (probability ``< threshold``) are pauses; the point moves to the
   middle of the nearest one (the longer on a tie). A pause between sentences is where the next one starts.
   When that span has no pause there is no point (``None``): speech that goes on without a pause near the
   attention estimate is taken for the same sentence (a model at a segment's end, reading the whole segment,
   often attends well before its last words), and restarting there would translate its end twice.

Each signal is optional except the attention; without any written token there is no point (``None``).

:class:`SpeechTrack` keeps the segmenter's speech probability per 32 ms window of the stream, for the
speech duration of a span (``speech_ms``: windows with probability ``>= threshold``, counted by their
overlap with the span) and the probability per encoder state of an utterance (``state_probs``).
"""

from __future__ import annotations

import numpy as np
import torch

#: states around the attention estimate searched for a CTC token end and a pause (400 ms at 40 ms/state)
RESTART_WINDOW_STATES = 10
#: rows (last written tokens) whose attention argmax locates the sentence end
RESTART_LAST_TOKENS = 2


def attention_end(attn: torch.Tensor, last_tokens: int = RESTART_LAST_TOKENS) -> int | None:
    """The state after the latest argmax among the last ``last_tokens`` rows of ``attn`` ``(T, S)``; None if
    ``T == 0`` or ``S == 0``."""
    if attn.dim() != 2 or attn.size(0) == 0 or attn.size(1) == 0:
        return None
    rows = attn[-max(1, int(last_tokens)):]
    return int(rows.argmax(dim=-1).max()) + 1


def ctc_token_end(labels: torch.Tensor | np.ndarray, point: int, blank: int, window: int) -> int:
    """The token end of the greedy CTC ``labels`` ``(S,)`` nearest to ``point`` within ``window`` states (ties:
    the later one); ``point`` when there is none. A token end is a state ``j`` with ``labels[j-1]`` non-blank
    and ``labels[j] != labels[j-1]``, or ``j == S`` after a non-blank last label."""
    lab = [int(x) for x in (labels.tolist() if hasattr(labels, "tolist") else labels)]
    ends = [j for j in range(1, len(lab) + 1) if lab[j - 1] != blank and (j == len(lab) or lab[j] != lab[j - 1])]
    near = [j for j in ends if abs(j - point) <= window]
    if not near:
        return point
    return min(near, key=lambda j: (abs(j - point), -j))


def pause_point(speech_prob: torch.Tensor | np.ndarray, point: int, threshold: float, window: int | None) -> int | None:
    """The middle of the non-speech run (probability ``< threshold``) of ``speech_prob`` ``(S,)`` nearest to
    ``point`` among the states ``[point - window, point + window]`` (every state when ``window`` is None;
    clipped to that span; ties: the longer run, then the earlier); None when that span has no pause. Middle
    of a run ``[lo, hi)``: ``lo + (hi - lo) // 2``."""
    p = np.asarray(speech_prob, dtype=np.float64).reshape(-1)
    lo_s, hi_s = (0, p.size) if window is None else (max(0, point - window), min(p.size, point + window + 1))
    runs = []
    j = lo_s
    while j < hi_s:
        if p[j] < threshold:
            k = j
            while k < hi_s and p[k] < threshold:
                k += 1
            runs.append((j, k))
            j = k
        else:
            j += 1
    if not runs:
        return None

    def dist(r: tuple[int, int]) -> int:
        return 0 if r[0] <= point < r[1] else min(abs(point - r[0]), abs(point - (r[1] - 1)))

    lo, hi = min(runs, key=lambda r: (dist(r), -(r[1] - r[0]), r[0]))
    return lo + (hi - lo) // 2


def find_restart_point(attn: torch.Tensor, *, ctc_labels=None, blank: int = 0, speech_prob=None,
                       threshold: float = 0.5, last_tokens: int = RESTART_LAST_TOKENS,
                       window_states: int = RESTART_WINDOW_STATES, search_all: bool = False) -> int | None:
    """Where the next sentence starts, in states from the finished sentence's first visible state (module
    docstring: attention, then the CTC token end, then the nearest pause).

    Args:
        attn: ``(T, S)`` cross-attention of the sentence's written tokens (EOS excluded) over the ``S``
            states it could attend; rows sum to 1.
        ctc_labels: ``(S,)`` greedy CTC label per state, or None (no CTC head).
        blank: the CTC blank id.
        speech_prob: ``(S,)`` segmenter speech probability per state, or None (no pause needed).
        threshold: the segmenter's speech threshold.
        last_tokens: rows of ``attn`` (the last written tokens) that locate the end.
        window_states: states searched around the attention estimate.
        search_all: the pause search covers every state (a sentence that ended on partial input), not only
            the window.

    Returns:
        The restart state in ``[0, S]``, or None without written tokens or, with ``speech_prob``, without a
        pause within ``window_states`` of the estimate.
    """
    point = attention_end(attn, last_tokens)
    if point is None:
        return None
    s = attn.size(1)
    if ctc_labels is not None and len(ctc_labels) == s:
        point = ctc_token_end(ctc_labels, point, blank, window_states)
    if speech_prob is not None and len(speech_prob) == s:
        point = pause_point(speech_prob, point, threshold, None if search_all else window_states)
        if point is None:
            return None
    return max(0, min(s, point))


#: states per array operation of :meth:`SpeechTrack.state_probs` (bounds its memory on a long segment)
STATE_BLOCK = 256


class SpeechTrack:
    """Speech probability per 32 ms segmenter window of a stream (see the module docstring).

    Args:
        threshold: speech when the probability is ``>= threshold``.
        window_samples: samples per window (Silero: 512 at 16 kHz).
        sample_rate: Hz.

    ``add(end_sample, prob)`` records a window ``[end_sample - window_samples, end_sample)``; windows must come
    in stream order. ``forget_before(sample)`` drops windows that end before ``sample`` (bounded memory).
    The windows live in two growing numpy arrays (capacity doubling; 16 bytes a window), and a query reads only
    the windows overlapping its span (binary search on the window ends), so its cost does not grow with an
    endless segment's length.
    """

    def __init__(self, threshold: float = 0.5, window_samples: int = 512, sample_rate: int = 16000) -> None:
        self.threshold = float(threshold)
        self.window_samples = int(window_samples)
        self.sample_rate = int(sample_rate)
        self._end_buf = np.zeros(256, dtype=np.int64)
        self._prob_buf = np.zeros(256, dtype=np.float64)
        self._first = 0  # index of the oldest window kept
        self._n = 0  # index after the newest window

    def add(self, end_sample: int, prob: float) -> None:
        """Record one window's speech probability."""
        if self._n == self._end_buf.size:  # full: move the kept windows to the front, or grow
            kept = self._n - self._first
            cap = max(256, 2 * kept) if kept * 2 > self._end_buf.size else self._end_buf.size
            ends, probs = np.zeros(cap, dtype=np.int64), np.zeros(cap, dtype=np.float64)
            ends[:kept], probs[:kept] = self._end_buf[self._first:self._n], self._prob_buf[self._first:self._n]
            self._end_buf, self._prob_buf, self._first, self._n = ends, probs, 0, kept
        self._end_buf[self._n] = int(end_sample)
        self._prob_buf[self._n] = float(prob)
        self._n += 1

    def forget_before(self, sample: int) -> None:
        """Drop the windows that end at or before ``sample``."""
        ends = self._end_buf[self._first:self._n]
        self._first += int(np.searchsorted(ends, sample, side="right"))

    def _span(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Ends and probabilities of the kept windows overlapping samples ``[start, stop)`` (window ends after
        ``start``, window starts before ``stop``)."""
        ends = self._end_buf[self._first:self._n]
        i0 = int(np.searchsorted(ends, start, side="right"))
        i1 = int(np.searchsorted(ends, stop + self.window_samples, side="left"))
        return ends[i0:i1], self._prob_buf[self._first + i0:self._first + i1]

    def speech_ms(self, start: int, stop: int) -> float:
        """Speech in samples ``[start, stop)``, ms: the overlap of every window with probability ``>=
        threshold`` with that span."""
        if stop <= start:
            return 0.0
        ends, probs = self._span(start, stop)
        if not ends.size:
            return 0.0
        starts = ends - self.window_samples
        ov = np.clip(np.minimum(ends, stop) - np.maximum(starts, start), 0, None)
        return float(ov[probs >= self.threshold].sum()) * 1000.0 / self.sample_rate

    def state_probs(self, start: int, n_states: int, state_samples: int) -> np.ndarray:
        """``(n_states,)`` mean probability of the windows overlapping each state ``[start + j * state_samples,
        start + (j + 1) * state_samples)`` (weighted by overlap); 1.0 where no window is known."""
        out = np.ones(n_states, dtype=np.float64)
        if n_states <= 0:
            return out
        for j0 in range(0, n_states, STATE_BLOCK):  # blocks of states, each against the windows of its own span
            j1 = min(n_states, j0 + STATE_BLOCK)
            a = start + np.arange(j0, j1, dtype=np.int64)[:, None] * state_samples  # (block, 1) first samples
            ends, probs = self._span(int(a[0, 0]), int(a[-1, 0]) + state_samples)
            if not ends.size:
                continue
            ov = np.clip(np.minimum(ends[None, :], a + state_samples) - np.maximum((ends - self.window_samples)[None, :], a),
                         0, None)  # (block, windows) overlap in samples
            tot = ov.sum(axis=1)
            known = tot > 0
            out[j0:j1][known] = (ov[known] * probs[None, :]).sum(axis=1) / tot[known]
        return out
