"""Simultaneous-translation latency metrics, exactly as SimulEval 1.1 defines them.

Every function here reproduces ``simuleval/evaluator/scorers/latency_scorer.py`` of SimulEval 1.1.4
(the arithmetic, the order of operations, the edge cases), so that our numbers can be compared with
papers that report SimulEval scores.  ``tests/test_simuleval_crosscheck.py`` checks agreement to 1e-6.

Notation (per sentence)
-----------------------
- ``X``: the source. ``|X|`` is its length: **milliseconds** of audio for speech input
  (SimulEval's ``source_length`` = ``n_samples * 1000 / sample_rate``), tokens for text input.
- ``Y``: the hypothesis, a list of units (words, or characters for zh/ja; see ``--eval-latency-unit``).
- ``Y*``: the reference. ``|Y*|`` is its number of whitespace-separated words,
  ``len(reference.split())``, for the word unit, and ``len(reference.strip())`` for the char unit
  (SimulEval counts spaces inside the reference in char mode; we do the same).
  **Deviation from SimulEval 1.1.4**, which counts words as ``len(reference.split(" "))``: a
  reference with repeated, leading or trailing spaces gets extra empty "words" there, which changes
  AL, LAAL and AP for the same output (``"a b  c"`` is 4 words to SimulEval, 3 here).
  ``simuleval_compat=True`` (``--simuleval-compat`` of ``eval/score.py`` and
  ``eval/simultaneous_eval.py``) restores SimulEval's count, to reproduce its numbers.
- ``d_i``: the delay of unit ``i`` (1-based): the amount of source (ms) read when it was written.
  For the computation-aware (``_CA``) variants, ``d_i`` is SimulEval's ``elapsed``: the delay plus
  the wall-clock compute time (ms) spent on the sentence up to that write.

Metrics
-------
- **AL** (Average Lagging; Ma et al., 2019, "STACL", arXiv:1810.08398), SimulEval variant::

      gamma = |Y*| / |X|
      tau   = min{ i : d_i >= |X| }   (or |Y| if no such i)
      AL    = 1/tau * sum_{i=1..tau} ( d_i - (i-1) / gamma )

  with ``AL = d_1`` when ``d_1 > |X|``.  ``|Y*|`` is the reference length (hypothesis length when no
  reference is given or ``use_ref_len=False``).
- **LAAL** (Length-Adaptive AL; Papi et al., 2022, arXiv:2206.05807): AL with
  ``gamma = max(|Y|, |Y*|) / |X|``, so over-generation cannot lower the score.
- **DAL** (Differentiable AL; Cherry & Foster, 2019, "Thinking Slow about Latency Evaluation for
  Simultaneous Machine Translation", arXiv:1906.00048; SimulEval cites Arivazhagan et al., 2019,
  arXiv:1906.05218)::

      gamma = |Y| / |X|         (hypothesis length)
      d'_1  = d_1;  d'_i = max(d_i, d'_{i-1} + 1/gamma)
      DAL   = 1/|Y| * sum_{i=1..|Y|} ( d'_i - (i-1) / gamma )

- **AP** (Average Proportion; Cho & Esipova, 2016, arXiv:1606.02012), SimulEval variant::

      AP = sum_{i=1..|Y|} d_i / ( |X| * |Y*| )      (reference length by default)

- **ATD** (Average Token Delay; Kano et al., 2023, arXiv:2211.13173): the mean over output tokens
  of (end time of the target token) - (end time of the source token it is aligned to), with source
  speech cut into 300 ms pseudo-tokens and text output tokens of duration 0 (text input: tokens of
  duration 1).  The ``_CA`` variant adds the per-write computation time to each target end time.
- **StartOffset** = ``d_1``; **EndOffset** = ``d_|Y| - |X|``.

Corpus scores are the (``statistics.mean``) average of sentence scores.  Sentences with an empty
hypothesis (no delays) are skipped, as SimulEval does, and reported by :func:`corpus_latency`.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

logger = logging.getLogger("mmst.evaluation.latency")

#: Latency metrics reported by default, in the order used in tables.
LATENCY_METRICS: tuple[str, ...] = ("AL", "LAAL", "AP", "DAL", "ATD", "StartOffset", "EndOffset")

#: ATD pseudo-token duration of source speech, in ms (SimulEval's ``SRC_TOKEN_LEN`` for speech).
ATD_SPEECH_SRC_TOKEN_MS = 300

Number = float | int


class LatencyError(ValueError):
    """Raised when latency cannot be computed (e.g. every hypothesis is empty)."""


def _check(delays: Sequence[Number], source_length: Number) -> None:
    if len(delays) == 0:
        raise LatencyError("empty hypothesis: no delays")
    if not source_length or source_length <= 0:
        raise LatencyError(f"source length must be > 0, got {source_length!r}")


def average_lagging(delays: Sequence[Number], source_length: Number, target_length: Number) -> float:
    """Average Lagging (Ma et al., 2019, arXiv:1810.08398), SimulEval 1.1 ``ALScorer``.

    ``AL = 1/tau * sum_{i<=tau} (d_i - (i-1) * |X| / |Y*|)``, ``tau`` = index of the first delay
    ``>= |X|`` (inclusive), or ``|Y|``; returns ``d_1`` when ``d_1 > |X|``.

    Args:
        delays: ``d_1..d_|Y|`` (ms for speech input, tokens for text input), non-empty.
        source_length: ``|X|`` in the same unit as ``delays``, > 0.
        target_length: ``|Y*|``, the reference length in units (or ``|Y|`` when no reference).

    Returns:
        AL in the unit of ``delays``.

    Raises:
        LatencyError: empty ``delays`` or non-positive ``source_length``.
    """
    _check(delays, source_length)
    if delays[0] > source_length:
        return delays[0]
    al = 0
    gamma = target_length / source_length
    tau = 0
    for t_minus_1, d in enumerate(delays):
        al += d - t_minus_1 / gamma
        tau = t_minus_1 + 1
        if d >= source_length:
            break
    return al / tau


def length_adaptive_average_lagging(
    delays: Sequence[Number], source_length: Number, reference_length: Number
) -> float:
    """Length-Adaptive Average Lagging (Papi et al., 2022, arXiv:2206.05807), SimulEval ``LAALScorer``.

    AL with ``gamma = max(|Y|, |Y*|) / |X|`` (:func:`average_lagging` with ``target_length =
    max(|Y|, |Y*|)``): an over-generating hypothesis (``|Y| > |Y*|``) is not rewarded with a lower lag.

    Args:
        delays: ``d_1..d_|Y|``, non-empty.
        source_length: ``|X|``, > 0.
        reference_length: ``|Y*|`` (``|Y|`` when no reference).

    Raises:
        LatencyError: empty ``delays`` or non-positive ``source_length``.
    """
    return average_lagging(delays, source_length, max(len(delays), reference_length))


def differentiable_average_lagging(delays: Sequence[Number], source_length: Number) -> float:
    """Differentiable Average Lagging (Cherry & Foster, 2019, arXiv:1906.00048), SimulEval ``DALScorer``.

    ``gamma = |Y| / |X|`` (hypothesis length); ``d'_1 = d_1``, ``d'_i = max(d_i, d'_{i-1} + 1/gamma)``;
    ``DAL = 1/|Y| * sum_i (d'_i - (i-1)/gamma)``.  No cut-off: every unit counts.

    Raises:
        LatencyError: empty ``delays`` or non-positive ``source_length``.
    """
    _check(delays, source_length)
    dal = 0
    target_length = len(delays)
    gamma = target_length / source_length
    g_prime_last = 0
    for i_minus_1, g in enumerate(delays):
        if i_minus_1 + 1 == 1:
            g_prime = g
        else:
            g_prime = max([g, g_prime_last + 1 / gamma])
        dal += g_prime - i_minus_1 / gamma
        g_prime_last = g_prime
    return dal / target_length


def average_proportion(delays: Sequence[Number], source_length: Number, target_length: Number) -> float:
    """Average Proportion (Cho & Esipova, 2016, arXiv:1606.02012), SimulEval ``APScorer``.

    ``AP = sum_i d_i / (|X| * target_length)``; SimulEval uses the reference length ``|Y*|`` as
    ``target_length`` by default (the paper uses ``|Y|``).  For speech ``d_i`` and ``|X|`` are ms, so
    AP is in (0, 1] for a hypothesis of reference length.

    Raises:
        LatencyError: empty ``delays`` or non-positive ``source_length``.
    """
    _check(delays, source_length)
    return sum(delays) / (source_length * target_length)


def start_offset(delays: Sequence[Number]) -> float:
    """StartOffset (SimulEval): the delay of the first unit, ``d_1``."""
    if len(delays) == 0:
        raise LatencyError("empty hypothesis: no delays")
    return delays[0]


def end_offset(delays: Sequence[Number], source_length: Number) -> float:
    """EndOffset (SimulEval): ``d_|Y| - |X|``, how long after the end of the source the last unit came."""
    if len(delays) == 0:
        raise LatencyError("empty hypothesis: no delays")
    return delays[-1] - source_length


def _subtract(a: Sequence[Number], b: Sequence[Number]) -> list[Number]:
    return [x - y for x, y in zip(a, b)]


def average_token_delay(
    delays: Sequence[Number],
    elapsed: Sequence[Number] | None = None,
    input_type: str = "speech",
) -> float:
    """Average Token Delay (Kano et al., 2023, arXiv:2211.13173), SimulEval 1.1 ``ATDScorer`` (text output).

    Writes with the same delay form one target chunk; the source read between two distinct delays
    forms one source chunk, cut into pseudo-tokens of 300 ms (speech; the remainder is a shorter
    token) or 1 (text).  Target token ``t`` (duration 0 for text output) ends at
    ``max(d_t, end_{t-1}) + c_t``, where ``c_t`` is its computation time (0 unless ``elapsed`` is
    given).  It is aligned to source token ``s = t - max(0, AccY - AccX)`` (``AccX``, ``AccY``:
    tokens in the chunks before its chunk), capped at the source tokens read so far; ATD is the mean
    of ``end_tgt(t) - end_src(s)``.

    Args:
        delays: ``d_1..d_|Y|``, non-empty (ms for speech input).
        elapsed: SimulEval ``elapsed`` (delay + cumulative compute, ms) for the computation-aware
            variant; ``c_t`` is the increase of ``elapsed - delays`` from the previous write.  When
            every value is 0, SimulEval uses the zeros as compute times; we do the same.
        input_type: ``"speech"`` (300 ms source pseudo-tokens) or ``"text"`` (unit tokens).

    Returns:
        ATD in the unit of ``delays``.

    Raises:
        LatencyError: empty ``delays``; ``elapsed`` of the wrong length.
    """
    delays = list(delays)
    if len(delays) == 0:
        raise LatencyError("empty hypothesis: no delays")
    if input_type == "text":
        src_token_len: Number = 1
        tgt_token_len: Number = 1
    elif input_type == "speech":
        src_token_len = ATD_SPEECH_SRC_TOKEN_MS
        tgt_token_len = 0
    else:
        raise ValueError(f"input_type must be 'speech' or 'text', got {input_type!r}")

    if elapsed is not None:
        elapsed = list(elapsed)
        if len(elapsed) != len(delays):
            raise LatencyError(f"elapsed has {len(elapsed)} values but delays has {len(delays)}")
        if elapsed != [0] * len(delays):
            compute_elapsed = _subtract(elapsed, delays)
            compute_times = _subtract(compute_elapsed, [0] + compute_elapsed[:-1])
        else:
            compute_times = elapsed
    else:
        compute_times = [0] * len(delays)

    chunk_sizes: dict[str, list[Number]] = {"src": [0], "tgt": [0]}
    token_to_chunk: dict[str, list[int]] = {"src": [0], "tgt": [0]}
    token_to_time: dict[str, list[Number]] = {"src": [0], "tgt": [0]}
    delays_no_duplicate = sorted(set(delays), key=delays.index)

    prev_delay = None
    for delay in delays:
        if delay != prev_delay:
            chunk_sizes["tgt"].append(1)
        else:
            chunk_sizes["tgt"][-1] += 1
        prev_delay = delay
    for i, chunk_size in enumerate(chunk_sizes["tgt"][1:], 1):
        token_to_chunk["tgt"] += [i] * int(chunk_size)
    tgt_token_lens = [tgt_token_len] * len(delays)

    if input_type == "text":
        chunk_sizes["src"] += _subtract(delays_no_duplicate, [0] + delays_no_duplicate[:-1])
        for i, chunk_size in enumerate(chunk_sizes["src"][1:], 1):
            for token_len in int(chunk_size) * [src_token_len]:
                token_to_time["src"].append(token_to_time["src"][-1] + token_len)
                token_to_chunk["src"].append(i)
    else:
        chunk_durations = _subtract(delays_no_duplicate, [0] + delays_no_duplicate[:-1])
        for i, chunk_duration in enumerate(chunk_durations, 1):
            num_tokens, rest = divmod(chunk_duration, src_token_len)
            token_lens = int(num_tokens) * [src_token_len] + ([rest] if rest != 0 else [])
            chunk_sizes["src"] += [len(token_lens)]
            for token_len in token_lens:
                token_to_time["src"].append(token_to_time["src"][-1] + token_len)
                token_to_chunk["src"].append(i)

    for delay, compute_time, token_len in zip(delays, compute_times, tgt_token_lens):
        tgt_start_time = max(delay, token_to_time["tgt"][-1])
        token_to_time["tgt"].append(tgt_start_time + token_len + compute_time)

    atd_delays = []
    for t in range(1, len(token_to_chunk["tgt"])):
        chunk_id = token_to_chunk["tgt"][t]
        acc_x = sum(chunk_sizes["src"][:chunk_id])
        acc_y = sum(chunk_sizes["tgt"][:chunk_id])
        s = t - max(0, acc_y - acc_x)
        current_src_size = sum(chunk_sizes["src"][: chunk_id + 1])
        if s >= current_src_size:
            s = current_src_size
        atd_delays.append(token_to_time["tgt"][t] - token_to_time["src"][int(s)])
    return float(statistics.mean(atd_delays))


def reference_length(reference: str, unit: str = "word", *, simuleval_compat: bool = False) -> int:
    """Length ``|Y*|`` of a reference in latency units.

    ``word``: the number of whitespace-separated words, ``len(reference.split())``; with
    ``simuleval_compat``, SimulEval 1.1.4's ``len(reference.split(" "))`` (split on single spaces, so
    repeated, leading and trailing spaces add empty words: ``"a b  c"`` -> 4).
    ``char``: ``len(reference.strip())`` (inner spaces count, as in SimulEval) in both modes.

    Raises:
        ValueError: unknown unit.
    """
    if unit == "word":
        return len(reference.split(" ")) if simuleval_compat else len(reference.split())
    if unit == "char":
        return len(reference.strip())
    raise ValueError(f"latency unit must be 'word' or 'char', got {unit!r}")


def split_units(text: str, unit: str = "word") -> list[str]:
    """Split a text into latency units like SimulEval's ``TextOutputInstance``.

    ``word``: ``text.strip().split()``; ``char``: the characters of ``text`` without spaces.

    Raises:
        ValueError: unknown unit.
    """
    if unit == "word":
        return text.strip().split()
    if unit == "char":
        return list(text.replace(" ", ""))
    raise ValueError(f"latency unit must be 'word' or 'char', got {unit!r}")


def join_units(units: Sequence[str], unit: str = "word") -> str:
    """Inverse of :func:`split_units` as SimulEval writes ``prediction``: words joined by spaces, chars by ''."""
    if unit == "word":
        return " ".join(units)
    if unit == "char":
        return "".join(units)
    raise ValueError(f"latency unit must be 'word' or 'char', got {unit!r}")


def sentence_latency(
    delays: Sequence[Number],
    source_length: Number,
    reference_len: Number | None,
    *,
    use_ref_len: bool = True,
    input_type: str = "speech",
    elapsed: Sequence[Number] | None = None,
    computation_aware: bool = False,
) -> dict[str, float]:
    """All latency metrics of one sentence (see the module docstring for formulas).

    Args:
        delays: per-unit delays (ms for speech), non-empty.
        source_length: ``|X|`` (ms for speech), > 0.
        reference_len: ``|Y*|`` in units, or ``None`` when there is no reference (then ``|Y|``).
        use_ref_len: ``False`` = SimulEval's ``--no-use-ref-len`` (``|Y|`` instead of ``|Y*|``).
        input_type: ``speech`` or ``text`` (ATD pseudo-token size).
        elapsed: per-unit SimulEval ``elapsed`` (ms); required when ``computation_aware``.
        computation_aware: compute the ``_CA`` variants: AL, LAAL, AP, DAL, StartOffset and EndOffset
            on ``elapsed`` instead of ``delays``; ATD on ``delays`` plus compute times.

    Returns:
        ``{"AL": .., "LAAL": .., "AP": .., "DAL": .., "ATD": .., "StartOffset": .., "EndOffset": ..}``
        (same keys without suffix for the ``_CA`` variants; the caller adds the suffix).

    Raises:
        LatencyError: empty delays/elapsed, non-positive source length, missing elapsed.
    """
    if computation_aware:
        if elapsed is None or len(elapsed) == 0:
            raise LatencyError("computation-aware latency needs 'elapsed'")
        ts = list(elapsed)
    else:
        ts = list(delays)
    _check(ts, source_length)
    tgt_len = len(ts) if (not use_ref_len or reference_len is None) else reference_len
    return {
        "AL": average_lagging(ts, source_length, tgt_len),
        "LAAL": length_adaptive_average_lagging(ts, source_length, tgt_len),
        "AP": average_proportion(ts, source_length, tgt_len),
        "DAL": differentiable_average_lagging(ts, source_length),
        "ATD": average_token_delay(delays, elapsed if computation_aware else None, input_type),
        "StartOffset": start_offset(ts),
        "EndOffset": end_offset(ts, source_length),
    }


@dataclass
class CorpusLatency:
    """Corpus-level latency: ``scores`` maps ``AL``, ..., and ``AL_CA``, ... to the mean over scored sentences.

    ``skipped_empty`` lists the indices of instances with an empty hypothesis (skipped, as SimulEval
    does); ``skipped_invalid`` lists those skipped for another reason (e.g. source length 0) with it;
    ``n_scored`` counts the scored sentences.
    """

    scores: dict[str, float]
    n_scored: int
    skipped_empty: list[int] = field(default_factory=list)
    skipped_invalid: list[tuple[int, str]] = field(default_factory=list)


def corpus_latency(
    instances: Iterable[Mapping],
    unit: str = "word",
    *,
    computation_aware: bool = True,
    use_ref_len: bool = True,
    input_type: str = "speech",
    metrics: Sequence[str] = LATENCY_METRICS,
    simuleval_compat: bool = False,
) -> CorpusLatency:
    """Corpus latency of SimulEval-style instances (dicts with ``delays``, ``elapsed``, ``source_length``,
    ``reference``, ``index``), averaged over sentences with ``statistics.mean`` like SimulEval.

    The plain metrics always use ``delays`` and the ``_CA`` metrics ``elapsed`` (unlike SimulEval
    1.1.4, which with ``--computation-aware`` computes the plain metrics from ``elapsed`` too:
    SimulEval issue 44).

    Args:
        instances: instance dicts (see :mod:`mmst.evaluation.instances`).
        unit: ``word`` or ``char``; how the reference length is counted.
        computation_aware: also compute ``<metric>_CA``; instances without ``elapsed`` are skipped for them.
        use_ref_len: see :func:`sentence_latency`.
        input_type: ``speech`` or ``text``.
        metrics: which metrics to report.
        simuleval_compat: count reference words like SimulEval 1.1.4 (:func:`reference_length`).

    Returns:
        :class:`CorpusLatency`.

    Raises:
        LatencyError: no instance has a non-empty hypothesis (every hypothesis is empty).
    """
    per: dict[str, list[float]] = {m: [] for m in metrics}
    per_ca: dict[str, list[float]] = {m: [] for m in metrics}
    skipped_empty: list[int] = []
    skipped_invalid: list[tuple[int, str]] = []
    n_total = 0
    for pos, ins in enumerate(instances):
        n_total += 1
        index = ins.get("index", pos)
        delays = ins.get("delays") or []
        if len(delays) == 0:
            logger.debug("Instance %s has no delay information (empty hypothesis). Skipped", index)
            skipped_empty.append(index)
            continue
        ref = ins.get("reference")
        ref_len = None if ref is None else reference_length(ref, unit, simuleval_compat=simuleval_compat)
        try:
            plain = sentence_latency(
                delays, ins.get("source_length"), ref_len, use_ref_len=use_ref_len, input_type=input_type
            )
        except LatencyError as e:
            logger.warning("Instance %s skipped: %s", index, e)
            skipped_invalid.append((index, str(e)))
            continue
        for m in metrics:
            per[m].append(plain[m])
        if computation_aware:
            elapsed = ins.get("elapsed") or []
            if len(elapsed) == 0:
                logger.warning("Instance %s has no computational delay information. Skipped for _CA", index)
                continue
            ca = sentence_latency(
                delays,
                ins.get("source_length"),
                ref_len,
                use_ref_len=use_ref_len,
                input_type=input_type,
                elapsed=elapsed,
                computation_aware=True,
            )
            for m in metrics:
                per_ca[m].append(ca[m])
    n_scored = len(per[metrics[0]]) if metrics else 0
    if n_scored == 0:
        if n_total == 0:
            raise LatencyError("no instances to score")
        raise LatencyError(
            f"every hypothesis is empty or unscorable ({len(skipped_empty)} empty, "
            f"{len(skipped_invalid)} invalid, of {n_total}); nothing to score"
        )
    scores: dict[str, float] = {m: float(statistics.mean(per[m])) for m in metrics}
    if computation_aware:
        for m in metrics:
            if per_ca[m]:
                scores[f"{m}_CA"] = float(statistics.mean(per_ca[m]))
    return CorpusLatency(scores, n_scored, skipped_empty, skipped_invalid)
