"""Exact gradient normalisation of the synchronous modes, through the trainer's adapters: DDP over ranks
with unequal token counts equals one process over the same micro-batches, a DropCompute step equals one
process over the micro-batches it computed, and DropCompute logs only those (scripted model and batches
of :mod:`distributed_fixtures`; a scripted clock decides what DropCompute drops, no timing involved).
"""

from __future__ import annotations

import pytest
import torch
from distributed_fixtures import (
    FrameModel,
    criterion,
    ddp_batches,
    ddp_rank,
    launch,
    make_batch,
    stub_trainer,
)

from mmst.training.strategy import SingleProcessStrategy

# meant for one worker to run the module's launch once, with the fork server of test_distributed.py
# (distributed_fixtures.launch; on xdist groups under pytest 9.2 see test_distributed.py)
pytestmark = pytest.mark.xdist_group("distributed")


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _single_process(batches) -> tuple[torch.Tensor, dict]:
    """One SGD(lr=1) update of the single-process strategy over ``batches`` (normalised by their tokens)."""
    model = FrameModel(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    res = SingleProcessStrategy(precision="fp32").run_update(model, criterion, opt, None, batches,
                                                             [None] * len(batches), 0.0)
    return _flat(model), res.stats


def _ok(res):
    for r, v in res.items():
        assert "error" not in v, f"rank {r}: {v.get('error')}\n{v.get('traceback', '')}"


@pytest.fixture(scope="module")
def ddp_result():
    """Both ranks' results of one DDP update, then one DropCompute update (tau = inf), each of a fresh model on
    :data:`distributed_fixtures.DDP_LENGTHS` (one launch of two gloo ranks per module, both modes in it)."""
    res = launch(["ddp", "dropcompute"], 2, timeout_s=120, target=ddp_rank)
    _ok(res)
    return res


@pytest.mark.slow
def test_ddp_on_unequal_length_batches_equals_one_process_over_the_same_batches(ddp_result):
    # rank 0: 2 + 5 and 7 tokens; rank 1: 9 + 1 + 4 and 3 + 3 tokens. Scaling each rank by its own tokens and
    # averaging the ranks (the old rule) weighs rank 0's tokens 20/14 times as much as rank 1's.
    """Slow: it waits for the module's launch of two gloo ranks (forked: about 1 s; over 20 s when it spawned them)."""
    res = ddp_result
    want, _ = _single_process(ddp_batches(0) + ddp_batches(1))
    for r in (0, 1):
        torch.testing.assert_close(torch.tensor(res[r]["ddp"]["params"]), want, rtol=0, atol=1e-6)


class _ScriptedClock:
    """The clock DropCompute times with (its injector's ``clock``): time moves only when a forward runs
    (1 s each), so what a threshold drops is decided by the script, not by the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_dropcompute_step_with_two_of_four_dropped_equals_one_process_over_the_two_computed(monkeypatch):
    from mmst.distributed.env import shutdown
    from mmst.training.distributed import TrainerDropCompute

    clock = _ScriptedClock()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    from mmst.distributed.env import find_free_port

    monkeypatch.setenv("MASTER_PORT", str(find_free_port()))

    def timed(out, batch):
        clock.now += 1.0  # each forward takes 1 scripted second
        return criterion(out, batch)

    # tau = 2.5 s: micro-batch 1 (forward ends at 1 s) and 2 (2 s) are computed; micro-batch 3 starts at 2 s
    # < tau, its forward ends at 3 s >= tau, so it is dropped between forward and backward; 4 never starts
    batches = [make_batch(ls, i) for i, ls in enumerate([[2, 6], [5], [8, 8, 3], [4]])]
    strat = TrainerDropCompute(dist_timeout=30, compute_threshold="2.5")
    try:
        model = FrameModel(seed=0)
        strat.setup(stub_trainer(model))
        strat.core.injector.clock = clock.perf_counter
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        res = strat.run_update(model, timed, opt, None, batches, [None] * 4, 0.0)
    finally:
        shutdown(strat.env)
    assert strat.last_step.n_computed == 2 and strat.last_step.drop_rate == 0.5
    want, want_stats = _single_process(batches[:2])
    torch.testing.assert_close(_flat(model), want, rtol=0, atol=1e-6)
    # the logged numbers are those of the two computed micro-batches (the third ran its forward only)
    assert res.stats["ntokens"] == 13 == want_stats["ntokens"]
    assert res.stats["loss"] == pytest.approx(want_stats["loss"])
    assert res.stats["nsentences"] == 3


@pytest.mark.slow
def test_dropcompute_tau_inf_is_bit_identical_to_ddp_on_unequal_batches(ddp_result):
    """The DropCompute update of the module's launch against its DDP update (each of a fresh model)."""
    dc = {r: ddp_result[r]["dropcompute"] for r in (0, 1)}
    assert ddp_result[0]["ddp"]["params"] == dc[0]["params"] == dc[1]["params"]  # bit-identical, not just close
