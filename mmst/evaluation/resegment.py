"""Scoring unsegmented output: mWER resegmentation onto the reference sentences, then StreamLAAL.

A long-form system writes one word stream per language for a whole talk; the references are
sentences with known positions in the audio (MuST-C yaml: ``offset``, ``duration``). Scoring follows
the field (Matusov et al., 2005, "Evaluating Machine Translation Output with Automatic Sentence
Segmentation", IWSLT; Papi et al., 2024, "StreamAtt: Direct Streaming Speech-to-Text Translation with
Attention-based Audio History Selection", arXiv:2406.06097; simulstream):

1. **Resegmentation** (:func:`resegment`): the hypothesis word stream of a talk is split into as
   many pieces as the talk has reference sentences, by the minimum-WER (mWER) alignment of
   ``mweralign`` (Levenshtein alignment of the whole stream to the concatenated references, with
   sentence boundaries chosen to minimise the total WER; case-insensitive). Languages written without
   spaces (``ja``, ``zh``; the ``char`` latency unit) are tokenised for the alignment as simulstream 1.0
   does, by ``mweralign``'s ``CJSegmenter``: every non-Latin-1 character is a token, a run of Latin-1
   characters (a Latin word inside Japanese output) is one token. The pieces are then counted back in
   characters. Every hypothesis unit keeps its times.
2. **Per-sentence delays** (:func:`stream_instances`): unit ``i`` assigned to sentence ``j`` (starting
   at ``o_j`` ms in the stream, lasting ``|X_j|`` ms) gets the delay ``d_i = t_i - o_j`` (``t_i``: the
   unit's ``time_ms`` since the stream start) and ``elapsed_i = t^CA_i - o_j``. A unit the alignment
   puts into a sentence it was written before has a negative delay; it is kept, as in StreamLAAL.
3. **StreamLAAL**: the mean over sentences of LAAL (Papi et al., 2022, arXiv:2206.05807) of those
   delays, with ``|X_j|`` the sentence's duration and ``|Y*_j|`` its reference length::

       StreamLAAL = 1/N * sum_{j=1..N} LAAL(d^j, |X_j|, |Y*_j|)
       LAAL(d, |X|, |Y*|) = 1/tau * sum_{i=1..tau} ( d_i - (i-1) * |X| / max(|Y|, |Y*|) ),
       tau = min{ i : d_i >= |X| } (or |Y|)

   ``StreamLAAL_CA`` uses ``elapsed`` instead of ``d`` (computation-aware times). Sentences that
   receive no hypothesis unit are left out of the latency mean (counted as "" in BLEU), as SimulEval
   does for empty hypotheses. The instances are SimulEval-1.1 instances, so
   :func:`mmst.evaluation.scorer.score_instances` gives BLEU (on the resegmented hypotheses, with
   the per-language sacrebleu tokenizer) and ``LAAL`` = StreamLAAL, ``AL`` = StreamAL.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mmst.evaluation.instances import make_instance
from mmst.evaluation.latency import join_units, split_units


class ResegmentError(ValueError):
    """The alignment's output does not account for every hypothesis unit (should not happen)."""


@dataclass(frozen=True)
class TimedUnit:
    """A hypothesis latency unit (word, or character for the char unit) with its times (ms since the
    stream start)."""

    text: str
    time_ms: float
    time_ca_ms: float


def timed_units(words: Sequence[Any], unit: str = "word") -> list[TimedUnit]:
    """Split written words (objects with ``text``, ``time_ms``, ``time_ca_ms``, e.g.
    :class:`mmst.simultaneous.longform.LongFormWord`) into latency units that keep the word's times."""
    out = []
    for w in words:
        for u in split_units(w.text, unit):
            out.append(TimedUnit(u, float(w.time_ms), float(w.time_ca_ms)))
    return out


@contextlib.contextmanager
def _quiet_stdout():
    """mweralign's C++ core prints a line per call on stdout/stderr; keep the CLI's output clean."""
    saved = os.dup(1), os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _clean(token: str) -> str:
    # the aligner reads references line by line and treats "###" / tabs as document separators
    return token.replace("\t", " ").replace("###", "#").strip() or "_"


