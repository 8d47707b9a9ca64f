"""Tests for the training loop (mmst.training.trainer / step / strategy / cli).

The DATA directory is the synthetic feature corpus of tests/fixtures_data.py (de, es). Models are tiny
(d=48) so every test runs in seconds on one CPU thread; the end-to-end BLEU test is marked slow.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mmst.training.checkpoint import VocabMismatchError, load_checkpoint
from mmst.training.config import load_config
from mmst.training.trainer import TrainingDivergedError, build_trainer

TINY = ["num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false", "data.max_tokens=1500",
        "optim.warmup_updates=5", "valid.bleu_subset=4", "model.overrides.d_model=48",
        "model.overrides.encoder_layers=1", "model.overrides.decoder_layers=1", "model.overrides.ffn_dim=64",
        "model.overrides.conv_channels=48", "model.overrides.attention_heads=2"]


def _cfg(*extra: str):
    return load_config(None, [*TINY, *extra])


class _NaNCriterion:
    """Wraps a criterion; returns a NaN loss on the given call numbers (or always)."""

    def __init__(self, inner, bad_calls=None):
        self.inner, self.bad, self.calls = inner, bad_calls, 0

    def __call__(self, out, batch):
        loss, st = self.inner(out, batch)
        if self.bad is None or self.calls in self.bad:
            loss = loss * float("nan")
        self.calls += 1
        return loss, st


def test_nan_updates_are_skipped_and_counted(tiny_feature_data, tmp_path):
    tr = build_trainer(_cfg("optim.max_update=6", "valid.interval_updates=0"), tiny_feature_data, tmp_path)
    tr.criterion = _NaNCriterion(tr.criterion, bad_calls={2, 3})
    state = tr.train()
    assert state.num_updates == 6 and state.nan_skipped == 2 and state.consecutive_nan == 0
    assert all(torch.isfinite(p).all() for p in tr.model.parameters())
    ck = load_checkpoint(tmp_path / "checkpoint_last.pt")
    assert ck["train_state"]["nan_skipped"] == 2 and ck["scheduler"]["num_updates"] == 6
    recs = [json.loads(x) for x in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    nan = [r for r in recs if r["kind"] == "nan"]
    assert len(nan) == 2 and nan[0]["batch_ids"]


def test_nan_in_a_row_stops_with_batch_ids(tiny_feature_data, tmp_path):
    tr = build_trainer(_cfg("optim.max_update=6", "optim.max_consecutive_nan=3", "optim.update_freq=2"),
                       tiny_feature_data, tmp_path)
    tr.criterion = _NaNCriterion(tr.criterion)
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    with pytest.raises(TrainingDivergedError, match="3 consecutive updates") as e:
        tr.train()
    assert "train_" in str(e.value)  # names the utterance ids
    assert tr.state.num_updates == 0
    assert all(torch.equal(before[k], v) for k, v in tr.model.state_dict().items())  # nothing applied


def test_multi_k_and_separate_arch(tiny_feature_data, tmp_path):
    cfg = _cfg("optim.max_update=4", "waitk_lagging=[1,2,offline]", "model.arch=separate", "model.vocab=per_lang",
               "criterion.ctc_weight=0.3", "valid.interval_updates=2", "valid.bleu_waitk=[offline,2]",
               "optim.update_freq=2")
    tr = build_trainer(cfg, tiny_feature_data, tmp_path)
    ks = {tr.waitk.sample(u, j) for u in range(50) for j in range(2)}
    assert ks == {1, 2, None}
    tr.train()
    valid = [json.loads(x) for x in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    valid = [r for r in valid if r["kind"] == "valid"]
    assert {"loss_de", "loss_es", "bleu_de_offline", "bleu_es_k2"} <= set(valid[-1])
    assert (tmp_path / "checkpoint_best.pt").is_file()


def test_data_ranks_draw_the_wait_k_one_process_draws_for_the_same_micro_batches():
    from types import SimpleNamespace

    from mmst.training.distributed import TrainerDDP
    from mmst.training.loop import WaitkSampler

    ks = [1, 2, 3, 4, 5, "offline"]
    # one process, 4 micro-batches an update, over an epoch of batches 0..7
    one = WaitkSampler(ks, 1)
    want = {4 * u + i: one.sample(u, i) for u in range(2) for i in range(4)}
    # two data ranks of 2 micro-batches each, sharded by the distributed modes' own rule
    got = {}
    for rank in (0, 1):
        tr = SimpleNamespace(waitk=WaitkSampler(ks, 1), train_iter=SimpleNamespace(batches_for_epoch=lambda e: list(range(8))))
        TrainerDDP._shard(tr, rank, 2)
        shard = tr.train_iter.batches_for_epoch(1)
        got.update({shard[2 * u + j]: tr.waitk.sample(u, tr.waitk.index_of(j)) for u in range(2) for j in range(2)})
    assert got == want and len(set(want.values())) > 1


def test_stop_time_hours_is_cumulative_across_resume(tiny_feature_data, tmp_path):
    # 1e-9 h = 3.6 us: the first update always takes longer, so the run stops right after it
    tr = build_trainer(_cfg("optim.max_update=50", "optim.stop_time_hours=1e-9", "valid.interval_updates=0"),
                       tiny_feature_data, tmp_path)
    state = tr.train()
    assert state.num_updates == 1 and state.train_time_s > 0
    first = load_checkpoint(tmp_path / "checkpoint_last.pt")["train_state"]["train_time_s"]
    assert first == state.train_time_s
    tr2 = build_trainer(_cfg("optim.max_update=3", "valid.interval_updates=0"), tiny_feature_data, tmp_path)
    assert tr2.state.train_time_s == first  # restored, not reset
    state2 = tr2.train()
    assert state2.num_updates == 3 and state2.train_time_s > first
    logs = [json.loads(x) for x in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    train = [r for r in logs if r["kind"] == "train"]
    assert train and all("train_time_s" in r for r in train)
    # padding share of the padded (B x T) frames, and the share of wall time spent waiting for batches
    assert all(0.0 <= r["padding_pct"] < 100.0 and 0.0 <= r["loader_wait_pct"] <= 100.0 for r in train)


def test_resume_checks_languages_and_vocab(tiny_feature_data, tmp_path):
    tr = build_trainer(_cfg("optim.max_update=2", "valid.interval_updates=0"), tiny_feature_data, tmp_path)
    tr.train()
    from mmst.data.dataset import LanguageMismatchError

    with pytest.raises(LanguageMismatchError, match=r"\['de'\].*checkpoint model"):
        build_trainer(_cfg("optim.max_update=4", "data.tgt_langs=[de]"), tiny_feature_data, tmp_path)
    ck = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)
    ck["vocab"]["tgt"]["de"]["sha256"] = "0" * 64
    torch.save(ck, tmp_path / "checkpoint_last.pt")
    with pytest.raises(VocabMismatchError, match="'de'"):
        build_trainer(_cfg("optim.max_update=4"), tiny_feature_data, tmp_path)


def _cli(data: Path, save: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mmst.training.cli", "--data", str(data), "--save-dir", str(save),
            "--log-level", "WARNING", *TINY, "logging.tensorboard=true", "optim.update_freq=2",
            "waitk_lagging=[1,3,offline]", "criterion.ctc_weight=0.2", "model.overrides.dropout=0.1",
            "checkpoint.save_interval_updates=3", "checkpoint.keep_last=2", "valid.interval_updates=10", *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


# training-time augmentation on: its per-utterance draws must resume exactly too (time warp included)
AUGMENT = ("data.augment.specaugment_policy=LD", "data.augment.specaugment={time_warp_W: 5}")


@pytest.mark.slow
def test_sigkill_resume_is_bit_identical(tiny_feature_data, tmp_path):
    """Slow: an uninterrupted reference run and a run killed with SIGKILL and resumed, in subprocesses."""
    n = 45
    ref, run = tmp_path / "ref", tmp_path / "run"
    subprocess.run(_cli(tiny_feature_data, ref, f"optim.max_update={n}", *AUGMENT), check=True, env=_env(),
                   timeout=120)
    proc = subprocess.Popen(_cli(tiny_feature_data, run, f"optim.max_update={n}", *AUGMENT), env=_env())
    deadline = time.time() + 120
    killed_at = None
    while time.time() < deadline and proc.poll() is None:
        if (run / "checkpoint_6.pt").exists():
            os.kill(proc.pid, signal.SIGKILL)
            killed_at = time.time()
            break
        time.sleep(0.002)
    proc.wait(timeout=60)
    assert killed_at is not None and proc.returncode == -signal.SIGKILL, "run finished before it could be killed"
    u_killed = load_checkpoint(run / "checkpoint_last.pt")["train_state"]["num_updates"]
    assert 6 <= u_killed < n  # last is written before the numbered copy
    subprocess.run(_cli(tiny_feature_data, run, f"optim.max_update={n}", *AUGMENT), check=True, env=_env(),
                   timeout=120)
    a = load_checkpoint(ref / "checkpoint_last.pt")
    b = load_checkpoint(run / "checkpoint_last.pt")
    assert a["config"]["data"]["augment"]["specaugment_policy"] == "LD"
    assert a["train_state"]["num_updates"] == b["train_state"]["num_updates"] == n
    assert a["data_iterator"] == b["data_iterator"] and a["scheduler"] == b["scheduler"]
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    for i in sa:
        for k in sa[i]:
            assert torch.equal(torch.as_tensor(sa[i][k]), torch.as_tensor(sb[i][k]))
    assert torch.equal(a["rng"]["torch"], b["rng"]["torch"])
    # rotation kept the 2 most recent numbered checkpoints; no temporary files left
    names = sorted(p.name for p in run.iterdir() if p.suffix == ".pt")
    assert names == sorted(["checkpoint_42.pt", "checkpoint_45.pt", "checkpoint_best.pt", "checkpoint_last.pt"])
    assert not [p for p in run.iterdir() if ".tmp-" in p.name]
    assert (run / "tensorboard").is_dir()


@pytest.mark.slow
def test_tiny_training_reaches_training_set_bleu(tiny_e2e_data, tmp_path):
    """After a fixed tiny training run, training-set BLEU exceeds a threshold an untrained model
    can't reach. Real pipeline: synthesize_corpus.py --grammar --difficulty easy (espeak-ng) ->
    prep_multiway.py -> mmst-train components; ~97 BLEU after 300 updates, untrained ~1.

    Slow: it trains until the model reproduces its training sentences; fewer updates would not separate it
    from an untrained model."""
    threshold = 60.0
    cfg = load_config(None, ["num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false",
                             "data.valid_subset=train", "data.max_tokens=3000", "optim.lr=3e-3",
                             "optim.warmup_updates=50", "optim.max_update=300", "valid.interval_updates=0",
                             "valid.bleu_subset=40", "valid.bleu_waitk=[offline,3]", "model.overrides.d_model=96",
                             "model.overrides.encoder_layers=2", "model.overrides.decoder_layers=2",
                             "model.overrides.ffn_dim=192", "model.overrides.conv_channels=96",
                             "model.overrides.dropout=0.0", "waitk_lagging=[3,offline]"])
    tr = build_trainer(cfg, tiny_e2e_data, tmp_path)
    untrained = tr.validator.run(tr.model)
    assert untrained["bleu"] < 5.0
    t0 = time.time()
    tr.train()
    res = tr.state.last_valid
    print(f"untrained BLEU {untrained['bleu']:.1f} -> trained {res['bleu']:.1f} in {time.time() - t0:.0f}s")
    for lang in tr.model.tgt_langs:
        for k in ("offline", "k3"):
            assert res[f"bleu_{lang}_{k}"] > threshold, res
    assert math.isfinite(res["loss"])


def test_every_joint_vocab_model_knows_all_language_tags(tiny_feature_data, tmp_path):
    """A bilingual separate-decoder model on the joint vocab must still never write any <lang:xx>."""
    from mmst.data.vocab import Vocab

    tr = build_trainer(_cfg("model.arch=separate", "model.vocab=joint", "data.tgt_langs=[de]", "optim.max_update=1"),
                       tiny_feature_data, tmp_path)
    joint = Vocab.load(next(tiny_feature_data.glob("spm_joint*.model")))
    tags = {joint.lang_tag_id(lang) for lang in joint.langs}
    assert len(tags) == 2  # de and es
    assert tags <= set(tr.model.never_generate_ids())
    assert tr.model.start_token_id("de") == 0  # the separate model still starts with bos


def test_resume_removes_stale_temp_files_and_later_log_records(tiny_feature_data, tmp_path):  # noqa: F811
    """After a crash: ``checkpoint_*.pt.tmp-PID`` of the dead process is removed, and train_log.jsonl
    loses the records past the resumed checkpoint's update (no update logged twice)."""
    tr = build_trainer(_cfg("optim.max_update=4", "valid.interval_updates=0", "logging.log_interval=1",
                            "logging.tensorboard=true", "checkpoint.save_interval_updates=2"),
                       tiny_feature_data, tmp_path)
    tr.train()
    # what a run killed at update 6 during its save would have left behind
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"checkpoint_6.pt.tmp-{dead.pid}"
    stale.write_bytes(b"partial")
    ours = tmp_path / f"checkpoint_last.pt.tmp-{os.getpid()}"  # a live writer's file is kept
    ours.write_bytes(b"in progress")
    with open(tmp_path / "train_log.jsonl", "a") as fh:
        for u in (5, 6):
            fh.write(json.dumps({"kind": "train", "update": u, "time": 0.0, "loss": 1.0}) + "\n")
        fh.write('{"kind": "train", "upd')  # line cut by the kill
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(tmp_path / "tensorboard"))
    for u in (5, 6):
        w.add_scalar("train/loss", 1.0, u)
    w.close()
    tr2 = build_trainer(_cfg("optim.max_update=6", "valid.interval_updates=0", "logging.log_interval=1",
                             "logging.tensorboard=true", "checkpoint.save_interval_updates=2"),
                        tiny_feature_data, tmp_path)
    assert not stale.exists() and ours.exists()
    ours.unlink()
    tr2.train()
    logs = [json.loads(x) for x in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    train_updates = [r["update"] for r in logs if r["kind"] == "train"]
    assert train_updates == [1, 2, 3, 4, 5, 6]
    assert all(r.get("loss") != 1.0 for r in logs if r["kind"] == "train")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(tmp_path / "tensorboard"))
    ea.Reload()
    points = [(e.step, e.value) for e in ea.Scalars("train/loss")]
    assert [st for st, _ in points] == [1, 2, 3, 4, 5, 6]  # the killed run's 5 and 6 were purged
    assert all(v != 1.0 for _, v in points)


