"""Multi-process tests of mmst.distributed on CPU with gloo (the wall-clock bounds leave room for a heavily
loaded 2-core machine).

Ranks are launched with :func:`distributed_fixtures.launch` (:func:`mmst.simulation.run.launch_local`: a free
port, the torchrun environment variables; the ranks forked from a fork server that has imported torch, so a
launch takes about a second) or with ``torchrun`` itself for the restart and multi-node tests.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from distributed_fixtures import (
    ddp_compute_rank,
    dropcompute_warmup_rank,
    launch,
    lingering_thread_rank,
    sleeping_rank,
)

from mmst.distributed.env import find_free_port
from mmst.distributed.param_server import flat_params
from mmst.simulation.toy import ToyTask

# meant for one worker to run the module and test_distributed_scaling.py: one fork server for all their launches
# (pytest-xdist 3.8's groups have no effect under pytest 9.2: xdist sets item._nodeid, which pytest 9 no longer
# reads; then each worker that runs some of these tests starts its own fork server, a few seconds once)
pytestmark = pytest.mark.xdist_group("distributed")

COMMON = ["--log-every", "0", "--eval-every", "0", "--dist-timeout", "20"]


def _ok(res):
    for r, v in res.items():
        assert "error" not in v, f"rank {r}: {v.get('error')}\n{v.get('traceback', '')}"


#: the DDP job of :func:`ddp_job`: steps, micro-batches per rank per step
DDP_STEPS, DDP_M = 3, 3


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory):
    """One DDP job of two gloo ranks (:data:`DDP_STEPS` steps of :data:`DDP_M` micro-batches): its final parameters
    are both the reference of the single-process test and of DropCompute with tau = inf (one launch, not two)."""
    out = tmp_path_factory.mktemp("ddp_job") / "ddp.pt"
    res = launch(["--distributed", "ddp", "--steps", str(DDP_STEPS), "--update-freq", str(DDP_M),
                  "--dump-params", str(out), *COMMON], 2, timeout_s=120)
    _ok(res)
    return out


@pytest.mark.slow
def test_ddp_two_ranks_match_single_process_global_batch(ddp_job):
    """A DDP job of two forked gloo ranks (shared with the DropCompute test) against a single-process
    reference."""
    steps, m, out = DDP_STEPS, DDP_M, ddp_job
    # single process, same global batch (2 ranks x m micro-batches), mean loss, same SGD
    torch.manual_seed(0)
    task = ToyTask()
    model = task.build_model(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    for step in range(steps):
        xs, ys = zip(*[task.batch(r, step, i) for r in range(2) for i in range(m)])
        loss, _ = task.loss_fn(model, (torch.cat(xs), torch.cat(ys)))
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch.testing.assert_close(torch.load(out), flat_params(model), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_dropcompute_tau_inf_gives_exactly_ddp_gradients(ddp_job, tmp_path):
    """A DropCompute job of two forked gloo ranks at tau = inf against the module's DDP job."""
    a, b = ddp_job, tmp_path / "dc.pt"
    args = ["--steps", str(DDP_STEPS), "--update-freq", str(DDP_M), *COMMON]
    res = launch(["--distributed", "dropcompute", "--compute-threshold", "inf", "--dump-params", str(b), *args], 2,
                 timeout_s=120)
    _ok(res)
    assert res[0]["drop_rate"] == 0.0
    assert torch.equal(torch.load(a), torch.load(b))  # bit-identical, not just close


@pytest.mark.slow
def test_dropcompute_drops_slow_rank_without_hanging_and_never_cuts_a_micro_batch():
    """A DropCompute job of two gloo ranks with one rank slowed down on purpose (in simulated time)."""
    res = launch(["--distributed", "dropcompute", "--compute-threshold", "0.03", "--update-freq", "4",
                  "--steps", "6", "--measure-from", "0", "--straggler-delay", "const", "--record-micro",
                  "--straggler-base-ms", "10", "--slow-rank", "1:4", "--virtual-clock", *COMMON], 2,
                 timeout_s=120)
    _ok(res)
    # Simulated time (--virtual-clock): only the injected delays take time, so the schedule is exact.
    # rank 0: 10 ms per micro-batch, checks at 0, 10, 20 ms pass => 3 computed (a 4th that starts at
    # 30 - rounding is stopped by the check between its forward and its backward). rank 1: 10 ms x 4 =
    # 40 ms, a third of it before the mid check (13.3 ms < 30: it goes on, a deadline cut would have
    # ended it at 30 ms), so its first micro-batch runs to 40 ms and the next check stops the step.
    micro = res[0]["micro_times_s"]  # (rank, step, micro-batch), NaN = not started
    for step in micro[1]:
        assert step[0] == pytest.approx(0.040, abs=1e-9) and all(math.isnan(x) for x in step[1:])
    for step in micro[0]:
        assert step[:3] == pytest.approx([0.010] * 3, abs=1e-9)
    assert res[0]["drop_rate"] == pytest.approx(0.5, abs=1e-12)  # 1 - (3 + 1) / 8, every step


