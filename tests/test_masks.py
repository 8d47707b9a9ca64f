"""Tests for mmst.models.masks: brute-force enumeration of the documented rules."""

import torch

from mmst.models.masks import (
    causal_mask,
    chunk_causal_mask,
    lengths_to_padding_mask,
    waitk_cross_mask,
    waitk_num_states,
)


def test_chunk_causal_matches_rule():
    for r in (1, 3, 7):
        for s in (1, 5, 16):
            m = chunk_causal_mask(s, s, r)
            for q in range(s):
                for k in range(s):
                    assert bool(m[q, k]) == (k // r <= q // r)


def test_chunk_causal_offset_is_submatrix():
    full = chunk_causal_mask(20, 20, 7)
    part = chunk_causal_mask(6, 20, 7, query_offset=14)
    assert torch.equal(part, full[14:20])


def test_causal_mask():
    m = causal_mask(4)
    assert torch.equal(m, torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    assert torch.equal(causal_mask(2, 5), m.new_tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]).bool())


def test_waitk_cross_mask_rule():
    r = 3
    lengths = torch.tensor([10, 4, 1])
    s_max = 10
    for k in (1, 2, 4):
        m = waitk_cross_mask(6, lengths, s_max, k, r)
        assert m.shape == (3, 6, s_max)
        for b, sb in enumerate(lengths.tolist()):
            n_chunks = -(-sb // r)
            for i in range(1, 7):
                visible_chunks = min(k + i - 1, n_chunks)
                for s in range(s_max):
                    expect = s < sb and (s // r) + 1 <= visible_chunks
                    assert bool(m[b, i - 1, s]) == expect, (k, b, i, s)
        assert m.any(-1).all()  # every row sees at least one state


def test_waitk_offline_and_start():
    lengths = torch.tensor([5, 2])
    m = waitk_cross_mask(3, lengths, 5, None, 2)
    assert torch.equal(m, ~lengths_to_padding_mask(lengths, 5)[:, None, :].expand(-1, 3, -1))
    full = waitk_cross_mask(6, lengths, 5, 2, 2)
    assert torch.equal(waitk_cross_mask(2, lengths, 5, 2, 2, start=4), full[:, 3:5])
    assert waitk_num_states(torch.tensor([1, 2, 3]), 1, 2, torch.tensor([5])).tolist() == [[2, 4, 5]]


def test_waitk_invalid_k():
    import pytest

    with pytest.raises(ValueError):
        waitk_cross_mask(2, torch.tensor([3]), 3, 0, 2)
