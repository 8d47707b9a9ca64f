"""Tests for mmst.data.batching (bucketing, collation, resumable iterator) and mmst.data.dataset."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mmst.data.batching import EpochBatchIterator, collate, make_batches


@pytest.mark.parametrize("max_tokens, max_sentences", [(500, 0), (1200, 0), (1200, 5), (100, 1)])
def test_bucketing_respects_max_tokens_and_covers_all(max_tokens, max_sentences):
    rng = np.random.default_rng(0)
    lengths = rng.integers(10, 100, size=357)
    for epoch in (1, 2):
        batches = make_batches(lengths, max_tokens, max_sentences, seed=5, epoch=epoch)
        flat = sorted(i for b in batches for i in b)
        assert flat == list(range(len(lengths)))  # every item exactly once
        for b in batches:
            assert len(b) * lengths[b].max() <= max_tokens
            if max_sentences:
                assert len(b) <= max_sentences


def test_bucketing_deterministic_per_epoch_and_bucketed():
    lengths = np.random.default_rng(1).integers(10, 400, size=200)
    a = make_batches(lengths, 1000, seed=3, epoch=1)
    assert a == make_batches(lengths, 1000, seed=3, epoch=1)
    assert a != make_batches(lengths, 1000, seed=3, epoch=2)
    assert a != make_batches(lengths, 1000, seed=4, epoch=1)
    # bucketing: padding waste is small compared with random batching
    waste = sum(len(b) * lengths[b].max() - lengths[b].sum() for b in a)
    assert waste < 0.2 * lengths.sum()


def test_bucketing_rejects_too_long_item():
    with pytest.raises(ValueError, match="item 2 has 50 frames > max_tokens=40"):
        make_batches([10, 20, 50], 40)


def _item(i, T, toks):
    return {"index": i, "id": f"u{i}", "fbank": torch.full((T, 80), float(i)), "tokens": toks,
            "src_tokens": [7, 8][: i + 1] if i < 2 else None}


def test_collate_shapes_padding_and_missing_rows():
    items = [_item(0, 5, {"de": [10, 11], "ja": [20]}), _item(1, 3, {"de": [12], "ja": None}),
             _item(2, 4, {"de": None, "ja": [21, 22, 23]})]
    b = collate(items, ["de", "ja"], {"de": 4, "ja": 5})
    assert b.ids == ["u0", "u1", "u2"] and b.fbank.shape == (3, 5, 80)
    assert b.fbank_lengths.tolist() == [5, 3, 4]
    assert float(b.fbank[1, 3:].abs().sum()) == 0.0
    assert b.target["de"].tolist() == [[10, 11, 2], [12, 2, 1], [1, 1, 1]]
    assert b.prev_output_tokens["de"].tolist() == [[4, 10, 11], [4, 12, 1], [1, 1, 1]]
    assert b.target["ja"].tolist() == [[20, 2, 1, 1], [1, 1, 1, 1], [21, 22, 23, 2]]
    assert b.prev_output_tokens["ja"][2].tolist() == [5, 21, 22, 23]
    assert b.ntokens == {"de": 5, "ja": 6}
    assert b.src_tokens.tolist() == [[7, 1], [7, 8], [1, 1]] and b.src_lengths.tolist() == [1, 2, 0]
    assert b.to("cpu").target["de"].equal(b.target["de"])


class _ToyDS:
    def __init__(self, n):
        self.lengths = np.random.default_rng(2).integers(5, 60, size=n)

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        return _item(i, int(self.lengths[i]), {"de": [4] * (i % 5)})

    def collater(self, items):
        return collate(items, ["de"], {"de": 0})


def test_iterator_resume_is_exact():
    ds = _ToyDS(50)
    full = EpochBatchIterator(ds, ds.lengths, ds.collater, 200, seed=9)
    ref = [full.next_batch().ids for _ in range(40)]  # crosses several epochs
    assert full.epoch > 1
    it = EpochBatchIterator(ds, ds.lengths, ds.collater, 200, seed=9)
    got = [it.next_batch().ids for _ in range(17)]
    state = it.state_dict()
    assert all(isinstance(v, int) for v in state.values())
    it2 = EpochBatchIterator(ds, ds.lengths, ds.collater, 200, seed=9)
    it2.load_state_dict(state)
    got += [it2.next_batch().ids for _ in range(23)]
    assert got == ref
    with pytest.raises(ValueError, match="seed mismatch"):
        EpochBatchIterator(ds, ds.lengths, ds.collater, 200, seed=1).load_state_dict(state)


def test_iterator_with_workers_matches_in_process():
    ds = _ToyDS(30)
    a = EpochBatchIterator(ds, ds.lengths, ds.collater, 150, seed=2)
    b = EpochBatchIterator(ds, ds.lengths, ds.collater, 150, seed=2, num_workers=1)
    for _ in range(len(a) + 3):
        assert a.next_batch().ids == b.next_batch().ids


def test_dataset_on_tiny_data(tiny_feature_data):
    from mmst.data.dataset import LanguageMismatchError, MultiwayDataset, check_languages

    ds = MultiwayDataset(tiny_feature_data, "train", lang_tag_start=True)
    assert ds.tgt_langs == ["de", "es"] and len(ds) == 64
    item = ds[0]
    assert item["fbank"].shape == (int(ds.n_frames[0]), 80)
    # CMVN applied: features are roughly standardised over the corpus
    feats = torch.cat([ds[i]["fbank"] for i in range(len(ds))])
    assert abs(float(feats.mean())) < 0.1 and abs(float(feats.std()) - 1.0) < 0.1
    assert item["tokens"]["es"] is None  # missing_every=7: item 0 has no es translation
    b = ds.collater([ds[i] for i in range(4)])
    assert (b.target["es"][0] == 1).all() and b.ntokens["es"] > 0
    assert b.prev_output_tokens["de"][:, 0].tolist() == [ds.joint_vocab.lang_tag_id("de")] * 4
    sep = MultiwayDataset(tiny_feature_data, "train", vocab_mode="per_lang", tgt_langs=["es"])
    assert sep.start_token_ids == {"es": 0} and sep.tgt_langs == ["es"]
    with pytest.raises(LanguageMismatchError, match="ja"):
        MultiwayDataset(tiny_feature_data, "train", tgt_langs=["de", "ja"])
    with pytest.raises(LanguageMismatchError, match="missing"):
        check_languages(["de", "es"], ["de", "es", "fr"])
    small = MultiwayDataset(tiny_feature_data, "train", max_frames=40)
    assert small.n_dropped > 0 and (small.n_frames <= 40).all()