def test_ddp_feeds_the_injector_pure_compute_not_the_wait_for_a_slower_rank():
    # scripted clock: forward 1 s, backward 2 s, all-reduce 5 s (waiting for the slowest rank); two micro-batches.
    # Micro-batch 1 (no_sync): 1 + 2; micro-batch 2 (the all-reduce): 1 + 2, its backward's 5 s wait left out,
    # so the running mean stays 3 (it was 0.9 * 3 + 0.1 * 8 = 3.5 with the wait); the step still takes 3 + 8 s
    res = launch(["1.0", "2.0", "5.0"], 1, target=ddp_compute_rank)
    _ok(res)
    assert res[0]["compute_mean_s"] == pytest.approx(3.0) and res[0]["step_time_s"] == pytest.approx(11.0)


def test_a_hung_rank_is_killed_at_the_deadline_with_its_stack():
    res = launch(["600"], 1, timeout_s=4, target=sleeping_rank)
    assert res[0]["error"] == "killed after 4s (hang)" and res[0]["exitcode"] == -9
    assert "stuck_here_forever" in res[0]["traceback"]  # where it hung, from faulthandler


def test_a_rank_that_wrote_its_result_ends_without_waiting_for_leftover_threads():
    # the non-daemon thread sleeps 600 s: multiprocessing's own exit path would join it until the deadline
    res = launch(["600"], 1, timeout_s=60, target=lingering_thread_rank)
    assert res[0]["done"] is True and res[0]["exitcode"] == 0 and res[0]["exit_s"] < 30


def test_auto_tau_skips_the_warm_up_steps():
    # micro-batches take 10 s in steps 1-2 and 1 s after (two a step, no communication time on the virtual clock):
    # with a warm-up of 2 steps, steps 3-5 are recorded and tau is chosen after step 5 from their synchronous step of
    # 2 x 1 s; recording from step 1 (no warm-up) would choose after step 3 from (20 + 20 + 2) / 3 s
    res = launch(["2", "3", "6"], 1, target=dropcompute_warmup_rank)
    _ok(res)
    assert res[0]["chosen"] == [False] * 4 + [True] * 2
    assert res[0]["tau_info"]["sync_step_s"] == pytest.approx(2.0)


@pytest.mark.slow
def test_dropcompute_auto_threshold_is_finite_agreed_and_respects_max_drop_rate():
    # W = 4 ranks, lognormal delays with CV 0.5, in simulated time (--virtual-clock): tau and the drops
    # depend on the seeded delays only, not on how loaded the machine is
    """A job of four gloo ranks that records step times, picks tau and trains with it."""
    cap, m, steps, rec = 0.15, 4, 16, 4
    res = launch(["--distributed", "dropcompute", "--compute-threshold", "auto", "--auto-steps", str(rec),
                  "--auto-warmup-steps", "0", "--update-freq", str(m), "--steps", str(steps), "--straggler-delay", "lognormal:cv=0.5",
                  "--straggler-base-ms", "15", "--max-drop-rate", str(cap), "--virtual-clock", *COMMON], 4,
                 timeout_s=120)
    _ok(res)
    taus = {res[r]["tau_s"] for r in range(4)}
    assert len(taus) == 1 and math.isfinite(taus.pop())  # chosen once, identical on every rank, not inf
    # simulated time: the all-reduce takes none; the forward's share is the injected delay's
    assert res[0]["tau_info"]["comm_s"] == 0.0 and 0 < res[0]["tau_info"]["fwd_fraction"] < 1
    # realised drop rate after the choice: within the cap plus the sampling error of the recorded
    # micro-batches (tau) and of the measured ones
    n_rec, n_meas = rec * 4 * m, (steps - rec) * 4 * m
    se = math.sqrt(cap * (1 - cap) * (1 / n_rec + 1 / n_meas))
    assert 0 < res[0]["drop_rate"] <= cap + 3 * se


@pytest.mark.slow
def test_dead_rank_gives_clear_error_within_timeout():
    """A job of two gloo ranks whose rank 1 dies; the survivor must end with a clear error within the timeout
    (it sees the closed connection at once)."""
    t0 = time.monotonic()
    res = launch(["--distributed", "ddp", "--steps", "50", "--fail-at-step", "3", "--fail-rank", "1",
                  "--log-every", "0", "--eval-every", "0", "--dist-timeout", "15"], 2, timeout_s=120)
    assert time.monotonic() - t0 < 50
    assert res[1]["exitcode"] == 13
    err = res[0].get("error", "")
    assert "DistributedError" in err and "peer rank probably died" in err and "rank 0/2" in err


