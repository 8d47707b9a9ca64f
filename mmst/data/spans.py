"""Multi-sentence training: spans of consecutive utterances of one talk (or speaker) as one training item.

A model trained on single sentences learns that its translation ends when the input's first sentence
ends; a long-form stream holds several sentences between two pauses (docs/longform.md). Trained on spans of
1..N consecutive utterances joined as they were spoken, a model learns to go on past a sentence end
(the config keys ``data.concat_utterances``, ``data.concat_group``, ``data.concat_pause_ms``;
docs/training.md).

Plan (:func:`plan_spans`, a pure function of the rows and the seed, drawn once per training run): the
rows are grouped by talk (the recording, ``wav``, in ``offset`` order) or by speaker (``speaker``, in
manifest order); each group is cut front to back into spans whose lengths are drawn uniformly from 1..N.
A span stops growing, shorter than drawn, where two neighbours cannot be joined, and before it would
exceed ``max_frames``. Joins:

- the recording's own gaps (``pause_ms`` None): the span is one piece of the recording, from its first
  utterance's start to its last one's end, so the audio between them is what was there (silence,
  breathing, applause; also the speech of an utterance the prep left out of the manifest, which then
  has no target: sampled pauses avoid that). Two neighbours join only when they are in one recording and
  the second starts at or after the first one's end;
- a sampled pause (``pause_ms = (lo, hi)``): each join is digital silence of a length drawn uniformly
  from lo..hi ms (whole 16 kHz samples); any two neighbours of a group join.

Item (:class:`SpanDataset`): the span's audio through the DATA's front end (the prep's fbank with its
dither, ``fbank.peak_normalize`` gain and global CMVN; or the samples, for waveform encoders), as the
streaming front end computes it over a whole talk. Targets: per language the parts' sentences joined by a
space (by nothing for ja/zh) and tokenised; a language missing a part's sentence has no target for the
span (masked out of the loss, never misaligned). The English source text for CTC is joined the same way.
A span of one utterance is the dataset's own item (its stored features).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mmst.features import num_frames

SAMPLE_RATE = 16000
#: what :func:`plan_spans` groups by
GROUPS = ("talk", "speaker")
#: salt of the plan's random generator (with the training seed)
PLAN_SEED_SALT = 0x5BA7
#: salt of the edge silences' generator (with the training seed and PLAN_SEED_SALT)
EDGE_SEED_SALT = 0xED6E


@dataclass(frozen=True)
class Span:
    """One training item of consecutive utterances.

    Attributes:
        rows: indices of its utterances in the dataset's rows, in speaking order.
        pause_samples: the silence put after each part but the last, 16 kHz samples; ``None`` = the
            recording's own audio between the parts.
        n_samples: its audio length at 16 kHz (parts, joins and edges).
        edge_samples: ``(before, after)``: the silence put before the first part and after the last, 16 kHz
            samples; ``None`` = none (the parts' own edges only).
    """

    rows: tuple[int, ...]
    pause_samples: tuple[int, ...] | None
    n_samples: int
    edge_samples: tuple[int, int] | None = None


def _seconds(row: Mapping[str, str], field: str, where: str) -> float:
    v = row.get(field, "")
    try:
        x = float(v)
    except (TypeError, ValueError):
        x = float("nan")
    if not np.isfinite(x) or x < 0:
        raise ValueError(f"{where}: utterance {row.get('id', '?')}: field {field!r} is {v!r}, not seconds >= 0 "
                         "(multi-sentence training reads each utterance's place in its recording)")
    return x


def _extent(row: Mapping[str, str], where: str) -> tuple[int, int]:
    """``(start, stop)`` of an utterance in its recording, 16 kHz samples (as :func:`mmst.audio.load_audio`
    rounds them)."""
    start = int(round(_seconds(row, "offset", where) * SAMPLE_RATE))
    return start, start + int(round(_seconds(row, "duration", where) * SAMPLE_RATE))


def plan_spans(rows: Sequence[Mapping[str, str]], max_utterances: int, seed: int, *, group: str = "talk",
               pause_ms: Sequence[float] | None = None, max_frames: int | None = None,
               edge_ms: Sequence[float] | None = None, where: str = "manifest") -> list[Span]:
    """Cut the rows of a manifest into spans of 1..``max_utterances`` consecutive utterances (module
    docstring).

    Args:
        rows: manifest rows (``id``, ``wav``, ``offset``, ``duration``, ``speaker``), e.g.
            :attr:`mmst.data.dataset.MultiwayDataset.rows`.
        max_utterances: N >= 1; span lengths are drawn uniformly from 1..N.
        seed: the plan's seed (the training seed): the same rows and seed give the same spans.
        group: ``talk`` (one recording, ``offset`` order) or ``speaker`` (manifest order).
        pause_ms: ``None`` = the recording's own gaps; ``(lo, hi)`` = silence drawn from lo..hi ms.
        max_frames: no span of several utterances longer than this many 10 ms frames (edges not counted).
        edge_ms: ``None`` = no edges; ``(lo, hi)`` = silence drawn from lo..hi ms before and after each span
            (single utterances too), drawn after the span's parts and joins, so the parts and joins of a plan
            do not depend on it.
        where: the manifest's name in error messages.

    Returns:
        Every row in exactly one span; groups in order of their first row, spans in speaking order.

    Raises:
        ValueError: ``max_utterances`` < 1, an unknown group, a bad pause range, or a row whose ``wav``,
            ``offset``, ``duration`` or ``speaker`` is missing or not a number (names the utterance and field).
    """
    if max_utterances < 1:
        raise ValueError(f"max_utterances must be >= 1, got {max_utterances}")
    if group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS}, got {group!r}")
    if pause_ms is not None and not (len(pause_ms) == 2 and 0 <= pause_ms[0] <= pause_ms[1]):
        raise ValueError(f"pause_ms must be [lo, hi] with 0 <= lo <= hi (ms), got {list(pause_ms)}")
    if edge_ms is not None and not (len(edge_ms) == 2 and 0 <= edge_ms[0] <= edge_ms[1]):
        raise ValueError(f"edge_ms must be [lo, hi] with 0 <= lo <= hi (ms), got {list(edge_ms)}")
    key_field = "wav" if group == "talk" else "speaker"
    groups: dict[str, list[int]] = {}
    extent = []
    for i, r in enumerate(rows):
        key = r.get(key_field, "")
        if not key:
            raise ValueError(f"{where}: utterance {r.get('id', '?')}: field {key_field!r} is empty "
                             f"(multi-sentence training groups utterances by {group})")
        extent.append(_extent(r, where))
        groups.setdefault(key, []).append(i)
    rng = np.random.default_rng([int(seed), PLAN_SEED_SALT])
    spans: list[Span] = []
    for members in groups.values():
        seq = sorted(members, key=lambda i: (extent[i][0], i)) if group == "talk" else members
        k = 0
        while k < len(seq):
            want = int(rng.integers(1, max_utterances + 1))
            parts, pauses = [seq[k]], []
            n = extent[seq[k]][1] - extent[seq[k]][0]
            while len(parts) < want and k + len(parts) < len(seq):
                prev, nxt = parts[-1], seq[k + len(parts)]
                if pause_ms is None:
                    if rows[prev]["wav"] != rows[nxt]["wav"] or extent[nxt][0] < extent[prev][1]:
                        break
                    add, pause = extent[nxt][1] - extent[prev][1], 0
                else:
                    pause = int(round(rng.uniform(pause_ms[0], pause_ms[1]) * SAMPLE_RATE / 1000.0))
                    add = pause + extent[nxt][1] - extent[nxt][0]
                if max_frames is not None and num_frames(n + add) > max_frames:
                    break
                parts.append(nxt)
                pauses.append(pause)
                n += add
            spans.append(Span(tuple(parts), None if pause_ms is None else tuple(pauses), n))
            k += len(parts)
    if edge_ms is not None:  # a generator of its own: the parts and joins stay those of the plan without edges
        erng = np.random.default_rng([int(seed), PLAN_SEED_SALT, EDGE_SEED_SALT])
        drawn = np.round(erng.uniform(edge_ms[0], edge_ms[1], size=(len(spans), 2)) * SAMPLE_RATE / 1000.0)
        spans = [Span(sp.rows, sp.pause_samples, sp.n_samples + int(a) + int(b), (int(a), int(b)))
                 for sp, (a, b) in zip(spans, drawn.astype(np.int64))]
    return spans


def _stored(span: Span) -> bool:
    """A span whose item is the dataset's own (stored features): one utterance, no edge silences."""
    return len(span.rows) == 1 and span.edge_samples is None


def join_texts(texts: Sequence[str], lang: str) -> str | None:
    """The sentences of a span as one target: joined by a space, or by nothing for languages written
    without spaces (:data:`mmst.data.vocab.NO_SPACE_LANGS`); ``None`` when one of them is empty (that
    language has no target for the span)."""
    from mmst.data.vocab import NO_SPACE_LANGS

    parts = [t.strip() for t in texts]
    if not all(parts):
        return None
    return ("" if lang in NO_SPACE_LANGS else " ").join(parts)


class SpanDataset(torch.utils.data.Dataset):
    """Training items of :class:`Span` s over a :class:`mmst.data.dataset.MultiwayDataset` (module docstring).

    Args:
        base: the dataset whose rows the spans index (its vocabularies, CMVN, augmentation, start tokens and
            collater are used).
        spans: from :func:`plan_spans` over ``base.rows``.

    Attributes:
        n_frames: ``(len(spans),)`` int64, each span's length in 10 ms frames (for batching).

    Raises:
        ValueError: a span indexes past ``base.rows``.
    """

    def __init__(self, base: Any, spans: Sequence[Span]) -> None:
        self.base = base
        self.spans = list(spans)
        if any(i >= len(base.rows) or i < 0 for s in self.spans for i in s.rows):
            raise ValueError(f"a span indexes past the {len(base.rows)} utterances of {base.split}")
        self.n_frames = np.array([int(base.n_frames[s.rows[0]]) if _stored(s) else num_frames(s.n_samples)
                                  for s in self.spans], dtype=np.int64)
        self._cache: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        """Number of spans."""
        return len(self.spans)

    def set_epoch(self, epoch: int) -> None:
        """Epoch of the augmentation draws (passed to the base dataset)."""
        self.base.set_epoch(epoch)

    def span_id(self, k: int) -> str:
        """``id1+id2+...``: the ids of span ``k``'s utterances."""
        return "+".join(self.base.rows[i]["id"] for i in self.spans[k].rows)

    def waveform(self, k: int) -> np.ndarray:
        """16 kHz mono samples ``(N,)`` float32 of span ``k``: one read of the recording from its first
        utterance's start to its last one's end (own gaps), or the parts with the planned silences between;
        with the span's edge silences before and after.

        Raises:
            mmst.audio.AudioError: a recording cannot be read or a part lies outside it (names the file).
        """
        from mmst.audio import load_audio
        from mmst.data.dataset import WAV_END_TOLERANCE_S

        span = self.spans[k]
        rows = [self.base.rows[i] for i in span.rows]
        before, after = span.edge_samples or (0, 0)
        pieces = [np.zeros(before, np.float32)]
        if span.pause_samples is None:
            (start, _), (_, stop) = _extent(rows[0], self.base.split), _extent(rows[-1], self.base.split)
            pieces.append(load_audio(rows[0]["wav"], start / SAMPLE_RATE, (stop - start) / SAMPLE_RATE,
                                     end_tolerance_s=WAV_END_TOLERANCE_S))
        else:
            for r, pause in zip(rows, [*span.pause_samples, 0]):
                pieces.append(load_audio(r["wav"], float(r["offset"]), float(r["duration"]),
                                         end_tolerance_s=WAV_END_TOLERANCE_S))
                pieces.append(np.zeros(pause, np.float32))
        pieces.append(np.zeros(after, np.float32))
        return np.concatenate(pieces)

    def features(self, k: int) -> torch.Tensor:
        """Span ``k``'s input as the base dataset computes an utterance's (module docstring): CMVN-normalised
        fbank ``(T, 80)``, or samples ``(N, 1)`` for waveform input; before augmentation."""
        if k in self._cache:
            return self._cache[k]
        from mmst.features import causal_peak_normalize, dither_seed_for, fbank, fbank_kwargs_from_config

        x = self.waveform(k)
        peak = (self.base.data_cfg.get("fbank") or {}).get("peak_normalize")
        if peak is not None:
            x = causal_peak_normalize(x, float(peak))
        if self.base.input_kind == "waveform":
            feats = x[:, None]
        else:
            feats = fbank(x, dither_seed=dither_seed_for(self.span_id(k)), **fbank_kwargs_from_config(self.base.data_cfg))
            if self.base.cmvn is not None:
                feats = self.base.cmvn(feats)
        t = torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32))
        if self.base.cache_features:
            self._cache[k] = t
        return t

    def texts(self, k: int, column: str, lang: str) -> str | None:
        """Span ``k``'s text of a manifest column (``tgt_text_<lang>``, ``src_text``) joined as for ``lang``
        (:func:`join_texts`)."""
        return join_texts([self.base.rows[i].get(column, "") for i in self.spans[k].rows], lang)

    def __getitem__(self, k: int) -> dict[str, Any]:
        """Item dict as :meth:`mmst.data.dataset.MultiwayDataset.__getitem__` (``index`` = ``k``, ``id`` =
        :meth:`span_id`)."""
        span = self.spans[k]
        if _stored(span):
            return {**self.base[span.rows[0]], "index": k}
        base = self.base
        tokens: dict[str, list[int] | None] = {}
        for lang in base.tgt_langs:
            text = self.texts(k, f"tgt_text_{lang}", lang)
            tokens[lang] = base.tgt_vocabs[lang].encode(text) if text else None
        src = None
        if base.src_vocab is not None:
            text = self.texts(k, "src_text", "en")
            src = base.src_vocab.encode(text) if text else None
        feats = self.features(k)
        if base.augment is not None:
            feats = base.augment(feats, base.epoch, k)
        return {"index": k, "id": self.span_id(k), "fbank": feats, "tokens": tokens, "src_tokens": src}

    def collater(self, items: list[dict[str, Any]]) -> Any:
        """The base dataset's collater (:func:`mmst.data.batching.collate`)."""
        return self.base.collater(items)


