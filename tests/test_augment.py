"""Tests for training-time augmentation: SpecAugment (mmst.data.augment), speed perturbation copies
(mmst.corpora.speed_perturb), their config keys and their wiring into the dataset, iterator and trainer."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from mmst.data.augment import (
    SPECAUGMENT_POLICIES,
    FeatureAugment,
    SpecAugment,
    SpeedPerturbError,
    augment_rng,
    specaugment_from_config,
    speed_perturbed_split,
)
from mmst.data.batching import EpochBatchIterator
from mmst.data.dataset import MultiwayDataset
from mmst.training.config import ConfigError, load_config

# ------------------------------------------------------------------------------------- SpecAugment


def _ones(t: int = 300, f: int = 80) -> torch.Tensor:
    return torch.ones(t, f)


def test_lb_ld_presets_are_fairseqs():
    assert SPECAUGMENT_POLICIES["LB"] == {"freq_mask_N": 1, "freq_mask_F": 27, "time_mask_N": 1, "time_mask_T": 100,
                                          "time_mask_p": 1.0, "time_warp_W": 0}
    ld = specaugment_from_config("ld")
    assert (ld.freq_mask_N, ld.freq_mask_F, ld.time_mask_N, ld.time_mask_T, ld.time_warp_W) == (2, 27, 2, 100, 0)
    assert specaugment_from_config("none") is None and specaugment_from_config(None, {}) is None
    # explicit keys override the preset (the paper's W = 80)
    assert specaugment_from_config("LB", {"time_warp_W": 80}).time_warp_W == 80


@pytest.mark.parametrize("policy", ["LB", "LD"])
def test_mask_counts_and_regions_follow_the_parameters(policy):
    sa = specaugment_from_config(policy, {"mask_value": 0.0})
    for idx in range(40):
        rng = augment_rng(1, 1, idx)
        d = sa.draw(300, 80, augment_rng(1, 1, idx))
        assert len(d.freq) == sa.freq_mask_N and len(d.time) == sa.time_mask_N and d.warp is None
        assert all(0 <= f < 27 and 0 <= f0 <= 80 - f for f0, f in d.freq)
        assert all(0 <= t < 100 and 0 <= t0 <= 300 - t for t0, t in d.time)
        out = sa.apply(_ones(), rng)
        assert out.shape == (300, 80)
        cols = torch.zeros(80, dtype=torch.bool)
        rows = torch.zeros(300, dtype=torch.bool)
        for f0, f in d.freq:
            cols[f0: f0 + f] = True
        for t0, t in d.time:
            rows[t0: t0 + t] = True
        expect = ~(cols[None, :] | rows[:, None])  # 1 where no mask covers the cell
        assert torch.equal(out, expect.float()), (policy, idx, d)


def test_time_mask_p_caps_the_width_and_short_utterances_get_none():
    sa = SpecAugment(time_mask_N=3, time_mask_T=100, time_mask_p=0.1)
    widths = [t for i in range(200) for _, t in sa.draw(200, 80, augment_rng(0, 1, i)).time]
    assert max(widths) == 19 and min(widths) == 0  # widths in [0, floor(0.1 * 200)) = [0, 20)
    assert sa.draw(9, 80, augment_rng(0, 1, 0)).time == []  # floor(0.1 * 9) = 0: no time mask
    # fewer channels than F: unchanged (fairseq)
    x = torch.randn(50, 20)
    assert torch.equal(SpecAugment(freq_mask_N=1, freq_mask_F=27).apply(x, augment_rng(0, 1, 0)), x)


def test_default_mask_value_is_the_utterance_mean_and_input_is_not_modified():
    x = torch.arange(300 * 80, dtype=torch.float32).reshape(300, 80)
    keep = x.clone()
    sa = SpecAugment(freq_mask_N=2, freq_mask_F=27, time_mask_N=2, time_mask_T=100)
    out = None
    for i in range(10):  # some draw with a non-empty mask
        out = sa.apply(x, augment_rng(3, 1, i))
        if not torch.equal(out, x):
            break
    assert torch.equal(x, keep)
    changed = out != x
    assert changed.any() and torch.allclose(out[changed], torch.full_like(out[changed], float(x.mean())))


def test_time_warp_keeps_length_and_moves_frames():
    x = torch.linspace(0, 1, 200)[:, None].repeat(1, 80)
    sa = SpecAugment(time_warp_W=40)
    d = sa.draw(200, 80, augment_rng(5, 1, 0))
    assert d.warp is not None and 40 <= d.warp[0] < 160 and -40 < d.warp[1] < 40
    out = sa.apply(x, augment_rng(5, 1, 0))
    assert out.shape == x.shape
    if d.warp[1] != 0:
        assert not torch.allclose(out, x)
    assert torch.all(out[1:, 0] >= out[:-1, 0] - 1e-6)  # a warp of a ramp is still monotone
    # 2W >= T: no warp
    assert SpecAugment(time_warp_W=100).draw(200, 80, augment_rng(5, 1, 0)).warp is None


def test_same_seed_same_masks_other_epoch_or_utterance_other_masks():
    aug = FeatureAugment(specaugment_from_config("LD"), seed=7)
    x = torch.randn(400, 80)
    a = aug(x, 1, 3)
    assert torch.equal(a, FeatureAugment(specaugment_from_config("LD"), seed=7)(x, 1, 3))
    assert not torch.equal(a, aug(x, 2, 3)) and not torch.equal(a, aug(x, 1, 4))
    assert not torch.equal(a, FeatureAugment(specaugment_from_config("LD"), seed=8)(x, 1, 3))


def test_misspelled_time_wrap_w_is_read_with_a_warning():
    with pytest.warns(UserWarning, match="time_wrap_W"):
        sa = specaugment_from_config("LB", {"time_wrap_W": 80})
    assert sa.time_warp_W == 80
    with pytest.warns(UserWarning, match="time_wrap_W"):
        cfg = load_config(None, ["data.augment.specaugment={time_wrap_W: 80, freq_mask_N: 2, freq_mask_F: 9}"])
    assert cfg.data.augment.specaugment == {"time_warp_W": 80, "freq_mask_N": 2, "freq_mask_F": 9}
    with pytest.raises(ValueError, match="both"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        specaugment_from_config("LB", {"time_wrap_W": 80, "time_warp_W": 40})


@pytest.mark.parametrize("override, match", [
    ("data.augment.specaugment={freq_mask_M: 1}", "freq_mask_M"),
    ("data.augment.specaugment={freq_mask_N: 1.5}", "integer"),
    ("data.augment.specaugment={time_mask_N: 2}", "time_mask_T"),
    ("data.augment.specaugment_policy=LC", "LC"),
    ("data.augment.speed_perturb=[0.9, 3.0]", "speed_perturb"),
])
def test_bad_augment_config_is_rejected_naming_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [override])


# ------------------------------------------------------------------ dataset, iterator, trainer


def _dataset(data: Path, augment) -> MultiwayDataset:
    return MultiwayDataset(data, "train", lang_tag_start=True, cache_features=True, augment=augment)


def test_augmented_batches_resume_exactly_across_epochs(tiny_feature_data):
    aug = FeatureAugment(specaugment_from_config("LD"), seed=3)

    def it():
        ds = _dataset(tiny_feature_data, aug)
        return EpochBatchIterator(ds, ds.n_frames, ds.collater, max_tokens=1500, seed=3)

    ref_it = it()
    n_epoch = len(ref_it)
    ref = [ref_it.next_batch() for _ in range(n_epoch + 4)]  # into the second epoch
    plain = _dataset(tiny_feature_data, None)
    assert any(not torch.equal(b.fbank[j, : b.fbank_lengths[j]], plain.features(i))
               for b in ref for j, i in enumerate(b.indices))  # augmentation changed features
    # epoch 2 draws other masks for the same utterance
    e1 = {i: b.fbank[j, : b.fbank_lengths[j]] for b in ref[:n_epoch] for j, i in enumerate(b.indices)}
    e2 = {i: b.fbank[j, : b.fbank_lengths[j]] for b in ref[n_epoch:] for j, i in enumerate(b.indices)}
    assert any(not torch.equal(e1[i], e2[i]) for i in e2)
    for cut in (3, n_epoch + 1):
        first = it()
        for _ in range(cut):
            first.next_batch()
        state = first.state_dict()
        resumed = it()
        resumed.load_state_dict(state)
        for k in range(cut, len(ref)):
            b = resumed.next_batch()
            assert b.ids == ref[k].ids and torch.equal(b.fbank, ref[k].fbank), (cut, k)


def _tiny_cfg(*extra: str):
    return load_config(None, ["num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false",
                              "data.max_tokens=1500", "valid.bleu_subset=4", "model.overrides.d_model=48",
                              "model.overrides.encoder_layers=1", "model.overrides.decoder_layers=1",
                              "model.overrides.ffn_dim=64", "model.overrides.conv_channels=48",
                              "model.overrides.attention_heads=2", *extra])


def test_validation_is_not_augmented(tiny_feature_data, tmp_path):
    from mmst.training.trainer import build_trainer

    plain = build_trainer(_tiny_cfg(), tiny_feature_data, tmp_path / "a")
    aug = build_trainer(_tiny_cfg("data.augment.specaugment_policy=LD",
                                  "data.augment.specaugment={time_warp_W: 5}"), tiny_feature_data, tmp_path / "b")
    assert aug.train_iter.dataset.augment is not None and plain.train_iter.dataset.augment is None
    assert aug.validator.dataset.augment is None
    aug.model.load_state_dict(plain.model.state_dict())
    assert aug.validator.run(aug.model) == plain.validator.run(plain.model)
    # the training stream differs
    assert not torch.equal(aug.train_iter.next_batch().fbank, plain.train_iter.next_batch().fbank)


# ------------------------------------------------------------------------------ speed perturbation


def test_speed_perturb_changes_length_and_pitch_by_the_factor():
    from mmst.corpora.speed_perturb import speed_perturb

    sr, n = 16000, 16000
    x = np.sin(2 * np.pi * 1000.0 * np.arange(n) / sr).astype(np.float32)
    for f in (0.9, 1.1):
        y = speed_perturb(x, f)
        assert abs(len(y) - round(n / f)) <= 1
        spec = np.abs(np.fft.rfft(y[1000:-1000] * np.hanning(len(y) - 2000)))
        peak_hz = np.argmax(spec) * sr / (len(y) - 2000)
        assert abs(peak_hz - 1000.0 * f) < 5.0, (f, peak_hz)
    assert speed_perturb(x, 1.0) is not None and len(speed_perturb(x, 1.0)) == n


@pytest.fixture()
def audio_data(tiny_feature_data, tmp_path):
    """A copy of the tiny DATA whose train rows name real wav segments (tone + noise)."""
    from mmst.data.manifest import read_manifest, read_manifest_header, write_manifest

    data = tmp_path / "data"
    shutil.copytree(tiny_feature_data, data)
    rows = read_manifest(data / "train.tsv")
    cols = read_manifest_header(data / "train.tsv")
    rng = np.random.default_rng(0)
    wav = tmp_path / "talk.wav"
    sig = (0.1 * rng.standard_normal(16000 * 40)).astype(np.float32)
    sf.write(wav, sig, 16000)
    for i, r in enumerate(rows):
        r.update(wav=str(wav), offset=f"{0.5 * i:.3f}", duration=f"{0.3 + 0.011 * i:.3f}")
    write_manifest(data / "train.tsv", rows, cols)
    return data


def test_speed_perturbed_copies_frame_counts_match_the_manifest(audio_data):
    from mmst.corpora.speed_perturb import build_speed_perturbed
    from mmst.data.corpus import load_data_config
    from mmst.data.manifest import read_manifest
    from mmst.data.store import read_feature
    from mmst.features import num_frames

    rep = build_speed_perturbed(audio_data, "train", (0.9, 1.0, 1.1), progress=False)
    orig = {r["id"]: r for r in read_manifest(audio_data / "train.tsv")}
    rows = read_manifest(audio_data / "train_sp.tsv")
    assert len(rows) == 3 * len(orig) and rep["per_factor"]["1"]["utterances"] == len(orig)
    # the report (copied into docs/results by the augmentation recipe) says where it came from
    on_disk = json.loads((audio_data / "speed_perturb_train.json").read_text())
    assert on_disk["provenance"]["command"] and on_disk["provenance"]["machine"]["cores"] >= 1
    assert on_disk["extracted"] == 2 * len(orig)
    for r in rows:
        feats = read_feature(audio_data, r["audio"])
        assert feats.shape == (int(r["n_frames"]), 80), r["id"]
        if r["id"] in orig:
            assert r == orig[r["id"]]
            continue
        f = float(r["id"][2:].split("-", 1)[0])
        src = orig[r["id"].split("-", 1)[1]]
        n0 = num_frames(round(float(src["duration"]) * 16000))  # the source segment's frames
        assert abs(int(r["n_frames"]) - round(n0 / f)) <= 1, (r["id"], r["n_frames"], n0, f)
        assert r["speaker"].startswith(f"sp{f:g}-")
    cfg = load_data_config(audio_data)
    assert speed_perturbed_split(cfg, "train", [1.1, 0.9, 1.0]) == "train_sp"
    with pytest.raises(SpeedPerturbError, match="speed_perturb.py"):
        speed_perturbed_split(cfg, "train", [0.8, 1.0, 1.2])
    with pytest.raises(SpeedPerturbError, match="no speed-perturbed copy of split 'dev'"):
        speed_perturbed_split(cfg, "dev", [0.9, 1.0, 1.1])
    # a rerun with the same factors is a no-op; other factors reuse the cached copies
    before = (audio_data / "train_sp.tsv").read_text()
    assert build_speed_perturbed(audio_data, "train", (0.9, 1.0, 1.1), progress=False)["reused"]
    rep2 = build_speed_perturbed(audio_data, "train", (0.9, 1.1), progress=False)
    assert rep2["from_cache"] == 2 * len(orig) and rep2["extracted"] == 0
    assert len(read_manifest(audio_data / "train_sp.tsv")) == 2 * len(orig)
    rep3 = build_speed_perturbed(audio_data, "train", (0.9, 1.0, 1.1), progress=False)
    assert "reused" not in rep3 and (audio_data / "train_sp.tsv").read_text() == before

    # the trainer trains on the copies; the ASR view carries them along
    from mmst.corpora.asr_view import make_asr_view
    from mmst.training.trainer import training_augmentation

    split, aug = training_augmentation(_tiny_cfg("data.augment.speed_perturb=[0.9,1.0,1.1]"), audio_data)
    assert split == "train_sp" and aug is None
    with pytest.raises(SpeedPerturbError):
        training_augmentation(_tiny_cfg("data.augment.speed_perturb=[0.95,1.0]"), audio_data)
    view = make_asr_view(audio_data, audio_data.parent / "asr")
    assert view["splits"]["train_sp"]["utterances"] == 3 * len(orig)
    ds = MultiwayDataset(audio_data.parent / "asr", "train_sp", vocab_mode="per_lang")
    assert ds.features(len(ds) - 1).shape[0] == int(ds.rows[-1]["n_frames"])
