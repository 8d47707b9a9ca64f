"""Multi-way aligned corpus builder: join language pairs, extract features, write DATA.

Two layers, both reusable:

1. :func:`join_pairs` joins per-pair segments (:class:`mmst.corpora.mustc_layout.Segment`, e.g. from
   the MuST-C layout) on *identical* segments: same talk (wav file name), offset and duration equal
   within ``tolerance_ms``. Offsets are compared as numbers and sorted numerically, never as strings.
   Output: rows (dicts) per split, one per multi-way utterance. (The MuST-C IoU alignment of
   ``mmst.corpora.mustc`` produces the same kind of rows with its own matching.)
2. :func:`build_from_rows` turns rows into a DATA directory (see docs/CONTRACTS.md):
   features (``fbank80.zip``, via a resumable per-utterance ``.npy`` cache, ``jobs`` processes),
   filtering with report entries, manifests (``<split>.tsv`` and fairseq ``<split>_st_<lang>.tsv``),
   global CMVN (``gcmvn.npz``, float64 streaming sums over the kept train utterances),
   SentencePiece models, ``config.yaml`` and ``prep_report.json``.

Row format (input of :func:`build_from_rows`): ``id`` (unique, usable as a file name), ``wav``
(absolute audio path), ``offset`` and ``duration`` (seconds; ``duration`` may be ``None`` = to the
end of the file), ``speaker``, ``src_text``, ``tgt_text_<lang>`` for each target language ('' =
no translation), optional ``source`` (where the row came from, for messages).

Filtering rules (each drop is a ``skipped`` entry of ``prep_report.json`` with id, split, reason,
detail and source):

- audio errors (unreadable/missing/empty file, zero-length segment, segment past the end of the
  file by more than ``end_tolerance_ms``, NaN/Inf samples): skipped in train/dev; in a no-filter
  (test) split they are a hard error, because a test set must not silently shrink;
- ``empty_text`` (no non-empty translation) / ``empty_src_text`` and ``too_short``
  (< ``min_frames`` frames): dropped except in no-filter splits (there they are kept and listed under
  ``warnings``);
- ``too_long`` (> ``max_frames``): dropped in train splits only.

No-filter splits: names starting with ``tst`` or ``test`` plus ``no_filter_splits``.

Resumability: each utterance's features go to ``DATA/.cache/fbank80/<id>.<key>.npy`` (``key`` hashes
wav, interval and feature settings) and are not recomputed when present. The zip, gcmvn, vocabularies
are rebuilt only when a hash of their inputs (kept in ``DATA/.cache/state.json``) changed. Every
file is written atomically. Remove ``DATA/.cache`` after a successful run to save space if you never
rerun.

Feature settings: raw 80-dim fbank (:func:`mmst.features.fbank`) with deterministic dither of
digital silence (``dither``, default 1.0 = one 16-bit LSB std, ``dither_mode="silence"``: only samples
below 16-bit resolution get noise; seeded by a CRC32 of the utterance id). Why dither and not
trimming: espeak (synthetic corpora) writes exact digital zeros between words; without noise those
frames sit at the log floor (-15.9), far below any real speech frame, which inflates the CMVN
variance and gives the model a feature value that never occurs in real recordings. Trimming would
only remove leading/trailing silence (not the pauses inside a segment) and would change
``offset``/``duration``, the reference of the latency metrics. Why only silence: Kaldi-style dither
of every sample moves the speech frames of the very quiet FLEURS clips (peak ~100 LSB) by 0.2-0.73
nats on average; silence-only dither by 0.00-0.09 (it touches only samples below 0.5 LSB). The streaming evaluation reproduces the same
features with ``OnlineFbank(**mmst.features.fbank_kwargs_from_config(cfg))``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import os
import re
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from mmst.atomic import atomic_copy, atomic_save_npy, atomic_write_json, atomic_write_text
from mmst.audio import AudioError, load_audio
from mmst.cmvn import CMVNAccumulator, GlobalCMVN
from mmst.corpora.mustc import AlignParams, align_talk
from mmst.corpora.mustc_layout import PairSegment, RawCorpusError, pair_dir, read_pair_split_strict
from mmst.data.manifest import FAIRSEQ_ST_COLUMNS, TGT_PREFIX, clean_text, manifest_columns, write_manifest
from mmst.data.store import pack_npy_files, zip_member_offsets
from mmst.data.vocab import NO_SPACE_LANGS, PRETOKENIZE_DELIMITER, lang_tag, pretokenize, train_sentencepiece
from mmst.features import FRAME_LENGTH_MS, FRAME_SHIFT_MS, NUM_MEL_BINS, dither_seed_for, fbank
from mmst.gain import PEAK_GAIN_FLOOR, causal_peak_normalize

log = logging.getLogger(__name__)

FEATURE_VERSION = "fbank80-knf-v1"
"""Part of every feature cache key; bump when the feature definition changes."""
FEATURES_ZIP = "fbank80.zip"
GCMVN_FILE = "gcmvn.npz"
DEFAULT_VOCAB_CAPS = {"joint": 10000, "src": 5000, "per_lang": 8000}
"""Upper bounds of the automatic vocabulary size (see :func:`auto_vocab_size`)."""

DITHER_MODE = "silence"
"""Dither mode of the prep (see module docstring)."""

_ID_RE = re.compile(r"[\w][\w.\-+=@,]*")


class BuildError(ValueError):
    """The corpus cannot be built as asked (message says what and where)."""


# ----------------------------------------------------------------------------------------------
# Join
# ----------------------------------------------------------------------------------------------


def is_no_filter_split(split: str, extra: Iterable[str] = ()) -> bool:
    """True for test splits (``tst*``, ``test*``) and any split listed in ``extra``."""
    return split.startswith(("tst", "test")) or split in set(extra)


def is_train_split(split: str) -> bool:
    """True for splits whose name starts with ``train`` (over-length items are dropped only there)."""
    return split.startswith("train")


def _is_train(split: str, opts: BuildOptions, nofilter: Iterable[str]) -> bool:
    """Over-length filtering applies: a ``train*`` split or the fit split, unless it is a no-filter split."""
    return (is_train_split(split) or split == opts.fit_split) and not is_no_filter_split(split, nofilter)


def _fmt_s(x: float | None) -> str:
    """Seconds as a short decimal string (<= 6 decimals, no trailing zeros)."""
    if x is None:
        return ""
    s = f"{float(x):.6f}".rstrip("0").rstrip(".")
    return s or "0"


def join_pairs(
    pairs: Mapping[str, Sequence[PairSegment]],
    tgt_langs: Sequence[str],
    tolerance_ms: float = 10.0,
    how: str = "inner",
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Join per-pair segments into multi-way rows on identical segments.

    The exact special case of the MuST-C aligner (:func:`mmst.corpora.mustc.align_talk` with
    ``match_text=False, min_iou=1, merge_splits=False``), plus the strict checks of the builder.
    Two segments of different pairs are the same utterance when they are in the same split, name
    the same talk wav (file name), and their offsets and durations both differ by at most
    ``tolerance_ms``. The first language (``tgt_langs`` order) that has an utterance provides its
    wav path, interval, speaker and English text; a different English text in another pair is
    counted (``src_text_conflicts``), not an error.

    Args:
        pairs: ``{lang: segments of all splits}`` (from :func:`mmst.corpora.mustc_layout.read_pair_split_strict`).
        tgt_langs: languages, in output column order.
        tolerance_ms: matching tolerance in milliseconds.
        how: ``"inner"`` keeps utterances present in every language; ``"outer"`` keeps all, with
            empty ``tgt_text_<lang>`` for missing languages.

    Returns:
        ``(rows_by_split, report)``: rows in numeric (talk, offset) order with ids
        ``<talk>_<k>`` (k = rank in the talk); report has per-split counts of segments per language,
        matched utterances, and unmatched segments per language.

    Raises:
        RawCorpusError: two segments of one pair are the same interval (duplicate; names both yaml
            lines), or a talk appears in two splits (ids would collide).
        ValueError: bad ``how`` or a language without segments list.
    """
    if how not in ("inner", "outer"):
        raise ValueError(f"join how must be 'inner' or 'outer', got {how!r}")
    tol = tolerance_ms / 1000.0
    params = AlignParams(min_iou=1.0, tolerance_ms=tolerance_ms, merge_splits=False, match_text=False)
    by_talk: dict[tuple[str, str], dict[str, list[PairSegment]]] = defaultdict(lambda: defaultdict(list))
    talk_split: dict[str, tuple[str, str]] = {}
    for lang in tgt_langs:
        if lang not in pairs:
            raise ValueError(f"join_pairs: no segments given for language {lang!r}")
        for s in pairs[lang]:
            prev = talk_split.get(s.talk)
            if prev is not None and prev[0] != s.split:
                raise RawCorpusError(
                    f"{s.source}: talk {s.talk!r} is in split {s.split!r} but also in split {prev[0]!r} "
                    f"({prev[1]}); utterance ids would be duplicated and test data would leak into training",
                    s.file, s.line,
                )
            talk_split.setdefault(s.talk, (s.split, s.source))
            by_talk[(s.split, s.talk)][lang].append(s)

    report: dict[str, Any] = {"tolerance_ms": tolerance_ms, "how": how, "splits": {}}
    rows_by_split: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (split, talk) in sorted(by_talk):
        rep = report["splits"].setdefault(split, {
            "segments": Counter(), "unmatched": Counter(), "utterances": 0, "incomplete_dropped": 0,
            "src_text_conflicts": 0, "examples_src_text_conflict": []})
        by_lang = by_talk[(split, talk)]
        for lang in tgt_langs:
            segs = sorted(by_lang.get(lang, []), key=lambda s: (s.offset, s.duration))
            rep["segments"][lang] += len(segs)
            for a, b in zip(segs, segs[1:]):
                if abs(a.offset - b.offset) <= tol and abs(a.duration - b.duration) <= tol:
                    raise RawCorpusError(
                        f"{b.source}: duplicate segment (talk {talk}, offset {b.offset}, duration {b.duration}) "
                        f"also at {a.source}; ids would be duplicated", b.file, b.line,
                    )
        k = 0
        for g in align_talk(by_lang, tgt_langs, params, split, talk):
            segs = {lang: g.matches[lang].segments[0] for lang in tgt_langs if lang in g.matches}
            if how == "inner" and len(segs) != len(tgt_langs):
                rep["incomplete_dropped"] += 1
                for lang in segs:
                    rep["unmatched"][lang] += 1
                continue
            ref = g.ref
            srcs = {seg.src_text for seg in segs.values()}
            if len(srcs) > 1:
                rep["src_text_conflicts"] += 1
                if len(rep["examples_src_text_conflict"]) < 5:
                    rep["examples_src_text_conflict"].append({lang: seg.source for lang, seg in segs.items()})
            row: dict[str, Any] = {
                "id": f"{talk}_{k}", "wav": ref.wav, "offset": ref.offset, "duration": ref.duration,
                "speaker": ref.speaker, "src_text": ref.src_text, "talk": talk,
                "source": ";".join(seg.source for seg in segs.values()),
            }
            for lang in tgt_langs:
                row[TGT_PREFIX + lang] = segs[lang].tgt_text if lang in segs else ""
            rows_by_split[split].append(row)
            rep["utterances"] += 1
            k += 1
    for rep in report["splits"].values():
        rep["segments"] = dict(rep["segments"])
        rep["unmatched"] = dict(rep["unmatched"])
    return dict(rows_by_split), report


