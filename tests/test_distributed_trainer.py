"""mmst-train --distributed {ddp,dropcompute,param-server} end to end on the tiny feature corpus (2-4 CPU
ranks, gloo): logging of each mode's numbers, parameter-server training past several liveness checks,
restart from checkpoint_last.pt under torchrun, a dead parameter-server worker, a dead server.
Each rank is a process of its own that runs mmst-train's ``main``: forked from the tests' fork server
(:func:`_launch_by_hand`, no torchrun agent; seconds of imports saved a rank) unless torchrun itself is what
is tested (the restart test: fresh interpreters under ``torchrun``). Every launch has a wall-clock bound,
generous for a heavily loaded machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from distributed_fixtures import cli_rank, launch

from mmst.distributed.env import find_free_port
from mmst.training.checkpoint import load_checkpoint

TINY = ["num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false", "data.max_tokens=1500",
        "optim.warmup_updates=2", "valid.bleu_subset=0", "model.overrides.d_model=32",
        "model.overrides.encoder_layers=1", "model.overrides.decoder_layers=1", "model.overrides.ffn_dim=32",
        "model.overrides.conv_channels=32", "model.overrides.attention_heads=2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _cli(data: Path, save: Path, mode: str, *extra: str) -> list[str]:
    """mmst-train's arguments (without the program)."""
    return ["--data", str(data), "--save-dir", str(save), "--distributed", mode, *TINY, *extra]


def _torchrun(nproc: int, args: list[str], timeout: float, restarts: int = 0) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--max-restarts", str(restarts), "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{find_free_port()}", "-m", "mmst.training.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)


def _launch_by_hand(nproc: int, args: list[str], timeout: float) -> list[dict]:
    """Start ``nproc`` ranks of mmst-train as independent processes with the torchrun environment variables (no
    torchrun agent: a dead rank does not take the others down), forked from the tests' fork server
    (:func:`distributed_fixtures.launch`, :func:`distributed_fixtures.cli_rank`: each a process of its own,
    with mmst-train's own logging and exit status, without the seconds of imports a fresh interpreter
    spends). Returns per rank ``{"rc", "out", "exit_s"}`` (stdout and stderr together; seconds after the
    start); kills any rank still running after ``timeout``."""
    with tempfile.TemporaryDirectory() as logs:
        res = launch([logs, *args], nproc, timeout_s=timeout, target=cli_rank)
        out = []
        for r in range(nproc):
            log = Path(logs) / f"rank{r}.log"
            text = log.read_text() if log.is_file() else ""
            if "traceback" in res[r]:  # the launcher's own report (not mmst-train's)
                text += res[r]["traceback"]
            out.append({"rc": res[r].get("rc", res[r]["exitcode"]), "out": text, "exit_s": res[r]["exit_s"]})
        return out


def _outputs(res: list[dict]) -> str:
    """Every rank ended with status 0: their outputs, one after the other."""
    assert all(r["rc"] == 0 for r in res), "".join(f"rank {i}: rc {r['rc']}\n{r['out'][-3000:]}\n" for i, r in enumerate(res))
    return "".join(r["out"] for r in res)