def test_cli_distributed_error_is_one_line_and_overrides_intermix(tiny_feature_data, tmp_path, monkeypatch, capsys):  # noqa: F811
    """A DistributedError becomes one ``mmst-train: error:`` line (exit 1); overrides may follow a flag
    that follows an override."""
    import mmst.training.build as build_mod
    import mmst.training.strategy as strategy_mod
    from mmst.distributed.env import DistributedError
    from mmst.training import cli

    seen = {}

    def fake_build_trainer(cfg, data, save_dir, strategy=None):
        seen["cfg"] = cfg
        raise DistributedError("rank 1: all_reduce timed out after 20 s (peer rank 0 gone)")

    monkeypatch.setattr(build_mod, "build_trainer", fake_build_trainer)
    monkeypatch.setattr(strategy_mod, "build_strategy", lambda name, **options: None)
    rc = cli.main(["--data", str(tiny_feature_data), "--save-dir", str(tmp_path), "optim.lr=0.001",
                   "--dist-timeout", "20", "seed=7", "--max-update", "3", "optim.max_update=5"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.strip().splitlines() == [
        "mmst-train: error: DistributedError: rank 1: all_reduce timed out after 20 s (peer rank 0 gone)"]
    cfg = seen["cfg"]
    assert cfg.optim.lr == 0.001 and cfg.seed == 7 and cfg.distributed.options["dist_timeout"] == 20
    assert cfg.optim.max_update == 5  # positional overrides win over alias flags
