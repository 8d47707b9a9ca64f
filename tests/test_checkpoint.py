"""Tests for mmst.training.{checkpoint,average,pretrained,optim}."""

from __future__ import annotations

import argparse
import logging
import math
import random

import numpy as np
import pytest
import torch

from mmst.training.average import average_checkpoints
from mmst.training.average import main as average_main
from mmst.training.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    CheckpointManager,
    VocabMismatchError,
    atomic_save,
    check_vocab_compat,
    get_rng_state,
    load_checkpoint,
    set_rng_state,
)
from mmst.training.optim import InverseSqrtSchedule, build_optimizer
from mmst.training.pretrained import load_pretrained_encoder, map_fairseq_encoder_key


def _ckpt(value: float, update: int = 1) -> dict:
    return {"format": CHECKPOINT_FORMAT, "version": 1, "model": {"w": torch.full((2, 3), value),
            "n": torch.tensor(update)}, "train_state": {"num_updates": update}, "config": {"seed": 1}}


def test_atomic_save_keeps_old_file_on_crash(tmp_path, monkeypatch):
    p = tmp_path / "checkpoint_last.pt"
    atomic_save(_ckpt(1.0), p)
    real_save = torch.save

    def crashing_save(obj, fh, *a, **k):
        fh.write(b"partial garbage")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crashing_save)
    with pytest.raises(OSError):
        atomic_save(_ckpt(2.0), p)
    monkeypatch.setattr(torch, "save", real_save)
    assert float(load_checkpoint(p)["model"]["w"][0, 0]) == 1.0  # old content intact
    assert [x.name for x in tmp_path.iterdir()] == ["checkpoint_last.pt"]  # no tmp left


def test_load_rejects_foreign_and_missing(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "nope.pt")
    torch.save({"model": {}}, tmp_path / "x.pt")
    with pytest.raises(CheckpointError, match="not an mmst checkpoint"):
        load_checkpoint(tmp_path / "x.pt")
    torch.save({"format": CHECKPOINT_FORMAT, "args": argparse.Namespace(a=1)}, tmp_path / "y.pt")
    with pytest.raises(CheckpointError, match="weights_only=True"):
        load_checkpoint(tmp_path / "y.pt")