def resegment(units: Sequence[str], references: Sequence[str], unit: str = "word") -> list[list[int]]:
    """Assign hypothesis units to reference sentences by mWER alignment (``mweralign``).

    Args:
        units: the hypothesis of a whole talk as latency units, in writing order.
        references: the talk's reference sentences, in order (at least one).
        unit: ``word`` (whitespace words) or ``char`` (characters, for ``ja``/``zh``: hypothesis and
            references are tokenised by ``CJSegmenter`` for the alignment, as simulstream does).

    Returns:
        For each reference sentence, the indices into ``units`` assigned to it (consecutive, in order;
        together exactly ``range(len(units))``).

    Raises:
        ValueError: no references.
        ResegmentError: the aligner lost or added units, or a ``char`` unit is not one character.
    """
    if not references:
        raise ValueError("resegmentation needs at least one reference sentence")
    if not units:
        return [[] for _ in references]
    from mweralign import align_texts

    if unit == "char":
        from mweralign.segmenter import CJSegmenter

        cj = CJSegmenter()
        toks = [_clean(t) for t in cj.encode("".join(units))]
        sizes = [len(t) for t in cj.encode("".join(units))]  # characters per aligner token
        refs = [" ".join(_clean(t) for t in cj.encode(r.strip())) or "_" for r in references]
    else:
        toks = [_clean(u) for u in units]
        sizes = [1] * len(units)
        refs = [" ".join(_clean(t) for t in split_units(r, unit)) or "_" for r in references]
    if any(" " in t for t in toks):  # a unit with inner spaces: split it for the aligner, count pieces
        raise ResegmentError("hypothesis units must not contain spaces")
    if sum(sizes) != len(units):
        raise ResegmentError("char units must be single characters")
    with _quiet_stdout():
        out = align_texts("\n".join(refs), " ".join(toks))
    lines = out.split("\n")
    if len(lines) > len(references):  # trailing newline
        lines = lines[: len(references)] if all(not ln.strip() for ln in lines[len(references):]) else lines
    counts = [len(ln.split()) for ln in lines]
    if len(lines) != len(references) or sum(counts) != len(toks):
        raise ResegmentError(f"mWER alignment returned {len(lines)} lines with {sum(counts)} tokens for "
                             f"{len(references)} references and {len(toks)} tokens")
    out_idx, pos, tok = [], 0, 0
    for c in counts:
        n = sum(sizes[tok:tok + c])
        out_idx.append(list(range(pos, pos + n)))
        pos += n
        tok += c
    return out_idx


@dataclass(frozen=True)
class RefSentence:
    """A reference sentence of a talk: its text and position in the stream (ms since the stream start)."""

    text: str
    offset_ms: float
    duration_ms: float


def stream_instances(units: Sequence[TimedUnit], sentences: Sequence[RefSentence], unit: str = "word",
                     source: str = "", first_index: int = 0) -> list[dict[str, Any]]:
    """SimulEval-1.1 instances, one per reference sentence, from a talk's timed hypothesis units.

    Resegments with :func:`resegment`; delays relative to each sentence's start (module docstring).

    Args:
        units: the talk's hypothesis units with times (:func:`timed_units`).
        sentences: the talk's reference sentences with offsets and durations.
        unit: latency unit (``word`` / ``char``).
        source: description of the talk (its audio path) for the instances' ``source``.
        first_index: ``index`` of the first instance (talks are numbered on across a test set).

    Raises:
        ValueError: no sentences, or a sentence with a non-positive duration.
    """
    for j, s in enumerate(sentences):
        if s.duration_ms <= 0:
            raise ValueError(f"reference sentence {j}: duration {s.duration_ms} ms must be > 0")
    groups = resegment([u.text for u in units], [s.text for s in sentences], unit)
    out = []
    for j, (s, idx) in enumerate(zip(sentences, groups)):
        us = [units[i] for i in idx]
        out.append(make_instance(
            first_index + j, [u.text for u in us], [_ms(u.time_ms - s.offset_ms) for u in us],
            [_ms(u.time_ca_ms - s.offset_ms) for u in us], s.text,
            [source, f"offset={s.offset_ms / 1000.0:.3f}", f"duration={s.duration_ms / 1000.0:.3f}"],
            _ms(s.duration_ms), unit))
    return out


def _ms(x: float) -> float:
    """Round to 1 us: times converted from seconds must compare equal where they are (LAAL's cut-off
    ``d_i >= |X|``), not differ by float noise."""
    return round(float(x), 3)


def hypothesis_text(units: Sequence[TimedUnit], unit: str = "word") -> str:
    """The hypothesis stream as one string (words joined by spaces, characters by '')."""
    return join_units([u.text for u in units], unit)
