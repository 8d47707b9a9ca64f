"""Read/write policies over fixed pre-decision chunks.

wait-k (Ma et al. 2019, STACL, ``g(i) = k + i - 1``) applied to speech with a fixed pre-decision
ratio (Ma et al. 2020, SimulST): the source is read in chunks of R encoder states (R * 40 ms); target
token i (1-based) is written once ``k + i - 1`` chunks have been read, or once the source is finished,
and it attends the encoder states of chunks ``1 .. min(k + i - 1, n_chunks)`` — exactly the training
mask of :func:`mmst.models.masks.waitk_cross_mask`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WaitKPolicy:
    """wait-k over pre-decision chunks.

    Attributes:
        k: lagging in chunks (>= 1), or None for offline (read everything, then write).
        ratio: R, encoder states per chunk.

    Raises:
        ValueError: ``k < 1`` or ``ratio < 1``.
    """

    k: int | None
    ratio: int

    def __post_init__(self) -> None:
        if self.k is not None and self.k < 1:
            raise ValueError(f"wait-k lagging must be >= 1 (or None for offline), got {self.k}")
        if self.ratio < 1:
            raise ValueError(f"pre-decision ratio must be >= 1, got {self.ratio}")

    def can_write(self, i: int, n_chunks_read: int, source_finished: bool) -> bool:
        """May target token ``i`` (1-based) be written after ``n_chunks_read`` chunks?"""
        if source_finished:
            return True
        return self.k is not None and self.k + i - 1 <= n_chunks_read

    def visible_states(self, i: int, n_states: int) -> int:
        """Encoder states visible to token ``i``: ``min((k + i - 1) * R, n_states)`` (all if offline)."""
        if self.k is None:
            return n_states
        return min((self.k + i - 1) * self.ratio, n_states)