def read_and_join(root: str | os.PathLike[str], tgt_langs: Sequence[str], splits: Sequence[str],
                  tolerance_ms: float = 10.0, how: str = "inner", src_lang: str = "en",
                  progress: bool = True) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Read every ``RAW/en-XX`` pair and split (strictly, see :mod:`mmst.corpora.mustc_layout`) and join them.

    Raises:
        RawCorpusError: any bad-input case of the raw layout (missing language lists the pairs present).
    """
    for lang in tgt_langs:  # fail fast on a missing language before reading anything
        pair_dir(root, lang, src_lang)
    pairs: dict[str, list[PairSegment]] = {lang: [] for lang in tgt_langs}
    jobs = [(lang, split) for lang in tgt_langs for split in splits]
    for lang, split in tqdm(jobs, desc="read pairs", unit="file", disable=not progress):
        pairs[lang].extend(read_pair_split_strict(root, lang, split, src_lang))
    return join_pairs(pairs, tgt_langs, tolerance_ms, how)


# ----------------------------------------------------------------------------------------------
# Feature extraction (worker side)
# ----------------------------------------------------------------------------------------------


def _cache_key(wav: str, offset: float, duration: float | None, dither: float, peak: float | None) -> str:
    gain = None if peak is None else f"causal-peak:{peak}:{PEAK_GAIN_FLOOR}"
    s = f"{FEATURE_VERSION}|{os.path.abspath(wav)}|{offset:.6f}|{duration}|{dither}|{DITHER_MODE}|{gain}"
    return hashlib.sha1(s.encode("utf-8")).hexdigest()[:12]


@dataclass
class _Item:
    id: str
    wav: str
    offset: float
    duration: float | None
    cache: str
    stats_range: tuple[int, int | None] | None  # count into CMVN when min <= n_frames (<= max); None: never


def _extract_group(args: tuple[list[_Item], float, float, float | None]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Worker: features of the items of one audio file (cached ones are only re-read for CMVN stats).

    Returns per-item results and the float64 CMVN sums of this file's items that pass their
    ``stats_range`` (ids listed, so the caller can check them against its own filter).
    """
    items, dither, end_tol_s, peak = args
    out = []
    stats: dict[str, Any] = {"count": 0, "sum": np.zeros(NUM_MEL_BINS), "sumsq": np.zeros(NUM_MEL_BINS), "ids": []}
    for it in items:
        res: dict[str, Any] = {"id": it.id, "n_frames": 0, "error": None, "cached": False}
        try:
            if os.path.exists(it.cache):
                res["cached"] = True
                feats = np.load(it.cache, mmap_mode="r")
            else:
                wave = load_audio(it.wav, it.offset, it.duration, end_tolerance_s=end_tol_s)
                if peak is not None:
                    wave = causal_peak_normalize(wave, peak)
                feats = fbank(wave, dither=dither, dither_seed=dither_seed_for(it.id), dither_mode=DITHER_MODE)
                atomic_save_npy(it.cache, feats)
            n = res["n_frames"] = int(feats.shape[0])
            rng = it.stats_range
            if rng is not None and n > 0 and n >= rng[0] and (rng[1] is None or n <= rng[1]):
                f64 = np.asarray(feats, dtype=np.float64)
                stats["count"] += n
                stats["sum"] += f64.sum(axis=0)
                stats["sumsq"] += np.square(f64).sum(axis=0)
                stats["ids"].append(it.id)
        except AudioError as e:
            res["error"] = str(e)
        except (OSError, ValueError) as e:  # corrupt cache file, etc.
            res["error"] = f"{it.wav}: {type(e).__name__}: {e}"
        out.append(res)
    return out, stats