@pytest.mark.slow
def test_param_server_survives_worker_death():
    """A parameter-server job (server + 2 workers) in which a worker dies.

    Slow: the server declares the dead worker lost after --worker-timeout (2 s); the live worker waits for that
    within its staleness bound."""
    res = launch(["--distributed", "param-server", "--steps", "20", "--fail-at-step", "3",
                  "--fail-rank", "2", "--worker-timeout", "2", "--straggler-delay", "const",
                  "--straggler-base-ms", "5", "--eval-every", "1", "--log-every", "0", "--dist-timeout", "30"], 3,
                 timeout_s=120)
    assert "error" not in res[0], res[0].get("traceback")
    assert res[0]["updates"] == 40 and res[0]["lost_workers"] == [2]
    assert res[0]["lost_at_update"]["2"] < 40  # detected while training went on (JSON keys are str)
    assert res[1]["exitcode"] == 0 and res[2]["exitcode"] == 13
    assert res[0]["final_loss"] < res[0]["curve"][0][1]


@pytest.mark.slow
def test_param_server_ssp_bounds_staleness():
    """A parameter-server job (server + 2 workers) with a slow worker."""
    res = launch(["--distributed", "param-server", "--steps", "8", "--max-staleness", "1",
                  "--straggler-delay", "const", "--straggler-base-ms", "3", "--slow-rank", "1:4",
                  *COMMON], 3, timeout_s=120)
    _ok(res)
    assert res[0]["updates"] == 16
    assert res[0]["staleness_max"] <= 1 * (2 - 1) + 2


@pytest.mark.slow
def test_torchrun_max_restarts_resumes_from_checkpoint(tmp_path):
    """Slow: a torchrun job whose rank dies, restarted by torchrun, resumes from its checkpoint; the agent and the
    two ranks (twice: the restart) are fresh interpreters that import torch."""
    metrics = tmp_path / "m.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{find_free_port()}",
           "-m", "mmst.simulation.run", "--distributed", "ddp", "--steps", "12", "--save-every", "5",
           "--fail-at-step", "7", "--fail-rank", "1", "--checkpoint-dir", str(tmp_path / "ckpt"),
           "--metrics-out", str(metrics), *COMMON]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    m = json.loads(Path(metrics).read_text())
    assert m["resumed_from_step"] == 5 and m["steps"] == 12
    assert "injected failure at step 7" in p.stderr


def _two_node_launch(tmp_path: Path, mode_args: list[str], tag: str) -> list[subprocess.Popen]:
    """Start two ``torchrun --nnodes 2`` launchers on this machine with one rendezvous (the multi-node
    command of docs/distributed.md, 1 process per node); each node dumps its final parameters."""
    port = find_free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"mmst-test-{tag}",
           "--max-restarts", "0", "-m", "mmst.simulation.run", *mode_args, "--steps", "4", "--update-freq", "2",
           "--dump-params", str(tmp_path / f"{tag}_rank{{rank}}.pt"),
           "--metrics-out", str(tmp_path / f"{tag}_metrics.json"), *COMMON]
    return [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            for _ in range(2)]


@pytest.mark.slow
def test_two_torchrun_nodes_form_one_group_and_train_the_same_parameters(tmp_path):
    # the two jobs (DDP, DropCompute) run at the same time: 4 launchers, 2 rendezvous
    """Slow: four torchrun launchers (two jobs of two nodes) rendezvous and train; the four agents and four ranks
    are fresh interpreters that import torch."""
    jobs = {"ddp": _two_node_launch(tmp_path, ["--distributed", "ddp"], "ddp"),
            "dc": _two_node_launch(tmp_path, ["--distributed", "dropcompute", "--compute-threshold", "auto",
                                              "--auto-steps", "2"], "dc")}
    init = flat_params(ToyTask().build_model(0))
    for tag, nodes in jobs.items():
        for p in nodes:
            out = p.communicate(timeout=240)[0]
            assert p.returncode == 0, out[-3000:]
        p0, p1 = (torch.load(tmp_path / f"{tag}_rank{r}.pt") for r in (0, 1))
        torch.testing.assert_close(p0, p1, rtol=0, atol=1e-6)  # both nodes applied the same averaged gradients
        assert (p0 - init).abs().max() > 1e-3  # and they trained
        m = json.loads((tmp_path / f"{tag}_metrics.json").read_text())
        assert m["world_size"] == 2 and m["steps"] == 4  # one group of two nodes, not two groups of one