def _records(save: Path, kind: str) -> list[dict]:
    lines = (save / "train_log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


@pytest.mark.slow
def test_dropcompute_logs_its_numbers_once(tiny_feature_data, tmp_path):
    # (DDP's and the parameter server's numbers: tests/test_bench_smoke.py::test_bench_stragglers_mmst_quick)
    """A DropCompute job of two mmst-train ranks (forked, no torchrun agent: the agent is not what is tested)."""
    save = tmp_path / "run"
    extra = ["optim.update_freq=2", "optim.max_update=4", "logging.log_interval=2", "valid.interval_updates=2",
             "checkpoint.save_interval_updates=0", "--straggler-delay", "lognormal:cv=0.5",
             "distributed.options.straggler_base_ms=5", "--compute-threshold", "auto",
             "distributed.options.auto_steps=2", "distributed.options.auto_warmup_steps=0", "logging.tensorboard=true"]
    out = _outputs(_launch_by_hand(2, _cli(tiny_feature_data, save, "dropcompute", *extra), timeout=600))
    assert out.count("mmst-train: done at update 4") == 1  # rank 1 stays quiet
    assert out.count("valid @2:") == 1 and out.count("valid @4:") == 1
    assert load_checkpoint(save / "checkpoint_last.pt")["train_state"]["num_updates"] == 4
    train = _records(save, "train")
    assert [r["update"] for r in train] == [2, 4]
    for r in train:
        assert 0.0 <= r["dc_drop_rate"] <= 1.0
        assert r["dc_compute_s_max"] >= r["dc_compute_s"] > r["dc_delay_s"] > 0  # delays are part of compute
        # dc_step_s is rank 0's step, dc_compute_s the mean compute over ranks: a rank that started its step
        # earlier can compute longer than rank 0's whole step, so the two are not ordered
        assert r["dc_step_s_max"] >= r["dc_step_s"] > 0
        assert "dc_tau_s" in r and r["dc_overshoot_s"] >= 0 and r["dc_overshoot_s_slowest"] >= 0
    # tau is chosen once, at the end of the 2 recorded updates: one tau_info event with the model's predictions
    infos = [e for e in _records(save, "event") if "tau_info" in e]
    assert len(infos) == 1 and infos[0]["update"] == 2, infos
    info = infos[0]["tau_info"]
    assert 0 <= info["drop_rate"] <= 1 and info["speedup"] > 0 and info["sync_step_s"] > 0 and info["tau_s"] > 0
    assert out.count("DropCompute auto threshold after update 2") == 1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(save / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/dc_drop_rate", "train/dc_compute_s_max", "train/dc_step_s"} <= tags


@pytest.mark.slow
def test_param_server_trains_across_liveness_checks(tiny_feature_data, tmp_path):
    # W = 3 workers; each push sleeps >= 250 ms, so 30 updates of 3 pushes last >~ 7.5 s > 3 x worker_timeout:
    # the server checks liveness many times, and every worker must stay alive (heartbeats running). The 2 s
    # timeout is 4 heartbeats (0.5 s): a shorter one would make a loaded machine's late heartbeat a "lost" worker.
    """Slow: it must outlast several worker timeouts (7.5 s of pushes; 3 workers + server, forked ranks)."""
    save, updates, wt = tmp_path / "run", 30, 2.0
    res = _launch_by_hand(4, _cli(tiny_feature_data, save, "param-server", "optim.update_freq=1",
                                  f"optim.max_update={updates}", "logging.log_interval=10", "valid.interval_updates=10",
                                  "checkpoint.save_interval_updates=10", "--straggler-delay", "const",
                                  "distributed.options.straggler_base_ms=250",
                                  f"distributed.options.worker_timeout={wt}", "--dist-timeout", "30"), timeout=600)
    out = _outputs(res)
    assert "lost" not in out.replace("lost workers []", ""), out[-3000:]
    assert f"param-server: {updates * 3} pushes applied" in out  # one update = W pushes
    assert out.count(f"mmst-train: done at update {updates}") == 1
    ck = load_checkpoint(save / "checkpoint_last.pt")
    assert ck["train_state"]["num_updates"] == updates and ck["train_state"]["train_time_s"] >= 3 * wt
    assert (save / "checkpoint_best.pt").is_file() and (save / "checkpoint_20.pt").is_file()
    valid = [r["loss"] for r in _records(save, "valid")]
    assert len(valid) == 3 and valid[0] > valid[1] > valid[2]
    train = _records(save, "train")
    assert [r["update"] for r in train] == [10, 20, 30]
    for r in train:
        assert r["ps_live_workers"] == 3 and r["ps_pushes_per_s"] > 0
        # the pushes' numbers reach the server's log (nll and frames were 0.0 before they were sent along)
        assert r["loss"] > 0 and r["nll_loss"] > 0 and r["frames_per_s"] > 0
        assert r["ps_lr_scale"] == pytest.approx(1 / 3)  # lr_per_push per_worker (default): lr / W
        assert 0 <= r["ps_staleness"] <= r["ps_staleness_max"] <= 3 * (3 - 1) + 3  # SSP s = W by default


@pytest.mark.slow
def test_torchrun_restart_resumes_param_server_from_checkpoint_last(tiny_feature_data, tmp_path):
    # W = 1 (server + one worker): the fewest processes a parameter server has (each a fresh interpreter under
    # torchrun, twice). Worker 1 dies at the start of its update 5, after 5 pushes that the server applied (it
    # replied to each): the server has written checkpoint_3 and is waiting for push 6, so the restart resumes from
    # update 3 exactly (with more workers, the others' pushes may take the server to checkpoint 6 first)
    """Slow: two torchrun jobs (a killed one and its restart) of a server and a worker, each rank a fresh
    interpreter."""
    save = tmp_path / "run"
    p = _torchrun(2, _cli(tiny_feature_data, save, "param-server", "optim.update_freq=1", "optim.max_update=8",
                          "checkpoint.save_interval_updates=3", "valid.interval_updates=0",
                          "distributed.options.fail_at_update=5", "distributed.options.fail_rank=1",
                          "--dist-timeout", "20"), timeout=600, restarts=1)
    assert p.returncode == 0, p.stderr[-4000:]
    assert "injected failure at update 5" in p.stderr
    events = _records(save, "event")
    # one restart, from the last checkpoint written before the failure
    resumed = [e["update"] for e in events if "resumed_from" in e]
    assert len(resumed) == 1 and resumed[0] == 3, resumed
    assert load_checkpoint(save / "checkpoint_last.pt")["train_state"]["num_updates"] == 8


@pytest.mark.slow
def test_param_server_goes_on_without_a_dead_worker(tiny_feature_data, tmp_path):
    # worker 2 dies at its update 2; worker 1 goes on to its staleness bound (s = W = 2 pushes ahead of the dead
    # worker's clock) and waits there until the server declares worker 2 lost (2 s without a heartbeat), so the
    # loss is always detected while training goes on, whatever the delay of a push (10 ms)
    """A parameter-server job (server + 2 workers, forked ranks, no torchrun agent) in which a worker is killed.

    Slow: the server waits --worker-timeout (2 s) before it declares the dead worker lost."""
    save = tmp_path / "run"
    res = _launch_by_hand(3, _cli(tiny_feature_data, save, "param-server", "optim.update_freq=1",
                                  "optim.max_update=16", "valid.interval_updates=0",
                                  "checkpoint.save_interval_updates=0", "--straggler-delay", "const",
                                  "distributed.options.straggler_base_ms=10", "distributed.options.worker_timeout=2",
                                  "distributed.options.fail_at_update=2", "distributed.options.fail_rank=2",
                                  "--dist-timeout", "30"), timeout=600)
    assert res[2]["rc"] == 13
    assert res[0]["rc"] == 0 and res[1]["rc"] == 0, res[0]["out"][-3000:] + res[1]["out"][-2000:]
    assert "worker 2 lost" in res[0]["out"]
    lost = [e for e in _records(save, "event") if "worker_lost" in e]
    assert len(lost) == 1 and lost[0]["worker_lost"] == 2 and lost[0]["update"] < 16
    assert load_checkpoint(save / "checkpoint_last.pt")["train_state"]["num_updates"] == 16


@pytest.mark.slow
def test_dead_param_server_gives_workers_a_clear_error(tiny_feature_data, tmp_path):
    """A parameter-server job (server + 2 workers, forked ranks, no torchrun agent) whose server dies: each worker
    ends with a clear error within --dist-timeout of the death (at once in practice: the connection closes)."""
    timeout_s = 20
    res = _launch_by_hand(3, _cli(tiny_feature_data, tmp_path / "run", "param-server", "optim.update_freq=1",
                                  "optim.max_update=50", "valid.interval_updates=0", "checkpoint.save_interval_updates=0",
                                  "distributed.options.fail_at_update=3", "distributed.options.fail_rank=0",
                                  "--dist-timeout", str(timeout_s)), timeout=600)
    assert res[0]["rc"] == 13
    for w in (1, 2):
        assert res[w]["rc"] == 1, res[w]["out"][-2000:]
        err = res[w]["out"]
        assert "mmst-train: error: DistributedError" in err and f"param-server exchange (worker {w}, push" in err
        assert res[w]["exit_s"] - res[0]["exit_s"] < timeout_s + 5  # within --dist-timeout of the death


def test_buffers_follow_the_model_device_under_gloo():
    """Two gloo ranks sharing one GPU: the group's default device is the CPU, the model is on the GPU; the
    strategy moves its buffers to the model's device (``meta`` stands in for the GPU here)."""
    import torch

    from mmst.distributed.env import DistEnv
    from mmst.training.distributed import TrainerDDP

    strat = TrainerDDP.__new__(TrainerDDP)
    strat.env = DistEnv(backend="gloo", device=torch.device("cpu"))
    trainer = type("T", (), {"model": torch.nn.Linear(2, 2, device="meta")})()
    strat._follow_model_device(trainer)
    assert strat.env.device == torch.device("meta")
    trainer.model = torch.nn.Linear(2, 2)
    strat._follow_model_device(trainer)
    assert strat.env.device == torch.device("cpu")


@pytest.mark.slow
@pytest.mark.xdist_group("distributed")
def test_two_torchrun_nodes_with_a_straggler_end_with_the_single_process_parameters(tiny_feature_data, tmp_path):
    # docs/distributed.md's multi-node command scaled down: 2 nodes x 1 process, c10d rendezvous on this machine,
    # DropCompute (tau = inf: nothing is dropped, so the result is defined) with rank 1 a persistent 2x straggler.
    # Rank r draws batches[r::2] of the seeded epoch order, so update u holds batches 2u and 2u+1 on the two nodes,
    # the same micro-batches as one process with update_freq 2, as long as both stay in the first epoch (at an
    # epoch's end the shards are cut to a common length, one process is not): 500 padded frames make 9 batches an
    # epoch, 3 updates use 6. Dropout 0 (each rank draws its own masks). Multi-k training as train_xs.yaml's: rank r's
    # j-th micro-batch draws its k at update-wide index 2j + r, as one process does (seed 1 draws k = 3, 2 in update 1
    # and 3, 4 in update 2; drawn per rank-local index, both ranks trained k = 3 and the gradient norms differed).
    """Slow: two torchrun launchers and their two ranks are four fresh interpreters that import torch; the
    single-process reference runs meanwhile."""
    same = ["optim.max_update=3", "logging.log_interval=1", "valid.interval_updates=0", "data.max_tokens=500",
            "checkpoint.save_interval_updates=0", "model.overrides.dropout=0", "waitk_lagging=[1,2,3,4,5,offline]"]
    two, one = tmp_path / "two_nodes", tmp_path / "one_process"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{find_free_port()}", "--rdzv-id", "mmst-two-nodes",
           "--max-restarts", "0", "-m", "mmst.training.cli",
           *_cli(tiny_feature_data, two, "dropcompute", *same, "optim.update_freq=1", "--compute-threshold", "inf",
                 "--slow-rank", "1:2", "--dist-timeout", "60")]
    nodes = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
             for _ in range(2)]
    try:
        _outputs(_launch_by_hand(1, ["--data", str(tiny_feature_data), "--save-dir", str(one), *TINY, *same,
                                     "optim.update_freq=2"], timeout=300))
        outs = [p.communicate(timeout=300)[0] for p in nodes]
    finally:
        for p in nodes:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(nodes, outs):
        assert p.returncode == 0, out[-3000:]
    train, ref = _records(two, "train"), _records(one, "train")
    assert [r["update"] for r in train] == [1, 2, 3] and {r["epoch"] for r in train + ref} == {1}
    assert all(r["dc_drop_rate"] == 0 for r in train) and sum(r["dc_delay_s"] for r in train) > 0  # the straggler ran
    # the global gradient norm of every update (after the all-reduce) is the single process's, to rounding
    assert [r["gnorm"] for r in train] == pytest.approx([r["gnorm"] for r in ref], rel=1e-6)
    got, want = (load_checkpoint(d / "checkpoint_last.pt") for d in (two, one))
    assert got["train_state"]["num_updates"] == want["train_state"]["num_updates"] == 3
    assert got["model"].keys() == want["model"].keys()
    # An attention key bias adds the same q.b to every score of a query, which softmax ignores: its gradient is 0
    # exactly, and what backward computes is rounding noise whose sign depends on the order of the sums (one
    # process adds micro-batch 2's gradient into micro-batch 1's, two ranks add whole gradients). AdamW divides by
    # the noise's own scale, so it steps those biases by up to lr in either direction: they are left out.
    # Every other parameter matches to 1e-6 (measured: 6e-8).
    noise = {k for k in want["model"] if k.endswith("k_proj.bias")}
    steps = 2 * sum(r["lr"] for r in ref)  # AdamW's bias-corrected step is below ~2 lr per update in the first ones
    assert noise and all((got["model"][k] - want["model"][k]).abs().max() <= steps for k in noise)
    for k in want["model"].keys() - noise:
        torch.testing.assert_close(got["model"][k], want["model"][k], rtol=0, atol=1e-6, msg=k)