# ----------------------------------------------------------------------------------------------
# Vocabulary helpers
# ----------------------------------------------------------------------------------------------


def auto_vocab_size(sentences: Sequence[str], cap: int) -> int:
    """A sane SentencePiece size for a corpus: ``min(cap, max(64, distinct_words))``.

    Large corpora get ``cap``; tiny ones (synthetic grammars, a few hundred words) get about one piece
    per word type (an upper bound: SentencePiece keeps fewer when the corpus supports fewer), so
    frequent words stay whole instead of being cut into characters. Words are
    split on whitespace and on :data:`mmst.data.vocab.PRETOKENIZE_DELIMITER` (pretokenized ja/zh).
    """
    words = {w for s in sentences for w in s.replace(PRETOKENIZE_DELIMITER, " ").split()}
    return int(min(cap, max(64, len(words))))


# ----------------------------------------------------------------------------------------------
# Builder
# ----------------------------------------------------------------------------------------------


@dataclass
class BuildOptions:
    """Options of :func:`build_from_rows` (same names and defaults as ``prep_multiway.py``'s CLI).

    Attributes:
        vocab_size: joint (and per-language) SentencePiece size; ``None`` = automatic.
        src_vocab_size: English SentencePiece size (CTC); ``None`` = automatic.
        per_lang_vocab: also train one model per target language.
        pretokenize: ``"auto"``: ja/zh training text gets word boundaries for SentencePiece
            (:func:`mmst.data.vocab.pretokenize`); ``"none"``: raw text.
        max_frames: drop train utterances longer than this many 10 ms frames.
        min_frames: drop (non-test) utterances shorter than this.
        end_tolerance_ms: a segment may end this far past its audio file (shortened), in ms.
        dither: deterministic dither in 16-bit units (0 disables).
        peak_normalize: scale every utterance towards this peak amplitude before fbank with the causal
            running-peak gain :func:`mmst.features.causal_peak_normalize` (the rule the streaming
            evaluation and the SimulEval agent apply too); ``None`` = off.
        vocab_from: reuse ``spm_*.model``/``.txt`` and ``gcmvn.npz`` of this DATA directory or exported
            model folder.
        fit_split: split whose kept utterances train the vocabularies and CMVN.
        src_lang: source language code.
        progress: tqdm bars.
        tool: name recorded in the report.
    """

    vocab_size: int | None = None
    src_vocab_size: int | None = None
    per_lang_vocab: bool = False
    pretokenize: str = "auto"
    max_frames: int = 3000
    min_frames: int = 5
    end_tolerance_ms: float = 10.0
    dither: float = 1.0
    peak_normalize: float | None = None
    vocab_from: str | None = None
    fit_split: str = "train"
    src_lang: str = "en"
    progress: bool = True
    tool: str = "mmst.corpora.multiway"
    extra_config: dict[str, Any] = field(default_factory=dict)


