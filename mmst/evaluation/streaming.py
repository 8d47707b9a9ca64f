"""Drive a streaming translator over one utterance exactly like SimulEval 1.1 drives an agent.

SimulEval 1.1.4 (``SpeechInputInstance.send_source`` / ``TextOutputInstance.receive_prediction``):

- the source is sent in segments of ``n = ceil(segment_ms / 1000 * sample_rate)`` samples; the last
  segment (possibly shorter) carries ``finished=True``;
- after each segment the agent may write; every unit written then gets
  ``delay = samples_sent * 1000 / sample_rate`` (ms) and
  ``elapsed = delay + (now - start) * 1000`` (``start``: just before the first segment is sent);
- the call that receives the finished segment is the last one: it must flush everything left
  (SimulEval stops reading once the source is finished);
- an empty source is one ``EmptySegment(finished=True)`` with ``source_length = 0``.

:func:`stream_utterance` reproduces this for every target language of a jointly-decoding translator,
so the instances it produces can be scored by :mod:`mmst.evaluation.scorer` and compared with
SimulEval's own runs (``tests/test_simuleval_crosscheck.py``).

The translator protocol (implemented by ``mmst.simultaneous``; see :mod:`mmst.evaluation.bundle`)::

    translator.reset()
    translator.accept_audio(samples: float32 (n,) 16 kHz, finished: bool) -> {lang: [word, ...]}
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmst.evaluation.latency import split_units
from mmst.evaluation.translator_input import reset_translator

SAMPLE_RATE = 16000


@dataclass
class LangStream:
    """Output of one language for one utterance: latency ``units``, and per-unit ``delays`` and ``elapsed`` (ms)."""

    units: list[str] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    elapsed: list[float] = field(default_factory=list)


@dataclass
class StreamResult:
    """Result of :func:`stream_utterance`.

    Attributes:
        per_lang: ``{lang: LangStream}``.
        source_length_ms: ``n_samples * 1000 / 16000``.
        compute_s: wall-clock seconds spent in the translator (whole utterance).
        segment_compute_ms: wall-clock ms of each ``accept_audio`` call, in order.
    """

    per_lang: dict[str, LangStream]
    source_length_ms: float
    compute_s: float
    segment_compute_ms: list[float]


def _text(w: Any) -> str:
    return w if isinstance(w, str) else str(getattr(w, "text", w))


def stream_utterance(
    translator: Any,
    audio: np.ndarray,
    langs: Sequence[str],
    units: Mapping[str, str] | None = None,
    segment_ms: float = 320.0,
    *,
    whole: bool = False,
    utt_id: str | None = None,
    clock=time.perf_counter,
) -> StreamResult:
    """Stream ``audio`` through ``translator`` in SimulEval-sized segments and time every write.

    Args:
        translator: object with ``reset()`` and ``accept_audio(samples, finished) -> {lang: [words]}``.
        audio: float32 ``(N,)`` mono 16 kHz samples in [-1, 1] (``N`` may be 0).
        langs: languages to collect (must be decoded by the translator).
        units: ``{lang: "word" | "char"}`` latency unit per language (default ``word``).
        segment_ms: source segment size in ms (SimulEval ``--source-segment-size``), > 0.
        whole: send the whole utterance as one finished segment (offline decoding).
        utt_id: utterance id, passed to ``translator.reset(utt_id)`` when it takes one (dither seed).
        clock: time source in seconds (tests inject a fake clock).

    Returns:
        :class:`StreamResult`; ``delays`` and ``elapsed`` are in ms.

    Raises:
        ValueError: ``segment_ms <= 0`` or non-1-D audio.
    """
    if segment_ms <= 0:
        raise ValueError(f"segment_ms must be > 0, got {segment_ms}")
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1:
        raise ValueError(f"audio must be 1-D (N,), got shape {audio.shape}")
    units = dict(units or {})
    out = {lang: LangStream() for lang in langs}
    n_total = audio.size
    n_seg = n_total if whole else math.ceil(segment_ms / 1000 * SAMPLE_RATE)
    reset_translator(translator, utt_id)
    seg_ms_list: list[float] = []
    compute = 0.0
    start = clock()
    step = 0
    while True:
        if step < n_total:
            if step + max(n_seg, 1) >= n_total:
                chunk, finished = audio[step:], True
            else:
                chunk, finished = audio[step : step + n_seg], False
            step = min(step + max(n_seg, 1), n_total)
        else:  # empty source: SimulEval sends one EmptySegment(finished=True)
            chunk, finished = audio[:0], True
        t0 = clock()
        words = translator.accept_audio(chunk, finished=finished)
        t1 = clock()
        seg_ms_list.append((t1 - t0) * 1000.0)
        compute += t1 - t0
        delay = step * 1000.0 / SAMPLE_RATE
        elapsed = delay + (t1 - start) * 1000.0
        for lang in langs:
            text = " ".join(_text(w) for w in (words.get(lang) or []) if _text(w))
            us = split_units(text, units.get(lang, "word"))
            ls = out[lang]
            ls.units += us
            ls.delays += [delay] * len(us)
            ls.elapsed += [elapsed] * len(us)
        if finished:
            break
    return StreamResult(out, n_total * 1000.0 / SAMPLE_RATE, compute, seg_ms_list)
