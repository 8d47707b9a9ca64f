"""Batching for multi-way speech translation: length bucketing by ``max_tokens`` feature frames,
deterministic per-epoch shuffling, collation to :class:`Batch`, and a resumable batch iterator.

Units: lengths are fbank frames (10 ms each). ``max_tokens`` bounds the PADDED size of a micro-batch,
``B * max(n_frames in batch) <= max_tokens`` (fairseq's ``--max-tokens`` for speech input).

Determinism: the batches of epoch ``e`` depend only on ``(lengths, max_tokens, max_sentences, seed, e)``
(numpy ``default_rng([seed, e])``), so the iterator position ``(epoch, offset)`` is enough to resume
the data order exactly (:meth:`EpochBatchIterator.state_dict`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

PAD_ID = 1
EOS_ID = 2


@dataclass
class Batch:
    """A micro-batch of B multi-way utterances (see docs/CONTRACTS.md "Batches").

    Attributes:
        ids: utterance ids, length B.
        fbank: ``(B, T, 80)`` float32 log-mel features with global CMVN applied, zero-padded.
        fbank_lengths: ``(B,)`` int64 number of valid frames per row (10 ms frames).
        target: ``{lang: (B, L) int64}`` = tokens + [eos], padded with pad=1; all-pad row when the
            utterance has no translation in that language.
        prev_output_tokens: ``{lang: (B, L) int64}`` = [start_token_id(lang)] + tokens, pad-padded;
            all-pad row when missing.
        src_tokens: ``(B, Ls)`` int64 English transcript tokens (spm_src, no eos) for CTC, pad-padded.
        src_lengths: ``(B,)`` int64 number of valid ``src_tokens`` per row (0 if no transcript).
        ntokens: ``{lang: int}`` non-pad target tokens (incl. eos) per language.
        indices: dataset indices of the rows (for debugging / subsets).
    """

    ids: list[str]
    fbank: torch.Tensor
    fbank_lengths: torch.Tensor
    target: dict[str, torch.Tensor]
    prev_output_tokens: dict[str, torch.Tensor]
    src_tokens: torch.Tensor
    src_lengths: torch.Tensor
    ntokens: dict[str, int]
    indices: list[int] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Number of utterances B."""
        return len(self.ids)

    @property
    def total_ntokens(self) -> int:
        """Sum of ``ntokens`` over languages."""
        return int(sum(self.ntokens.values()))

    @property
    def n_frames(self) -> int:
        """Number of valid (unpadded) feature frames in the batch."""
        return int(self.fbank_lengths.sum())

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """Copy of the batch with every tensor on ``device``."""
        def mv(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)

        return Batch(ids=list(self.ids), fbank=mv(self.fbank), fbank_lengths=mv(self.fbank_lengths),
                     target={k: mv(v) for k, v in self.target.items()},
                     prev_output_tokens={k: mv(v) for k, v in self.prev_output_tokens.items()},
                     src_tokens=mv(self.src_tokens), src_lengths=mv(self.src_lengths),
                     ntokens=dict(self.ntokens), indices=list(self.indices))

    def pin_memory(self) -> Batch:
        """Pinned-memory copy (used by DataLoader(pin_memory=True))."""
        return Batch(ids=self.ids, fbank=self.fbank.pin_memory(), fbank_lengths=self.fbank_lengths.pin_memory(),
                     target={k: v.pin_memory() for k, v in self.target.items()},
                     prev_output_tokens={k: v.pin_memory() for k, v in self.prev_output_tokens.items()},
                     src_tokens=self.src_tokens.pin_memory(), src_lengths=self.src_lengths.pin_memory(),
                     ntokens=self.ntokens, indices=self.indices)