class _State:
    """``DATA/.cache/state.json``: input hashes of finished steps (for rerun skipping)."""

    def __init__(self, out: Path) -> None:
        self.path = out / ".cache" / "state.json"
        self.d: dict[str, str] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def done(self, step: str, h: str, *outputs: Path) -> bool:
        """True when ``step`` finished with input hash ``h`` and all ``outputs`` exist."""
        return self.d.get(step) == h and all(p.exists() for p in outputs)

    def mark(self, step: str, h: str) -> None:
        """Record that ``step`` finished with input hash ``h`` (atomic write)."""
        self.d[step] = h
        atomic_write_json(self.path, self.d)


def _hash(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def _validate_rows(rows_by_split: Mapping[str, Sequence[Mapping[str, Any]]], tgt_langs: Sequence[str]) -> None:
    seen: dict[str, str] = {}
    for split, rows in rows_by_split.items():
        for i, r in enumerate(rows):
            where = f"split {split!r} row {i + 1}" + (f" ({r['source']})" if r.get("source") else "")
            for k in ("id", "wav", "offset"):
                if k not in r or r[k] is None or r[k] == "":
                    raise BuildError(f"{where}: missing field {k!r}")
            uid = str(r["id"])
            if not _ID_RE.fullmatch(uid):
                raise BuildError(f"{where}: id {uid!r} is not usable as a file name (letters, digits, ._-+=@, only)")
            if uid in seen:
                raise BuildError(f"{where}: duplicate id {uid!r} (first in {seen[uid]})")
            seen[uid] = where
            for lang in tgt_langs:
                if TGT_PREFIX + lang not in r:
                    raise BuildError(f"{where}: missing field {TGT_PREFIX + lang!r}")


def build_from_rows(
    rows_by_split: Mapping[str, Sequence[Mapping[str, Any]]],
    out_dir: str | os.PathLike[str],
    tgt_langs: Sequence[str],
    jobs: int = 1,
    no_filter_splits: Iterable[str] = (),
    extra_report: Mapping[str, Any] | None = None,
    dropped_before: Mapping[str, Mapping[str, int]] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Build a DATA directory from multi-way rows (see module docstring for formats and rules).

    The steps, each a function of this module: :func:`read_rows` (validate, clean),
    :func:`featurize` (fbank cache), :func:`filter_rows`, :func:`pack_features` (``fbank80.zip``),
    :func:`fit_vocab` (gcmvn, SentencePiece), :func:`write_outputs` (manifests, ``config.yaml``),
    then ``prep_report.json``.

    Args:
        rows_by_split: ``{split: rows}``, rows in output order; split order = ``config.yaml`` order.
        out_dir: DATA directory (created).
        tgt_langs: target languages, in column order.
        jobs: feature extraction processes (1 = in this process).
        no_filter_splits: splits never filtered (in addition to ``tst*``/``test*``).
        extra_report: merged into ``prep_report.json`` at top level.
        dropped_before: ``{split: {reason: count}}`` of rows the caller read and left out before
            ``rows_by_split`` (e.g. ``{"train": {"bad_audio": 1}}``): counted in that split's ``rows_in``
            and ``dropped``, so ``rows_in`` is the number of rows read.
        **options: fields of :class:`BuildOptions` (``vocab_size``, ``per_lang_vocab``,
            ``max_frames``, ``dither``, ``vocab_from`` ...).

    Returns:
        The report dict (also written to ``DATA/prep_report.json``).

    Raises:
        BuildError: bad rows (missing field, duplicate or unsafe id), audio errors in a no-filter
            split, no kept utterance in the fit split (and no ``vocab_from``), bad ``vocab_from``.
        TypeError: unknown option.
    """
    opts = BuildOptions(**options)
    t0 = time.time()
    tgt_langs = list(tgt_langs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / ".cache" / "fbank80").mkdir(parents=True, exist_ok=True)
    nofilter = set(no_filter_splits)
    state = _State(out)
    rows = read_rows(rows_by_split, tgt_langs)
    feats = featurize(rows, out, tgt_langs, opts, nofilter, jobs)
    kept, filt = filter_rows(rows, feats.results, tgt_langs, opts, nofilter)
    for split, counts in (dropped_before or {}).items():
        rep = filt["splits"].get(split)
        for reason, n in counts.items():
            if rep is not None and n:
                rep["rows_in"] += n
                rep["dropped"][reason] = rep["dropped"].get(reason, 0) + n
    h_zip, zip_reused = pack_features(kept, out, state, opts.progress)
    vocab_cfg, vocab_rep, cmvn_rep = fit_vocab(kept, feats, h_zip, out, tgt_langs, opts, state, jobs, list(rows))
    write_outputs(kept, out, tgt_langs, list(rows), vocab_cfg, opts)
    report: dict[str, Any] = {
        "tool": opts.tool, "out_dir": os.fspath(out.resolve()), "tgt_langs": tgt_langs, "src_lang": opts.src_lang,
        "splits": filt["splits"], "skipped": filt["skipped"], "warnings": filt["warnings"],
        "features": {"file": FEATURES_ZIP, "utterances": sum(len(rs) for rs in kept.values()), "extracted": sum(
            1 for x in feats.results.values() if not x["cached"] and not x["error"]),
            "from_cache": sum(1 for x in feats.results.values() if x["cached"]), "zip_reused": zip_reused,
            "seconds": round(feats.seconds, 2), "jobs": jobs, "dither": opts.dither,
            "peak_normalize": opts.peak_normalize},
        "gcmvn": cmvn_rep, "vocab": vocab_rep,
        "options": {k: v for k, v in opts.__dict__.items() if k not in ("extra_config",)},
        "seconds": round(time.time() - t0, 2),
    }
    if extra_report:
        report.update(dict(extra_report))
    atomic_write_json(out / "prep_report.json", report)
    return report


def read_rows(rows_by_split: Mapping[str, Sequence[Mapping[str, Any]]],
              tgt_langs: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Step 1, read: validate the rows and return cleaned copies (absolute wav, float seconds, clean text).

    Raises:
        BuildError: a missing field, a duplicate id or an id unusable as a file name.
    """
    _validate_rows(rows_by_split, tgt_langs)
    rows: dict[str, list[dict[str, Any]]] = {}
    for split, rs in rows_by_split.items():
        rows[split] = []
        for r in rs:
            c = dict(r)
            c["id"] = str(r["id"])
            c["wav"] = os.path.abspath(os.fspath(r["wav"]))
            c["offset"] = float(r["offset"])
            c["duration"] = None if r.get("duration") in (None, "") else float(r["duration"])
            c["speaker"] = clean_text(str(r.get("speaker") or "")) or "unknown"
            c["src_text"] = clean_text(str(r.get("src_text") or ""))
            for lang in tgt_langs:
                c[TGT_PREFIX + lang] = clean_text(str(r.get(TGT_PREFIX + lang) or ""))
            c["source"] = str(r.get("source") or f"{c['wav']}:{_fmt_s(c['offset'])}")
            rows[split].append(c)
    return rows


@dataclass
class Featurized:
    """Output of :func:`featurize`.

    Attributes:
        results: ``{id: {"n_frames", "error", "cached"}}`` per utterance.
        talk_stats: float64 CMVN sums per audio file (``count``, ``sum``, ``sumsq``, ``ids``) over the
            fit split's utterances that pass the filter.
        seconds: wall time of the extraction.
    """

    results: dict[str, dict[str, Any]]
    talk_stats: dict[str, dict[str, Any]]
    seconds: float


def featurize(rows: dict[str, list[dict[str, Any]]], out: Path, tgt_langs: Sequence[str], opts: BuildOptions,
              nofilter: Iterable[str], jobs: int = 1) -> Featurized:
    """Step 2, featurize: fbank of every row into the resumable ``.cache/fbank80`` (``jobs`` processes).

    Sets ``row["_cache"]`` (the cached ``.npy`` path) on every row.
    """
    cache_dir = out / ".cache" / "fbank80"
    end_tol_s = opts.end_tolerance_ms / 1000.0
    need_fit = opts.vocab_from is None
    by_wav: dict[str, list[_Item]] = defaultdict(list)
    fit_nofilter = is_no_filter_split(opts.fit_split, nofilter)
    fit_range = (0, None) if fit_nofilter else (
        opts.min_frames, opts.max_frames if _is_train(opts.fit_split, opts, nofilter) else None)
    for split, rs in rows.items():
        for r in rs:
            key = _cache_key(r["wav"], r["offset"], r["duration"], opts.dither, opts.peak_normalize)
            r["_cache"] = os.fspath(cache_dir / f"{r['id']}.{key}.npy")
            text_ok = fit_nofilter or (bool(r["src_text"]) and any(r[TGT_PREFIX + lang] for lang in tgt_langs))
            by_wav[r["wav"]].append(_Item(r["id"], r["wav"], r["offset"], r["duration"], r["_cache"],
                                          fit_range if need_fit and split == opts.fit_split and text_ok else None))
    tasks = [(items, opts.dither, end_tol_s, opts.peak_normalize) for items in by_wav.values()]
    results: dict[str, dict[str, Any]] = {}
    talk_stats: dict[str, dict[str, Any]] = {}
    n_utts = sum(len(t[0]) for t in tasks)
    bar = tqdm(total=n_utts, desc="fbank", unit="utt", disable=not opts.progress, mininterval=1.0)
    t_feat = time.time()

    def collect(res: list[dict[str, Any]], st: dict[str, Any]) -> None:
        for x in res:
            results[x["id"]] = x
        if st["ids"]:
            talk_stats[res[0]["id"]] = st
        bar.update(len(res))

    if jobs > 1 and len(tasks) > 1:
        with mp.get_context("forkserver" if os.name == "posix" else "spawn").Pool(jobs) as pool:
            for res, st in pool.imap_unordered(_extract_group, tasks, chunksize=1):
                collect(res, st)
    else:
        for t in tasks:
            collect(*_extract_group(t))
    bar.close()
    return Featurized(results, talk_stats, time.time() - t_feat)


def filter_rows(rows: dict[str, list[dict[str, Any]]], results: Mapping[str, Mapping[str, Any]],
                tgt_langs: Sequence[str], opts: BuildOptions,
                nofilter: Iterable[str]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Step 3, filter (rules in the module docstring): kept rows per split, and the report parts
    ``splits``, ``skipped``, ``warnings``.

    Raises:
        BuildError: an audio error in a no-filter (test) split.
    """
    skipped: list[dict[str, Any]] = []
    warnings: list[dict[str, Any]] = []
    split_rep: dict[str, dict[str, Any]] = {}
    kept: dict[str, list[dict[str, Any]]] = {}
    fatal: list[str] = []
    for split, rs in rows.items():
        test = is_no_filter_split(split, nofilter)
        train = _is_train(split, opts, nofilter)
        dropped: Counter = Counter()
        kept[split] = []
        for r in rs:
            res = results[r["id"]]
            r["n_frames"] = res["n_frames"]
            reason, detail = None, ""
            if res["error"]:
                reason, detail = "audio_error", res["error"]
            elif not any(r[TGT_PREFIX + lang] for lang in tgt_langs):
                reason, detail = "empty_text", "no non-empty translation"
            elif not r["src_text"]:
                reason, detail = "empty_src_text", "empty English transcript"
            elif r["n_frames"] < opts.min_frames:
                reason, detail = "too_short", f"{r['n_frames']} frames < {opts.min_frames}"
            elif train and r["n_frames"] > opts.max_frames:
                reason, detail = "too_long", f"{r['n_frames']} frames > {opts.max_frames}"
            entry = {"id": r["id"], "split": split, "reason": reason, "detail": detail, "source": r["source"]}
            if reason is not None and test:
                if reason == "audio_error":
                    fatal.append(f"{r['source']}: {detail}")
                    continue
                warnings.append(entry)  # kept: test splits are never filtered
            elif reason is not None:
                skipped.append(entry)
                dropped[reason] += 1
                continue
            kept[split].append(r)
        frames = sum(r["n_frames"] for r in kept[split])
        split_rep[split] = {"rows_in": len(rs), "kept": len(kept[split]), "dropped": dict(dropped),
                            "no_filter": test, "frames": frames, "hours": round(frames / 360000.0, 4)}
    if fatal:
        raise BuildError(
            f"{len(fatal)} audio error(s) in test split(s), which are never filtered:\n  " + "\n  ".join(fatal[:20])
        )
    return kept, {"splits": split_rep, "skipped": skipped, "warnings": warnings}


def pack_features(kept: dict[str, list[dict[str, Any]]], out: Path, state: _State,
                  progress: bool = True) -> tuple[str, bool]:
    """Step 4, pack: the kept utterances' features into ``fbank80.zip`` (skipped when unchanged).

    Sets ``row["audio"]`` (``fbank80.zip:offset:size``). Returns (input hash, whether the zip was reused).
    """
    members = sorted((f"{r['id']}.npy", r["_cache"]) for rs in kept.values() for r in rs)
    zip_path = out / FEATURES_ZIP
    h_zip = _hash([(m, os.path.basename(c)) for m, c in members])
    if state.done("features", h_zip, zip_path):
        offs = zip_member_offsets(zip_path)
        fields = {name: f"{FEATURES_ZIP}:{o}:{s}" for name, (o, s) in offs.items()}
        reused = True
    else:
        fields = pack_npy_files(zip_path, members, progress=progress)
        state.mark("features", h_zip)
        reused = False
    for rs in kept.values():
        for r in rs:
            r["audio"] = fields[f"{r['id']}.npy"]
    return h_zip, reused


def fit_vocab(kept: dict[str, list[dict[str, Any]]], feats: Featurized, h_zip: str, out: Path,
              tgt_langs: list[str], opts: BuildOptions, state: _State, jobs: int,
              splits: list[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Step 5, vocab: global CMVN and SentencePiece models from the fit split (or copied, ``vocab_from``).

    Returns:
        (``vocab`` section of config.yaml, vocab report, gcmvn report).

    Raises:
        BuildError: no kept utterance in the fit split (and no ``vocab_from``), bad ``vocab_from``.
    """
    if opts.vocab_from is not None:
        return _reuse_vocab(Path(opts.vocab_from), out, tgt_langs)
    fit = kept.get(opts.fit_split, [])
    if not fit:
        raise BuildError(
            f"no kept utterance in fit split {opts.fit_split!r} (splits: {splits}); the vocabulary and "
            "CMVN need training data, or pass vocab_from=<DATA of a trained model>"
        )
    fit = sorted(fit, key=lambda r: r["id"])
    h_cmvn = _hash([h_zip, [r["id"] for r in fit]])
    if state.done("gcmvn", h_cmvn, out / GCMVN_FILE):
        g = GlobalCMVN.load(out / GCMVN_FILE)
    else:
        counted = sorted(i for st in feats.talk_stats.values() for i in st["ids"])
        expected = sorted(r["id"] for r in fit if r["n_frames"] > 0)
        if counted != expected:  # the workers' pre-filter must agree with the filter
            raise RuntimeError(f"internal error: CMVN counted {len(counted)} utterances, {len(expected)} kept")
        acc = CMVNAccumulator()
        for key in sorted(feats.talk_stats):  # fixed order: bit-identical gcmvn.npz for any --jobs
            st = feats.talk_stats[key]
            acc.add_stats(st["count"], st["sum"], st["sumsq"])
        g = acc.finalize()
        g.save(out / GCMVN_FILE)
        state.mark("gcmvn", h_cmvn)
    cmvn_rep = {"file": GCMVN_FILE, "frames": g.count, "utterances": len(fit), "split": opts.fit_split,
                "mean_range": [float(g.mean.min()), float(g.mean.max())],
                "std_range": [float(g.std.min()), float(g.std.max())]}
    vocab_cfg, vocab_rep = _train_vocabs(fit, out, tgt_langs, opts, state, jobs)
    return vocab_cfg, vocab_rep, cmvn_rep


def write_outputs(kept: dict[str, list[dict[str, Any]]], out: Path, tgt_langs: list[str], splits: list[str],
                  vocab_cfg: dict[str, Any], opts: BuildOptions) -> None:
    """Step 6, write: manifests (``<split>.tsv`` and fairseq ``<split>_st_<lang>.tsv``) and ``config.yaml``."""
    import yaml

    cols = manifest_columns(tgt_langs)
    for split, rs in kept.items():
        mrows = [{**r, "offset": _fmt_s(r["offset"]),
                  "duration": _fmt_s(r["duration"] if r["duration"] is not None else r["n_frames"] * 0.01)}
                 for r in rs]
        write_manifest(out / f"{split}.tsv", mrows, cols)
        for lang in tgt_langs:
            st_rows = [{"id": r["id"], "audio": r["audio"], "n_frames": r["n_frames"],
                        "tgt_text": r[TGT_PREFIX + lang], "speaker": r["speaker"], "src_text": r["src_text"],
                        "tgt_lang": lang} for r in rs if r[TGT_PREFIX + lang]]
            write_manifest(out / f"{split}_st_{lang}.tsv", st_rows, FAIRSEQ_ST_COLUMNS)
    cfg = _config(out, tgt_langs, splits, vocab_cfg, opts)
    atomic_write_text(out / "config.yaml", yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))


def _train_vocabs(fit: list[dict[str, Any]], out: Path, tgt_langs: list[str], opts: BuildOptions,
                  state: _State, jobs: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train joint / src / per-language SentencePiece models (skipped when inputs are unchanged)."""
    vocab_cfg: dict[str, Any] = {"joint": "spm_joint.model", "src": "spm_src.model"}
    rep: dict[str, Any] = {}
    specs: list[tuple[str, str, list[str], int, list[str]]] = []
    if opts.pretokenize not in ("auto", "none"):
        raise BuildError(f"pretokenize must be 'auto' or 'none', not {opts.pretokenize!r}")
    pre = opts.pretokenize == "auto" and any(lang.split("-")[0] in NO_SPACE_LANGS for lang in tgt_langs)

    def tgt(r: dict[str, Any], lang: str) -> str:
        t = r[TGT_PREFIX + lang]
        return pretokenize(t, lang) if pre else t

    joint_text = [tgt(r, lang) for r in fit for lang in tgt_langs if r[TGT_PREFIX + lang]]
    specs.append(("joint", "spm_joint.model", joint_text,
                  opts.vocab_size or auto_vocab_size(joint_text, DEFAULT_VOCAB_CAPS["joint"]),
                  [lang_tag(lang) for lang in tgt_langs]))
    src_text = [r["src_text"] for r in fit if r["src_text"]]
    specs.append(("src", "spm_src.model", src_text,
                  opts.src_vocab_size or auto_vocab_size(src_text, DEFAULT_VOCAB_CAPS["src"]), []))
    if opts.per_lang_vocab:
        vocab_cfg["per_lang"] = {}
        for lang in tgt_langs:
            t = [tgt(r, lang) for r in fit if r[TGT_PREFIX + lang]]
            if not t:
                raise BuildError(f"--per-lang-vocab: no {lang} text in split {opts.fit_split!r}")
            specs.append((f"per_lang:{lang}", f"spm_{lang}.model", t,
                          opts.vocab_size or auto_vocab_size(t, DEFAULT_VOCAB_CAPS["per_lang"]), []))
            vocab_cfg["per_lang"][lang] = f"spm_{lang}.model"
    for name, fname, text, size, uds in specs:
        is_tgt = name != "src" and pre
        h = _hash([text, size, uds, "unigram"] + (["pretokenized"] if is_tgt else []))
        info_path = out / ".cache" / f"{fname}.json"
        if state.done(f"spm:{fname}", h, out / fname, info_path):
            info = json.loads(info_path.read_text())
            info["skipped"] = True
        else:
            auto = (opts.vocab_size if name != "src" else opts.src_vocab_size) is None
            info = train_sentencepiece(text, out / fname, size, uds, num_threads=max(1, jobs), auto=auto,
                                       pretokenized=is_tgt)
            info["pretokenized"] = is_tgt
            info["model"] = fname
            info["auto"] = auto
            atomic_write_json(info_path, info)
            state.mark(f"spm:{fname}", h)
        rep[name] = info
        log.info("vocab %s: %s, requested %s (%s), got %d pieces", name, fname, info["requested"],
                 "auto" if info.get("auto") else "--vocab-size", info["actual"])
    return vocab_cfg, rep


def vocab_source_config(src: str | os.PathLike[str]) -> dict[str, Any]:
    """The DATA config of a ``--vocab-from`` source: a DATA directory's ``config.yaml``, or the one an exported
    model folder keeps (``tgt_langs``, ``vocab``, ``gcmvn``, ``fbank``, ...).

    Raises:
        BuildError: ``src`` is neither (or its model folder is incomplete); the message names it.
    """
    from mmst.data.corpus import DataConfigError, load_data_config
    from mmst.models.checkpoint import MODEL_CONFIG_FILE, CheckpointError, read_model_config

    src = Path(src)
    try:
        if not (src / "config.yaml").is_file() and (src / MODEL_CONFIG_FILE).is_file():
            return read_model_config(src)["data"]
        return load_data_config(src)
    except (DataConfigError, CheckpointError) as e:
        raise BuildError(f"--vocab-from {src}: {e}") from None


def _reuse_vocab(src: Path, out: Path, tgt_langs: list[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Copy vocabularies and gcmvn of another DATA directory or of an exported model folder (``--vocab-from``).

    Raises:
        BuildError: ``src`` is neither (or its model folder is incomplete), or has no gcmvn.
    """
    from mmst.data.vocab import Vocab

    cfg = vocab_source_config(src)
    vocab = cfg.get("vocab") or {}
    files = [v for k, v in vocab.items() if k != "per_lang" and v] + list((vocab.get("per_lang") or {}).values())
    for f in files:
        for ext in (".model", ".txt"):
            p = src / (os.path.splitext(f)[0] + ext)
            if p.exists() and p.resolve() != (out / p.name).resolve():
                atomic_copy(p, out / p.name)
    g = src / cfg.get("gcmvn", GCMVN_FILE)
    if not g.exists():
        raise BuildError(f"--vocab-from {src}: {g} missing")
    if g.resolve() != (out / GCMVN_FILE).resolve():
        atomic_copy(g, out / GCMVN_FILE)
    if vocab.get("joint"):
        have = Vocab.load(out / os.path.basename(vocab["joint"])).langs
        missing = [lang for lang in tgt_langs if lang not in have]
        if missing:
            log.warning("--vocab-from %s: joint vocab has no language tag for %s", src, missing)
    rep = {"vocab_from": os.fspath(src.resolve()), "files": files}
    return ({k: (os.path.basename(v) if isinstance(v, str) else {a: os.path.basename(b) for a, b in v.items()})
             for k, v in vocab.items()}, rep, {"file": GCMVN_FILE, "from": os.fspath(g.resolve())})


def _config(out: Path, tgt_langs: list[str], splits: list[str], vocab: dict[str, Any],
            opts: BuildOptions) -> dict[str, Any]:
    """config.yaml content (mmst keys first, then fairseq-compatible keys)."""
    joint = vocab.get("joint", "spm_joint.model")
    cfg: dict[str, Any] = {
        "src_lang": opts.src_lang,
        "tgt_langs": list(tgt_langs),
        "features": FEATURES_ZIP,
        "gcmvn": GCMVN_FILE,
        "vocab": vocab,
        "input_feat_per_channel": NUM_MEL_BINS,
        "input_channels": 1,
        "sample_rate": 16000,
        "splits": list(splits),
        "fbank": {"num_mel_bins": NUM_MEL_BINS, "frame_length_ms": FRAME_LENGTH_MS, "frame_shift_ms": FRAME_SHIFT_MS,
                  "dither": opts.dither, "dither_mode": DITHER_MODE, "dither_seed": "crc32(utterance id)",
                  "snip_edges": True,
                  "peak_normalize": opts.peak_normalize,
                  "peak_gain": None if opts.peak_normalize is None else f"causal running peak, floor {PEAK_GAIN_FLOOR}",
                  "version": FEATURE_VERSION},
        # fairseq speech_to_text compatibility
        "bpe_tokenizer": {"bpe": "sentencepiece", "sentencepiece_model": joint},
        "vocab_filename": os.path.splitext(joint)[0] + ".txt",
        "global_cmvn": {"stats_npz_path": GCMVN_FILE},
        "transforms": {"*": ["global_cmvn"], "_train": ["global_cmvn"]},
        "prepend_tgt_lang_tag": True,
        "audio_root": os.fspath(out.resolve()),
    }
    if opts.vocab_from:
        cfg["vocab_from"] = os.fspath(Path(opts.vocab_from).resolve())
    cfg.update(opts.extra_config)
    return cfg


def format_summary(report: Mapping[str, Any]) -> str:
    """Human-readable summary of a build report (printed by the prep CLIs)."""
    lines = [f"DATA: {report['out_dir']}  languages: {','.join(report['tgt_langs'])}", "",
             f"{'split':<14}{'in':>8}{'kept':>8}{'hours':>9}  dropped"]
    for split, s in report["splits"].items():
        dropped = ", ".join(f"{k}={v}" for k, v in sorted(s["dropped"].items())) or "-"
        tag = " (never filtered)" if s["no_filter"] else ""
        lines.append(f"{split:<14}{s['rows_in']:>8}{s['kept']:>8}{s['hours']:>9.3f}  {dropped}{tag}")
    f = report["features"]
    lines.append("")
    lines.append(f"features: {f['utterances']} utterances in {f['file']} ({f['extracted']} extracted, "
                 f"{f['from_cache']} from cache, {f['seconds']} s, jobs={f['jobs']}, dither={f['dither']})")
    for name, v in (report.get("vocab") or {}).items():
        if isinstance(v, dict) and "actual" in v:
            lines.append(f"vocab {name}: {v['model']} requested {v['requested']}"
                         f"{' (auto)' if v.get('auto') else ''}, actual {v['actual']}"
                         f"{' (unchanged, skipped)' if v.get('skipped') else ''}")
        elif name == "vocab_from":
            lines.append(f"vocab and gcmvn reused from {v}")
    if report.get("warnings"):
        lines.append(f"warnings: {len(report['warnings'])} (test items kept despite problems, see prep_report.json)")
    if report.get("skipped"):
        lines.append(f"skipped: {len(report['skipped'])} utterances (reasons in prep_report.json)")
    return "\n".join(lines)


def cleanup_cache(out_dir: str | os.PathLike[str]) -> None:
    """Delete ``DATA/.cache`` (the per-utterance npy cache and step hashes); reruns then start over."""
    shutil.rmtree(Path(out_dir) / ".cache", ignore_errors=True)