def test_rng_state_roundtrip_weights_only(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    np.random.normal()  # has_gauss
    st = get_rng_state()
    atomic_save({"rng": st}, tmp_path / "r.pt")
    ref = (random.random(), float(np.random.normal()), float(torch.rand(1)))
    loaded = torch.load(tmp_path / "r.pt", weights_only=True)["rng"]
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    set_rng_state(loaded)
    assert (random.random(), float(np.random.normal()), float(torch.rand(1))) == ref


def test_manager_rotation_last_best(tmp_path):
    m = CheckpointManager(tmp_path, keep_last=2)
    for u in (10, 20, 30):
        m.save(_ckpt(float(u), u), u, best=(u == 20))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["checkpoint_20.pt", "checkpoint_30.pt", "checkpoint_best.pt", "checkpoint_last.pt"]
    assert int(load_checkpoint(m.last_path)["train_state"]["num_updates"]) == 30
    assert int(load_checkpoint(m.best_path)["train_state"]["num_updates"]) == 20


def test_vocab_compat():
    fp = {"tgt": {"de": {"path": "a.model", "size": 100, "sha256": "aa"}}, "src": {"path": "s", "size": 5, "sha256": "s"}}
    check_vocab_compat(fp, fp)
    bad = {"tgt": {"de": {"path": "b.model", "size": 120, "sha256": "bb"}}, "src": fp["src"]}
    with pytest.raises(VocabMismatchError, match="'de'.*a.model.*b.model"):
        check_vocab_compat(fp, bad)
    with pytest.raises(VocabMismatchError, match="'de'"):
        check_vocab_compat(fp, {"tgt": {}, "src": None})


def test_average(tmp_path, capsys):
    for u, v in ((1, 1.0), (2, 2.0), (3, 6.0)):
        atomic_save(_ckpt(v, u), tmp_path / f"checkpoint_{u}.pt")
    avg = average_checkpoints([tmp_path / "checkpoint_1.pt", tmp_path / "checkpoint_2.pt"])
    assert torch.allclose(avg["model"]["w"], torch.full((2, 3), 1.5))
    assert int(avg["model"]["n"]) == 2 and avg["train_state"]["num_updates"] == 2
    assert average_main(["--save-dir", str(tmp_path), "--last", "2", "--out", str(tmp_path / "avg.pt")]) == 0
    out = load_checkpoint(tmp_path / "avg.pt")
    assert torch.allclose(out["model"]["w"], torch.full((2, 3), 4.0))
    assert len(out["averaged_from"]) == 2
    assert average_main(["--inputs", str(tmp_path / "checkpoint_3.pt"), "--out", str(tmp_path / "o.pt")]) == 0
    assert average_main(["--save-dir", str(tmp_path), "--last", "9", "--out", str(tmp_path / "o.pt")]) == 1
    assert "found 3" in capsys.readouterr().err
    atomic_save({**_ckpt(1.0), "model": {"w": torch.zeros(3, 3), "n": torch.tensor(1)}}, tmp_path / "odd.pt")
    with pytest.raises(CheckpointError, match="shape"):
        average_checkpoints([tmp_path / "checkpoint_1.pt", tmp_path / "odd.pt"])


def test_inverse_sqrt_schedule():
    p = torch.nn.Parameter(torch.zeros(2))
    opt = build_optimizer([p], lr=1e-3, betas=[0.9, 0.98])
    s = InverseSqrtSchedule(opt, lr=1e-3, warmup_updates=10, warmup_init_lr=0.0)
    assert opt.param_groups[0]["lr"] == 0.0
    lrs = [s.step() for _ in range(40)]
    assert lrs[4] == pytest.approx(5e-4) and lrs[9] == pytest.approx(1e-3)
    assert lrs[39] == pytest.approx(1e-3 * math.sqrt(10 / 40))
    s2 = InverseSqrtSchedule(opt, lr=1e-3, warmup_updates=10)
    s2.load_state_dict(s.state_dict())
    assert s2.get_last_lr() == s.get_last_lr() == opt.param_groups[0]["lr"]


# ------------------------------------------------------------------------------------ pretrained


TINY_MODEL = dict(arch="separate", langs=["de"], vocab_size=20, decoder_layers=1, conv_channels=32, attention_heads=2)


def _fairseq_state(model) -> dict:
    """A fairseq s2t_transformer-style state dict with the encoder of ``model`` renamed."""
    sd = {}
    for k, v in model.state_dict().items():
        if k.startswith("encoder.layers."):
            sd["encoder.transformer_layers." + k[len("encoder.layers."):]] = v.clone() + 1.0
        elif k.startswith("encoder."):
            sd[k] = v.clone() + 1.0
    sd["encoder.embed_positions._float_tensor"] = torch.zeros(1)
    sd["decoder.embed_tokens.weight"] = torch.zeros(20, 32)
    return sd


def test_fairseq_key_mapping():
    assert map_fairseq_encoder_key("encoder.transformer_layers.3.self_attn.k_proj.weight") == \
        "encoder.layers.3.self_attn.k_proj.weight"
    assert map_fairseq_encoder_key("encoder.subsample.conv_layers.0.weight") == "encoder.subsample.conv_layers.0.weight"
    assert map_fairseq_encoder_key("encoder.layer_norm.bias") == "encoder.layer_norm.bias"
    assert map_fairseq_encoder_key("decoder.layers.0.fc1.weight") is None


def test_load_fairseq_encoder(tiny_model, tmp_path):
    src, dst = tiny_model(), tiny_model()
    path = tmp_path / "fairseq_asr.pt"
    torch.save({"args": argparse.Namespace(arch="s2t_transformer_s"), "model": _fairseq_state(src),
                "optimizer_history": [{"num_updates": 5}]}, path)
    rep = load_pretrained_encoder(dst, path)
    assert rep.source == "fairseq" and rep.missing == []
    assert set(rep.not_loaded) == {"encoder.embed_positions._float_tensor", "decoder.embed_tokens.weight"}
    assert "decoder.embed_tokens.weight" in rep.summary()
    for k, v in src.state_dict().items():
        if k.startswith("encoder."):
            assert torch.equal(dst.state_dict()[k], v + 1.0)


class _Opaque:  # a class torch's weights_only unpickler refuses
    pass


def test_fairseq_unsafe_pickle_needs_opt_in(tiny_model, tmp_path, monkeypatch):
    src, dst = tiny_model(), tiny_model()
    path = tmp_path / "fairseq_cfg.pt"
    torch.save({"cfg": _Opaque(), "model": _fairseq_state(src)}, path)
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
    with pytest.raises(CheckpointError, match="allow_unsafe_pickle"):
        load_pretrained_encoder(dst, path)
    rep = load_pretrained_encoder(dst, path, allow_unsafe_pickle=True)
    assert rep.source == "fairseq" and rep.loaded
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    assert load_pretrained_encoder(tiny_model(), path).loaded


def test_load_own_encoder_and_shape_mismatch(tiny_model, tmp_path):
    src, dst = tiny_model(), tiny_model()
    atomic_save({"format": CHECKPOINT_FORMAT, "model": src.state_dict()}, tmp_path / "ours.pt")
    rep = load_pretrained_encoder(dst, tmp_path / "ours.pt")
    assert rep.source == "mmst" and all(k.startswith("decoders.") or k.startswith("ctc") or "decoder" in k
                                        for k in rep.not_loaded)
    assert torch.equal(dst.encoder.layer_norm.weight, src.encoder.layer_norm.weight)
    sd = _fairseq_state(src)
    sd["encoder.layer_norm.weight"] = torch.zeros(7)
    torch.save({"model": sd}, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="shape"):
        load_pretrained_encoder(dst, tmp_path / "bad.pt")


def test_pretrained_encoder_log_is_one_line_per_checkpoint(tiny_model, tmp_path, caplog):
    """Loading an ST checkpoint's encoder: one INFO line with the count of unused keys and their prefixes
    (decoder and CTC keys are expected), each unused key at DEBUG only, and a WARNING naming a missing
    encoder parameter."""
    src, dst = tiny_model(arch="separate"), tiny_model(arch="separate")
    state = src.state_dict()
    atomic_save({"format": CHECKPOINT_FORMAT, "model": state}, tmp_path / "ours.pt")
    unused = [k for k in state if not k.startswith("encoder.")]
    prefixes = sorted({k.split(".")[0] + ".*" for k in unused})
    with caplog.at_level(logging.INFO, logger="mmst.training.pretrained"):
        rep = load_pretrained_encoder(dst, tmp_path / "ours.pt")
    records = [r for r in caplog.records if r.name == "mmst.training.pretrained"]
    assert len(unused) > 5 and sorted(rep.not_loaded) == sorted(unused)
    assert [r.levelno for r in records] == [logging.INFO]
    line = records[0].getMessage()
    assert f"{len(unused)} checkpoint keys not used" in line
    for p in prefixes:
        assert f"{p} {sum(k.startswith(p[:-1]) for k in unused)}" in line
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="mmst.training.pretrained"):
        load_pretrained_encoder(dst, tmp_path / "ours.pt")
    assert sum("not used:" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG) == len(unused)
    caplog.clear()
    del state["encoder.layer_norm.bias"]
    atomic_save({"format": CHECKPOINT_FORMAT, "model": state}, tmp_path / "partial.pt")
    with caplog.at_level(logging.INFO, logger="mmst.training.pretrained"):
        load_pretrained_encoder(dst, tmp_path / "partial.pt")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "1 encoder parameters missing" in warnings[0] and "encoder.layer_norm.bias" in warnings[0]