def collate(items: Sequence[dict[str, Any]], tgt_langs: Sequence[str], start_token_ids: dict[str, int],
            pad_id: int = PAD_ID, eos_id: int = EOS_ID) -> Batch:
    """Collate dataset items into a :class:`Batch`.

    Args:
        items: dicts with ``id`` (str), ``index`` (int), ``fbank`` (``(T, 80)`` float tensor, CMVN
            applied), ``tokens`` (``{lang: list[int] | None}``; None = no translation) and
            ``src_tokens`` (``list[int] | None``).
        tgt_langs: languages to put in ``target`` (order kept).
        start_token_ids: first decoder input per language (bos=0 or the ``<lang:xx>`` id).

    Raises:
        ValueError: empty ``items``, or an item missing a language of ``tgt_langs``.
    """
    if not items:
        raise ValueError("collate: empty list of items")
    B = len(items)
    lengths = [int(it["fbank"].shape[0]) for it in items]
    T = max(lengths)
    feat_dim = int(items[0]["fbank"].shape[1])
    fbank = torch.zeros(B, T, feat_dim, dtype=torch.float32)
    for b, it in enumerate(items):
        fbank[b, : lengths[b]] = torch.as_tensor(it["fbank"], dtype=torch.float32)
    target: dict[str, torch.Tensor] = {}
    prev: dict[str, torch.Tensor] = {}
    ntokens: dict[str, int] = {}
    for lang in tgt_langs:
        seqs = []
        for it in items:
            if lang not in it["tokens"]:
                raise ValueError(f"collate: item {it['id']} has no entry for language {lang!r}")
            seqs.append(it["tokens"][lang])
        L = max([len(s) + 1 for s in seqs if s is not None], default=1)
        tgt = torch.full((B, L), pad_id, dtype=torch.long)
        prv = torch.full((B, L), pad_id, dtype=torch.long)
        n = 0
        for b, s in enumerate(seqs):
            if s is None:
                continue
            t = torch.as_tensor(list(s), dtype=torch.long)
            tgt[b, : len(s)] = t
            tgt[b, len(s)] = eos_id
            prv[b, 0] = start_token_ids[lang]
            prv[b, 1: len(s) + 1] = t
            n += len(s) + 1
        target[lang], prev[lang], ntokens[lang] = tgt, prv, n
    src = [it.get("src_tokens") or [] for it in items]
    Ls = max([len(s) for s in src], default=0)
    src_tokens = torch.full((B, max(Ls, 1)), pad_id, dtype=torch.long)
    for b, s in enumerate(src):
        if s:
            src_tokens[b, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return Batch(ids=[str(it["id"]) for it in items], fbank=fbank,
                 fbank_lengths=torch.tensor(lengths, dtype=torch.long), target=target,
                 prev_output_tokens=prev, src_tokens=src_tokens,
                 src_lengths=torch.tensor([len(s) for s in src], dtype=torch.long), ntokens=ntokens,
                 indices=[int(it.get("index", -1)) for it in items])


def make_batches(lengths: Sequence[int] | np.ndarray, max_tokens: int, max_sentences: int = 0,
                 seed: int = 1, epoch: int = 1, shuffle: bool = True) -> list[list[int]]:
    """Length-bucketed batches of dataset indices for one epoch.

    Indices are shuffled (ties broken randomly), stably sorted by length, and packed greedily so that
    ``len(batch) * max(lengths[batch]) <= max_tokens`` and ``len(batch) <= max_sentences`` (if > 0).
    The batch ORDER is then shuffled. Every index appears in exactly one batch.

    Args:
        lengths: per-item length in fbank frames.
        max_tokens: padded-frame budget per batch (>= 1).
        max_sentences: max items per batch (0 = no limit).
        seed, epoch: the RNG is ``numpy.random.default_rng([seed, epoch])``.
        shuffle: False = sorted by length, no shuffling (validation).

    Raises:
        ValueError: ``max_tokens < 1`` or an item longer than ``max_tokens`` (names its index; filter
            long items first).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    too_long = np.nonzero(lengths > max_tokens)[0]
    if len(too_long):
        i = int(too_long[0])
        raise ValueError(f"item {i} has {int(lengths[i])} frames > max_tokens={max_tokens} "
                         f"({len(too_long)} such items); raise max_tokens or filter with data.max_frames")
    rng = np.random.default_rng([int(seed), int(epoch)])
    order = rng.permutation(n) if shuffle else np.arange(n)
    order = order[np.argsort(lengths[order], kind="stable")]
    batches: list[list[int]] = []
    cur: list[int] = []
    cur_max = 0
    for idx in order.tolist():
        ln = int(lengths[idx])
        new_max = max(cur_max, ln)
        if cur and ((len(cur) + 1) * new_max > max_tokens or (max_sentences > 0 and len(cur) >= max_sentences)):
            batches.append(cur)
            cur, new_max = [], ln
        cur.append(idx)
        cur_max = new_max
    if cur:
        batches.append(cur)
    if shuffle:
        perm = rng.permutation(len(batches))
        batches = [batches[i] for i in perm.tolist()]
    return batches


class _ListSampler:
    """A batch sampler over a fixed list of index lists (DataLoader ``batch_sampler``)."""

    def __init__(self, batches: list[list[int]]) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class EpochBatchIterator:
    """Infinite, resumable stream of micro-batches over epochs.

    Args:
        dataset: indexable; ``dataset[i]`` returns an item for ``collate_fn``.
        lengths: per-item lengths in frames (for bucketing).
        collate_fn: list of items -> batch (e.g. ``dataset.collater``).
        max_tokens, max_sentences, seed: see :func:`make_batches`.
        num_workers: DataLoader workers (0 = load in the main process).
        shuffle: shuffle per epoch (training) or not (validation).

    The position is ``(epoch, offset)``: ``offset`` batches of ``epoch`` have been yielded.
    :meth:`state_dict` / :meth:`load_state_dict` save/restore it (primitives only); the batches that
    follow a restore are exactly those an uninterrupted iterator would have produced. A dataset with a
    ``set_epoch(epoch)`` method is told the epoch before its items are read (augmentation draws).
    """

    def __init__(self, dataset: Any, lengths: Sequence[int] | np.ndarray, collate_fn: Callable[[list[Any]], Any],
                 max_tokens: int, max_sentences: int = 0, seed: int = 1, num_workers: int = 0,
                 shuffle: bool = True) -> None:
        self.dataset = dataset
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.collate_fn = collate_fn
        self.max_tokens = int(max_tokens)
        self.max_sentences = int(max_sentences)
        self.seed = int(seed)
        self.num_workers = int(num_workers)
        self.shuffle = shuffle
        self.epoch = 1
        self.offset = 0
        self._batches: list[list[int]] | None = None
        self._batches_epoch = -1
        self._it: Iterator[Any] | None = None
        if len(self.lengths) == 0:
            raise ValueError("EpochBatchIterator: empty dataset")

    def batches_for_epoch(self, epoch: int) -> list[list[int]]:
        """The index lists of ``epoch`` (cached for the current epoch)."""
        if self._batches_epoch != epoch or self._batches is None:
            self._batches = make_batches(self.lengths, self.max_tokens, self.max_sentences, self.seed,
                                         epoch, shuffle=self.shuffle)
            self._batches_epoch = epoch
        return self._batches

    def __len__(self) -> int:
        """Number of batches in the current epoch."""
        return len(self.batches_for_epoch(self.epoch))

    def _start(self) -> None:
        batches = self.batches_for_epoch(self.epoch)[self.offset:]
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if set_epoch is not None:  # per-epoch augmentation draws (before workers copy the dataset)
            set_epoch(self.epoch)
        if self.num_workers > 0:
            loader = torch.utils.data.DataLoader(self.dataset, batch_sampler=_ListSampler(batches),
                                                 collate_fn=self.collate_fn, num_workers=self.num_workers)
            self._it = iter(loader)
        else:
            self._it = (self.collate_fn([self.dataset[i] for i in b]) for b in batches)

    def next_batch(self) -> Any:
        """Return the next micro-batch, rolling over to the next epoch when one is exhausted."""
        while True:
            if self._it is None:
                self._start()
            try:
                assert self._it is not None
                b = next(self._it)
                self.offset += 1
                return b
            except StopIteration:
                self._it = None
                self.epoch += 1
                self.offset = 0

    def skip(self, n: int) -> None:
        """Advance the position by ``n`` batches without reading them (rolls over epochs like
        :meth:`next_batch`). The parameter server uses it to keep its checkpointed position equal to an
        average worker's."""
        for _ in range(int(n)):
            self.offset += 1
            if self.offset >= len(self.batches_for_epoch(self.epoch)):
                self.epoch += 1
                self.offset = 0
        self._it = None

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield self.next_batch()

    @property
    def end_of_epoch(self) -> bool:
        """True when every batch of the current epoch has been yielded."""
        return self.offset >= len(self.batches_for_epoch(self.epoch))

    def state_dict(self) -> dict[str, int]:
        """Position ``{"epoch", "offset", "seed"}`` (ints; stored in checkpoints)."""
        return {"epoch": self.epoch, "offset": self.offset, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore a position saved by :meth:`state_dict`; raises ValueError on a seed mismatch."""
        if int(state.get("seed", self.seed)) != self.seed:
            raise ValueError(f"data iterator seed mismatch: checkpoint {state.get('seed')} vs config {self.seed}")
        self.epoch = int(state["epoch"])
        self.offset = int(state["offset"])
        self._it = None