def build_span_dataset(base: Any, max_utterances: int, seed: int, *, group: str = "talk",
                       pause_ms: Sequence[float] | None = None, max_frames: int | None = None,
                       edge_ms: Sequence[float] | None = None) -> SpanDataset:
    """:func:`plan_spans` over ``base.rows`` and the :class:`SpanDataset` of the plan, after checking that
    every recording a joined span reads exists.

    Raises:
        ValueError: see :func:`plan_spans`.
        FileNotFoundError: a joined (or edge-padded) utterance's ``wav`` is not a file (e.g. a DATA built from features only);
            names the manifest, the utterance and the path.
    """
    where = os.fspath(base.data_dir / f"{base.split}.tsv")
    spans = plan_spans(base.rows, max_utterances, seed, group=group, pause_ms=pause_ms, max_frames=max_frames,
                       edge_ms=edge_ms, where=where)
    for s in spans:
        for i in s.rows if not _stored(s) else ():
            row = base.rows[i]
            if not os.path.isfile(row["wav"]):
                raise FileNotFoundError(f"{where}: utterance {row['id']}: wav {row['wav']!r} is not a file "
                                        "(multi-sentence training reads the audio of joined utterances)")
    return SpanDataset(base, spans)


def describe_spans(spans: Sequence[Span]) -> dict[str, Any]:
    """``{"spans": n, "utterances": n, "by_length": {length: count}}`` (a log line)."""
    lengths = [len(s.rows) for s in spans]
    return {"spans": len(spans), "utterances": sum(lengths),
            "by_length": {n: lengths.count(n) for n in sorted(set(lengths))}}
