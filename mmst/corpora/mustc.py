"""MuST-C reading and cross-pair alignment into a multi-way (one-to-many) corpus.

MuST-C ships one release per language pair (``en-de``, ``en-es``, ...). Each pair was segmented and
aligned on its own, so the same TED talk can be cut slightly differently in ``en-de`` and ``en-fr``.
This module turns the per-pair releases into one multi-way corpus: one English segment (one audio
interval) with its translation into every target language.

Layout read (per pair ``en-XX`` and split, e.g. ``train``, ``dev``, ``tst-COMMON``, ``tst-HE``)::

    ROOT/en-XX/data/<split>/txt/<split>.yaml   one segment per line, seconds:
                                               - {duration: 3.5, offset: 16.61, rW: 10, uW: 0,
                                                  speaker_id: spk.1, wav: ted_1.wav}
    ROOT/en-XX/data/<split>/txt/<split>.en     English transcript, line-aligned with the yaml
    ROOT/en-XX/data/<split>/txt/<split>.XX     translation, line-aligned with the yaml
    ROOT/en-XX/data/<split>/wav/<talk>.wav     whole talks

Units: ``offset``/``duration`` in the yaml and everywhere here are **seconds** (float); the matching
tolerance is given in **milliseconds** (``tolerance_ms``); IoU is a unitless ratio in [0, 1].

Design: everything is pure functions over :class:`Segment` records, so it is fast and testable.

1. :func:`mmst.corpora.mustc_layout.read_pair_split` (lenient mode) reads one pair/split into records
   and returns :class:`PrepIssue` entries (file + line) for bad input instead of raising, so a run
   finishes with the rest.
2. :func:`resolve_split_conflicts` enforces split hygiene: a talk found in more than one split across
   pairs is assigned to one split by the rule test > dev > train.
3. :func:`align_talk` / :func:`align_segments` build the cross-pair alignment: per talk, an index
   ``normalised English -> candidate groups``; a segment of a later pair joins a group of an earlier
   pair when the normalised English is equal and the intervals agree (offset and duration within
   ``tolerance_ms`` = fast path, else IoU >= ``min_iou``). Offsets are sorted **numerically** once
   per talk and language (fairseq's ``prep_mustc_data.py`` groups segments with ``groupby`` on the
   wav name and keeps yaml order; any tool that sorts the yaml offset *strings* puts ``10.2`` before
   ``9.5`` - we never sort strings).
4. :func:`build_report` summarises segments in / matched / dropped by reason / hours per split and
   language, plus multi-way totals.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mmst.corpora.mustc_layout import (  # noqa: F401  (re-exported: the lenient reader's API)
    PrepIssue,
    Segment,
    YamlLineError,
    find_pairs,
    normalize_text,
    pair_path,
    parse_yaml_line,
    read_pair_split,
    split_paths,
)

log = logging.getLogger(__name__)

#: Splits read by default (MuST-C v1 names). ``tst-HE`` is read when present.
DEFAULT_SPLITS = ("train", "dev", "tst-COMMON", "tst-HE")

#: Splits that are never length-filtered and that win split conflicts.
TEST_SPLIT_PREFIXES = ("tst", "test")

#: Drop reasons used in reports (keys of ``dropped`` dictionaries).
DROP_REASONS = (
    "bad_yaml",  # a yaml line that cannot be parsed or lacks offset/duration/wav
    "bad_interval",  # negative offset or non-positive duration
    "bad_encoding",  # a yaml/text file that is not UTF-8 (whole pair/split skipped)
    "line_count_mismatch",  # yaml and text files of a pair/split differ in length (whole file skipped)
    "split_missing",  # the pair lacks this split (nothing read)
    "missing_wav",  # wav named in the yaml is absent
    "duplicate",  # same (wav, offset, duration) twice in one pair/split; the later line is dropped
    "split_conflict",  # talk resolved to another split and --split-conflict drop
    "no_text_match",  # no segment of the reference pairs has the same normalised English in the talk
    "iou_below_min",  # same English exists but no interval overlaps with IoU >= min_iou
    "talk_missing_in_pairs",  # the talk is absent from too many pairs to reach the language minimum
    "too_few_langs",  # matched, but the utterance has fewer than the required languages
)


# ----------------------------------------------------------------------------------------------
# Parsing and normalisation
# ----------------------------------------------------------------------------------------------

def fairseq_string_sort_differs(offsets: Sequence[float | str]) -> bool:
    """True when sorting the offsets as yaml strings gives another order than sorting them as numbers.

    Example: ``[9.5, 10.2]`` -> True (``"10.2" < "9.5"`` as text). Used by reports/tests to show
    that numeric sorting matters.
    """
    as_str = [o if isinstance(o, str) else f"{o}" for o in offsets]
    return sorted(as_str) != [s for _, s in sorted(zip(map(float, as_str), as_str))]


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# Split hygiene
# ----------------------------------------------------------------------------------------------


def split_rank(split: str) -> tuple[int, int]:
    """Priority of a split for conflict resolution; larger wins: test > dev > train.

    ``tst-COMMON`` outranks ``tst-HE`` and other test splits; unknown names rank like train.
    """
    s = split.lower()
    if s.startswith(TEST_SPLIT_PREFIXES):
        return (2, 2 if s == "tst-common" else 1)
    if s.startswith(("dev", "valid")):
        return (1, 0)
    return (0, 0)


def is_test_split(split: str) -> bool:
    """True for test splits (``tst-*``, ``test*``): never length-filtered, stay whole."""
    return split.lower().startswith(TEST_SPLIT_PREFIXES)


@dataclass
class SplitConflict:
    """A talk found in more than one split across pairs and how it was resolved.

    Attributes:
        talk: talk id.
        splits_by_lang: ``{lang: split}`` as read.
        resolved: the split the talk is assigned to (highest :func:`split_rank`).
        action: ``move`` (segments of lower splits are moved into ``resolved``) or ``drop``.
        n_segments: number of segments moved or dropped.
    """

    talk: str
    splits_by_lang: dict[str, list[str]]
    resolved: str
    action: str
    n_segments: int

    def as_dict(self) -> dict:
        """JSON-serialisable form."""
        return {
            "talk": self.talk,
            "splits_by_lang": self.splits_by_lang,
            "resolved": self.resolved,
            "action": self.action,
            "n_segments": self.n_segments,
        }


def resolve_split_conflicts(
    segments: Iterable[Segment], action: str = "move"
) -> tuple[list[Segment], list[tuple[Segment, str]], list[SplitConflict]]:
    """Enforce "a talk lives in one split" across all pairs, by the rule test > dev > train.

    Args:
        segments: all records of all pairs and splits.
        action: ``move`` - records of the talk found in a lower-ranked split are re-assigned to the
            winning split (``Segment.split`` is changed; their original split stays visible through
            ``Segment.file``), so the talk keeps the translations of every pair; ``drop`` - those
            records are dropped with reason ``split_conflict``.

    Returns:
        (kept records, dropped ``(record, reason)``, conflicts found).
    """
    if action not in ("move", "drop"):
        raise ValueError(f"split conflict action must be 'move' or 'drop', got {action!r}")
    segments = list(segments)
    splits_of: dict[str, set[str]] = defaultdict(set)
    for s in segments:
        splits_of[s.talk].add(s.split)
    winner = {t: max(sp, key=split_rank) for t, sp in splits_of.items() if len(sp) > 1}
    if not winner:
        return segments, [], []
    kept: list[Segment] = []
    dropped: list[tuple[Segment, str]] = []
    by_talk_lang: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    n_changed: Counter = Counter()
    for s in segments:
        w = winner.get(s.talk)
        if w is None:
            kept.append(s)
            continue
        by_talk_lang[s.talk][s.lang].add(s.split)
        if s.split == w:
            kept.append(s)
        elif action == "move":
            s.split = w
            kept.append(s)
            n_changed[s.talk] += 1
        else:
            dropped.append((s, "split_conflict"))
            n_changed[s.talk] += 1
    conflicts = []
    for talk in sorted(winner):
        c = SplitConflict(
            talk, {lg: sorted(v) for lg, v in sorted(by_talk_lang[talk].items())}, winner[talk], action, n_changed[talk]
        )
        log.warning(
            "split conflict: talk %s is in splits %s across pairs; resolved to %s (%s %d segment(s))",
            talk, c.splits_by_lang, c.resolved, "moved" if action == "move" else "dropped", c.n_segments,
        )
        conflicts.append(c)
    return kept, dropped, conflicts


# ----------------------------------------------------------------------------------------------
# Alignment
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlignParams:
    """Alignment parameters.

    Attributes:
        min_iou: minimum intersection-over-union of two intervals (default 0.9).
        tolerance_ms: offsets and durations both within this many **milliseconds** = match without
            computing IoU (fast path; default 10).
        interval: ``first`` - the utterance's audio is the interval of the first language (in
            ``--tgt-langs`` order) that has the segment; ``union`` - the union (min start, max end) of
            all matched intervals.
        min_langs: keep an utterance when at least this many languages have a translation;
            ``None`` = all requested languages.
        merge_splits: when a segment of a later pair has no match, try it joined with the next
            segment of the same pair (English texts concatenated, intervals united): recovers
            segments that one pair split in two. The translations are joined with a space.
        match_text: ``True``: candidates must have the same normalised English. ``False``: the
            interval alone decides, within ``tolerance_ms`` (the exact join of
            :func:`mmst.corpora.multiway.join_pairs`); needs ``min_iou=1`` and ``merge_splits=False``.
    """

    min_iou: float = 0.9
    tolerance_ms: float = 10.0
    interval: str = "first"
    min_langs: int | None = None
    merge_splits: bool = True
    match_text: bool = True

    def __post_init__(self):
        if not 0.0 < self.min_iou <= 1.0:
            raise ValueError(f"min_iou must be in (0, 1], got {self.min_iou}")
        if self.tolerance_ms < 0:
            raise ValueError(f"tolerance_ms must be >= 0, got {self.tolerance_ms}")
        if self.interval not in ("first", "union"):
            raise ValueError(f"interval must be 'first' or 'union', got {self.interval!r}")
        if self.min_langs is not None and self.min_langs < 1:
            raise ValueError(f"min_langs must be >= 1, got {self.min_langs}")
        if not self.match_text and (self.min_iou < 1.0 or self.merge_splits):
            raise ValueError("match_text=False (exact join) needs min_iou=1 and merge_splits=False")


def iou(a_start: float, a_end: float, b_start: float, b_end: float) -> float:
    """Intersection over union of two intervals (seconds); 0.0 when disjoint or degenerate."""
    inter = min(a_end, b_end) - max(a_start, b_start)
    if inter <= 0:
        return 0.0
    union = max(a_end, b_end) - min(a_start, b_start)
    return inter / union if union > 0 else 0.0


@dataclass
class Match:
    """The segment(s) of one language in an aligned group.

    Attributes:
        segments: one record, or two consecutive records joined by ``merge_splits``.
        method: ``reference`` (the group's anchor), ``exact`` (within tolerance), ``iou``, ``merge``.
        iou: IoU of the (united) interval with the group's reference interval.
    """

    segments: list[Segment]
    method: str
    iou: float = 1.0

    @property
    def tgt(self) -> str:
        """Translation text (joined with a space when merged)."""
        return " ".join(s.tgt for s in self.segments)

    @property
    def duration(self) -> float:
        """Sum of the matched segments' own durations, seconds."""
        return sum(s.duration for s in self.segments)


@dataclass
class AlignedGroup:
    """One multi-way utterance candidate: a reference segment plus its matches in other languages.

    Attributes:
        split: split after split hygiene.
        talk: talk id.
        ref: the anchor record (first language, in ``--tgt-langs`` order, that has the segment).
        anchor_reason: why the anchor started a group: ``reference`` (the talk's first language
            present), ``no_text_match`` or ``iou_below_min`` (a later language's segment that
            matched nothing).
        matches: ``{lang: Match}`` (includes the anchor's language).
        offset, duration: the utterance interval in seconds (reference or union, see
            :class:`AlignParams`); ``wav`` is the anchor's wav path.
    """

    split: str
    talk: str
    ref: Segment
    anchor_reason: str
    matches: dict[str, Match] = field(default_factory=dict)
    offset: float = 0.0
    duration: float = 0.0

    @property
    def wav(self) -> str:
        """Absolute path of the talk audio (the anchor's)."""
        return self.ref.wav

    @property
    def n_langs(self) -> int:
        """Number of languages with a translation."""
        return len(self.matches)

    def tgt_text(self, lang: str) -> str:
        """Translation for ``lang`` or '' when the language has no match."""
        m = self.matches.get(lang)
        return m.tgt if m is not None else ""


def _find(cands, groups, seg_off, seg_dur, taken, tol_s, min_iou):
    """Best candidate group index for an interval, or (None, reason).

    A candidate whose offset and duration are both within ``tol_s`` wins (the nearest one, by the
    sum of the two differences); else the highest IoU when >= ``min_iou``.
    """
    if not cands:
        return None, "no_text_match", 0.0
    best, best_iou, seg_end = None, -1.0, seg_off + seg_dur
    exact, exact_d = None, math.inf
    for gi in cands:
        if gi in taken:
            continue
        g = groups[gi]
        d_off, d_dur = abs(g.offset - seg_off), abs(g.duration - seg_dur)
        if d_off <= tol_s and d_dur <= tol_s:
            if d_off + d_dur < exact_d:
                exact, exact_d = gi, d_off + d_dur
            continue
        v = iou(g.offset, g.offset + g.duration, seg_off, seg_end)
        if v > best_iou:
            best, best_iou = gi, v
    if exact is not None:
        g = groups[exact]
        return exact, "exact", iou(g.offset, g.offset + g.duration, seg_off, seg_end)
    if best is not None and best_iou >= min_iou - 1e-9:
        return best, "iou", best_iou
    return None, "iou_below_min", best_iou


def align_talk(
    by_lang: dict[str, list[Segment]], langs: Sequence[str], params: AlignParams, split: str = "", talk: str = ""
) -> list[AlignedGroup]:
    """Align the segments of one talk (one split) across languages.

    Algorithm (pure, O(n) dict lookups + a few interval checks per segment):

    1. Languages are visited in ``langs`` order; each language's records are sorted once by numeric
       (offset, duration).
    2. Candidates: the groups with the same normalised English (an index), or with
       ``match_text=False`` the groups whose offset is within ``tolerance_ms`` (a sorted offset
       list). A record joins the nearest candidate whose reference interval matches within
       ``tolerance_ms`` (fast path), else the candidate with the highest IoU if >= ``min_iou``; a
       group takes at most one record (or merged pair) per language.
    3. With ``merge_splits``, two consecutive unmatched records are tried as one (texts joined with
       a space, intervals united).
    4. Records still unmatched start new groups (so a talk or segment missing from the first pair
       can still be kept with ``--min-langs``).

    Args:
        by_lang: ``{lang: records of this talk}``.
        langs: requested languages, reference order.
        params: :class:`AlignParams`.
        split, talk: labels for the groups.

    Returns:
        groups sorted by (offset, duration), with ``offset``/``duration`` set per ``params.interval``.
    """
    tol_s = params.tolerance_ms / 1000.0
    groups: list[AlignedGroup] = []
    index: dict[str, list[int]] = {}
    by_offset: list[tuple[float, int]] = []  # (offset, group index), sorted; candidates when not match_text

    def candidates(norm: str, offset: float) -> list[int] | None:
        if params.match_text:
            return index.get(norm)
        lo = bisect.bisect_left(by_offset, (offset - tol_s, -1))
        hi = bisect.bisect_right(by_offset, (offset + tol_s, len(groups)))
        return [gi for _, gi in by_offset[lo:hi]]

    for lang in langs:
        segs = by_lang.get(lang)
        if not segs:
            continue
        segs = sorted(segs, key=lambda s: (s.offset, s.duration))
        taken: set[int] = set()
        unmatched: list[tuple[int, str]] = []  # (position in segs, reason)
        for pos, s in enumerate(segs):
            gi, how, v = _find(candidates(s.norm, s.offset), groups, s.offset, s.duration, taken, tol_s,
                               params.min_iou)
            if gi is not None:
                groups[gi].matches[lang] = Match([s], how, v)
                taken.add(gi)
            else:
                unmatched.append((pos, how))
        if params.merge_splits and len(unmatched) > 1 and groups:
            still: list[tuple[int, str]] = []
            i = 0
            while i < len(unmatched):
                pos, why = unmatched[i]
                if i + 1 < len(unmatched) and unmatched[i + 1][0] == pos + 1:
                    a, b = segs[pos], segs[pos + 1]
                    start, end = min(a.offset, b.offset), max(a.end, b.end)
                    gi, how, v = _find(
                        index.get(f"{a.norm} {b.norm}"), groups, start, end - start, taken, tol_s, params.min_iou
                    )
                    if gi is not None:
                        groups[gi].matches[lang] = Match([a, b], "merge", v)
                        taken.add(gi)
                        i += 2
                        continue
                still.append((pos, why))
                i += 1
            unmatched = still
        for pos, why in unmatched:
            s = segs[pos]
            g = AlignedGroup(split or s.split, talk or s.talk, s, "reference" if not groups else why,
                             offset=s.offset, duration=s.duration)
            g.matches[lang] = Match([s], "reference", 1.0)
            index.setdefault(s.norm, []).append(len(groups))
            bisect.insort(by_offset, (s.offset, len(groups)))
            groups.append(g)
    if params.interval == "union":
        for g in groups:
            if len(g.matches) > 1:
                start = min(s.offset for m in g.matches.values() for s in m.segments)
                end = max(s.end for m in g.matches.values() for s in m.segments)
                g.offset, g.duration = start, end - start
    groups.sort(key=lambda g: (g.offset, g.duration))
    return groups


@dataclass
class AlignmentResult:
    """Output of :func:`align_segments`.

    Attributes:
        kept: groups with at least the required number of languages, sorted by (split, talk, offset).
        rejected: groups below the minimum (their records are counted as dropped).
        dropped: ``(record, reason)`` for every record not in a kept group (includes pre-alignment
            drops passed in).
        conflicts: split conflicts resolved.
        langs: requested languages; ``min_langs``: the effective minimum.
        min_langs_by_split: the minimum applied per split: ``min(min_langs, pairs providing the
            split)``, so a split missing (or unreadable) for one pair still yields utterances, with
            empty cells for that pair's language.
    """

    kept: list[AlignedGroup]
    rejected: list[AlignedGroup]
    dropped: list[tuple[Segment, str]]
    conflicts: list[SplitConflict]
    langs: list[str]
    min_langs: int
    min_langs_by_split: dict[str, int] = field(default_factory=dict)


def align_segments(
    segments: Iterable[Segment],
    langs: Sequence[str],
    params: AlignParams = AlignParams(),
    split_conflict: str = "move",
    progress: bool = False,
) -> AlignmentResult:
    """Split hygiene + per-talk alignment over all records of all pairs.

    Args:
        segments: records from :func:`read_pair_split` for every pair and split.
        langs: requested target languages; the first is the reference.
        params: :class:`AlignParams`; ``min_langs=None`` means ``len(langs)``.
        split_conflict: ``move`` or ``drop``, see :func:`resolve_split_conflicts`.
        progress: show a tqdm bar over talks.

    Returns:
        :class:`AlignmentResult`. Drop reasons of records in rejected groups: ``talk_missing_in_pairs``
        when the talk exists in fewer pairs than required; for a lone record of a non-reference
        language, why it matched nothing (``no_text_match`` / ``iou_below_min``); else
        ``too_few_langs``. The minimum is applied per split over the pairs that provide the split
        (a pair whose split is missing or unreadable does not block the split; its cells are empty).
    """
    langs = list(langs)
    segments = list(segments)
    need = params.min_langs if params.min_langs is not None else len(langs)
    need = min(need, len(langs))
    split_langs: dict[str, set[str]] = defaultdict(set)
    for s in segments:
        split_langs[s.split].add(s.lang)
    need_by_split = {sp: min(need, len(ls)) for sp, ls in split_langs.items()}
    for sp, ls in sorted(split_langs.items()):
        if len(ls) < need:
            log.warning(
                "split %s: only %d pair(s) (%s) provide it; requiring %d language(s) there instead of %d",
                sp, len(ls), ",".join(lg for lg in langs if lg in ls), need_by_split[sp], need,
            )
    kept_segs, dropped, conflicts = resolve_split_conflicts(segments, split_conflict)
    buckets: dict[tuple[str, str], dict[str, list[Segment]]] = defaultdict(lambda: defaultdict(list))
    for s in kept_segs:
        buckets[(s.split, s.talk)][s.lang].append(s)
    keys = sorted(buckets, key=lambda k: (split_rank(k[0]), k[0], k[1]))
    it: Iterable = keys
    if progress:
        from tqdm import tqdm

        it = tqdm(keys, desc="align talks", unit="talk")
    kept: list[AlignedGroup] = []
    rejected: list[AlignedGroup] = []
    for key in it:
        by_lang = buckets[key]
        groups = align_talk(by_lang, langs, params, key[0], key[1])
        need_here = need_by_split.get(key[0], need)
        talk_short = len(by_lang) < need_here
        for g in groups:
            if g.n_langs >= need_here:
                kept.append(g)
                continue
            rejected.append(g)
            if talk_short:
                reason = "talk_missing_in_pairs"
            elif g.n_langs == 1 and g.anchor_reason != "reference":
                reason = g.anchor_reason
            else:
                reason = "too_few_langs"
            for m in g.matches.values():
                dropped.extend((s, reason) for s in m.segments)
    return AlignmentResult(kept, rejected, dropped, conflicts, langs, need, need_by_split)


def utterance_ids(groups: Sequence[AlignedGroup]) -> list[str]:
    """Stable ids ``<talk>_<k>`` (k = 0-based rank of the group within its talk, numeric offset order).

    Ids are unique within a corpus because a talk lives in one split.
    """
    counter: Counter = Counter()
    out = []
    for g in groups:
        out.append(f"{g.talk}_{counter[g.talk]}")
        counter[g.talk] += 1
    return out


def to_rows(result: AlignmentResult) -> dict[str, list[dict[str, str | float]]]:
    """Kept groups as builder rows, per split.

    Each row: ``id, wav, offset, duration`` (seconds), ``speaker``, ``src_text`` (the anchor's
    English), ``talk``, ``source`` (anchor ``yaml:line``, for builder messages), and ``tgt_text_<lang>`` for every requested language ('' when missing).
    """
    rows: dict[str, list[dict]] = defaultdict(list)
    ids = utterance_ids(result.kept)
    for uid, g in zip(ids, result.kept):
        r = {
            "id": uid,
            "wav": g.wav,
            "offset": round(g.offset, 6),
            "duration": round(g.duration, 6),
            "speaker": g.ref.speaker or g.talk,
            "src_text": g.ref.src,
            "talk": g.talk,
            "source": f"{g.ref.file}:{g.ref.line}",
        }
        for lang in result.langs:
            r[f"tgt_text_{lang}"] = g.tgt_text(lang)
        rows[g.split].append(r)
    return dict(rows)


# ----------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------


def _hours(seconds: float) -> float:
    return round(seconds / 3600.0, 4)


def build_report(
    result: AlignmentResult,
    segments_in: dict[tuple[str, str], int],
    issues: Sequence[PrepIssue],
    params: AlignParams,
    ways: Sequence[int] = (2, 4, 6, 8),
) -> dict:
    """The alignment part of ``prep_report.json``.

    Args:
        result: :func:`align_segments` output.
        segments_in: ``{(split, lang): yaml lines read}`` (the split as read, before hygiene).
        issues: input issues (:func:`find_pairs`, :func:`read_pair_split`); their segment counts go to
            ``dropped`` under the issue kind.
        params: parameters (echoed).
        ways: multi-way sizes to total; sizes above ``len(langs)`` are replaced by ``len(langs)``.

    Returns:
        dict with keys:

        - ``params``; ``langs``; ``min_langs``;
        - ``per_split[split][lang]``: ``segments_in``, ``matched`` (records in kept utterances; the
          split is the one *read*), ``match_methods`` (exact/iou/merge/reference counts),
          ``dropped`` (``{reason: n}``), ``hours_in``, ``hours_matched`` (own durations);
        - ``utterances[split]``: ``n``, ``hours`` (utterance intervals), ``per_lang`` non-empty cells;
        - ``multiway[split]["<n>"]``: ``{"at_least": {utterances, hours}, "first_n": {langs,
          utterances, hours}}`` over all groups before the ``min_langs`` filter - ``at_least`` counts
          utterances with >= n languages, ``first_n`` those that have all of the first n languages;
        - ``split_conflicts``; ``issues`` (every message).
    """
    langs = result.langs
    per: dict[str, dict[str, dict]] = defaultdict(dict)

    def cell(split, lang):
        d = per[split].get(lang)
        if d is None:
            d = per[split][lang] = {
                "segments_in": 0, "matched": 0, "match_methods": Counter(), "dropped": Counter(),
                "hours_in": 0.0, "hours_matched": 0.0,
            }
        return d

    def orig_split(s: Segment) -> str:
        # file is .../data/<split>/txt/<split>.yaml
        return os.path.basename(os.path.dirname(os.path.dirname(s.file))) or s.split

    for (split, lang), n in segments_in.items():
        cell(split, lang)["segments_in"] += n
    for g in result.kept + result.rejected:
        for lang, m in g.matches.items():
            for s in m.segments:
                cell(orig_split(s), lang)["hours_in"] += s.duration
    for g in result.kept:
        for lang, m in g.matches.items():
            for s in m.segments:
                c = cell(orig_split(s), lang)
                c["matched"] += 1
                c["match_methods"][m.method] += 1
                c["hours_matched"] += s.duration
    for s, reason in result.dropped:
        c = cell(orig_split(s), s.lang)
        c["dropped"][reason] += 1
        if reason == "split_conflict":
            c["hours_in"] += s.duration
    for iss in issues:
        if iss.split and iss.n_segments:
            cell(iss.split, iss.lang)["dropped"][iss.kind] += iss.n_segments
    for split in per:
        for lang in per[split]:
            c = per[split][lang]
            c["match_methods"] = dict(sorted(c["match_methods"].items()))
            c["dropped"] = dict(sorted(c["dropped"].items()))
            c["hours_in"] = _hours(c["hours_in"])
            c["hours_matched"] = _hours(c["hours_matched"])

    utt: dict[str, dict] = {}
    for g in result.kept:
        u = utt.setdefault(g.split, {"n": 0, "hours": 0.0, "per_lang": Counter()})
        u["n"] += 1
        u["hours"] += g.duration
        for lang in g.matches:
            u["per_lang"][lang] += 1
    for u in utt.values():
        u["hours"] = _hours(u["hours"])
        u["per_lang"] = {lg: u["per_lang"].get(lg, 0) for lg in langs}

    sizes = sorted({min(n, len(langs)) for n in ways if n >= 1} | {len(langs)})
    multi: dict[str, dict] = {}
    all_groups = result.kept + result.rejected
    for g in all_groups:
        m = multi.setdefault(
            g.split,
            {str(n): {"at_least": {"utterances": 0, "hours": 0.0},
                      "first_n": {"langs": langs[:n], "utterances": 0, "hours": 0.0}} for n in sizes},
        )
        for n in sizes:
            if g.n_langs >= n:
                m[str(n)]["at_least"]["utterances"] += 1
                m[str(n)]["at_least"]["hours"] += g.duration
            if all(lg in g.matches for lg in langs[:n]):
                m[str(n)]["first_n"]["utterances"] += 1
                m[str(n)]["first_n"]["hours"] += g.duration
    for m in multi.values():
        for v in m.values():
            v["at_least"]["hours"] = _hours(v["at_least"]["hours"])
            v["first_n"]["hours"] = _hours(v["first_n"]["hours"])

    order = sorted(set(per) | set(utt) | set(multi), key=lambda s: (split_rank(s), s))  # train, dev, tst-*
    return {
        "params": {
            "min_iou": params.min_iou, "tolerance_ms": params.tolerance_ms, "interval": params.interval,
            "min_langs": result.min_langs, "merge_splits": params.merge_splits,
        },
        "langs": list(langs),
        "min_langs": result.min_langs,
        "min_langs_by_split": {s: result.min_langs_by_split[s] for s in order if s in result.min_langs_by_split},
        "per_split": {s: {lg: per[s][lg] for lg in langs if lg in per.get(s, {})} for s in order if s in per},
        "utterances": {s: utt[s] for s in order if s in utt},
        "multiway": {s: multi[s] for s in order if s in multi},
        "split_conflicts": [c.as_dict() for c in result.conflicts],
        "issues": [i.as_dict() for i in issues],
    }


def format_report(report: dict) -> str:
    """Readable multi-line summary of :func:`build_report` output (for logs and ``prep_report.txt``)."""
    lines = []
    p = report["params"]
    lines.append(
        f"MuST-C multi-way alignment: langs={','.join(report['langs'])} min_langs={report['min_langs']} "
        f"min_iou={p['min_iou']} tolerance_ms={p['tolerance_ms']} interval={p['interval']} "
        f"merge_splits={p['merge_splits']}"
    )
    for split, per_lang in report["per_split"].items():
        lines.append(f"[{split}]")
        lines.append(f"  {'lang':<5} {'in':>8} {'matched':>8} {'h_in':>8} {'h_match':>8}  dropped")
        for lang, c in per_lang.items():
            dr = ", ".join(f"{k}={v}" for k, v in c["dropped"].items()) or "-"
            lines.append(
                f"  {lang:<5} {c['segments_in']:>8} {c['matched']:>8} {c['hours_in']:>8.3f} "
                f"{c['hours_matched']:>8.3f}  {dr}"
            )
        u = report["utterances"].get(split)
        if u:
            lines.append(f"  kept utterances: {u['n']} ({u['hours']:.3f} h)")
        mw = report["multiway"].get(split, {})
        if mw:
            parts = [f">={n}: {v['at_least']['utterances']} ({v['at_least']['hours']:.3f} h)" for n, v in mw.items()]
            lines.append("  multi-way " + "; ".join(parts))
    for c in report["split_conflicts"]:
        lines.append(
            f"split conflict: talk {c['talk']} in {c['splits_by_lang']} -> {c['resolved']} "
            f"({c['action']} {c['n_segments']} segment(s))"
        )
    if report["issues"]:
        lines.append(f"{len(report['issues'])} input issue(s):")
        lines.extend(f"  [{i['kind']}] {i['message']}" for i in report["issues"])
    return "\n".join(lines)


def read_corpus(
    root: str,
    langs: Sequence[str],
    splits: Sequence[str] = DEFAULT_SPLITS,
    check_wavs: bool = True,
    progress: bool = False,
) -> tuple[list[Segment], dict[tuple[str, str], int], list[PrepIssue]]:
    """Read every requested pair and split under ``root``.

    A split absent from *every* pair (e.g. ``tst-HE`` in a corpus without it) is skipped with an
    info log line; a split absent from some pairs only is a ``split_missing`` issue for those.

    Returns:
        (all records, ``{(split, lang): segments in}``, issues). Issues are also logged as warnings.
    """
    present, issues = find_pairs(root, langs)
    segs: list[Segment] = []
    n_in: dict[tuple[str, str], int] = {}
    jobs = [(lang, split) for split in splits for lang in present]
    have_split = {
        split: [lang for lang in present if os.path.isdir(os.path.join(pair_path(root, lang), "data", split))]
        for split in splits
    }
    it: Iterable = jobs
    if progress:
        from tqdm import tqdm

        it = tqdm(jobs, desc="read pairs", unit="file")
    for lang, split in it:
        if not have_split[split]:
            continue
        s, iss, n = read_pair_split(root, lang, split, check_wavs)
        segs.extend(s)
        issues.extend(iss)
        n_in[(split, lang)] = n
    for split, ls in have_split.items():
        if not ls:
            log.info("split %s absent from every pair; not read", split)
    for i in issues:
        log.warning("%s", i.message)
    return segs, n_in, issues
