"""The parameter server's bookkeeping without processes: liveness, readmission, SSP release (fast).

The messaging (:meth:`ParamServer._reply`) and the heartbeat store are replaced by recorders; the
multi-process behaviour is tested in tests/test_distributed.py and tests/test_distributed_trainer.py.
"""

from __future__ import annotations

import pytest
import torch

from mmst.distributed.env import DistEnv
from mmst.distributed.param_server import HDR, PUSH, ParamServer


def _server(ages, replies, max_staleness=None):
    model = torch.nn.Linear(2, 1)
    srv = ParamServer(DistEnv(rank=0, world_size=3, timeout_s=30.0), model,
                      torch.optim.SGD(model.parameters(), lr=0.1), total_updates=100,
                      max_staleness=max_staleness, worker_timeout_s=2.0)
    srv._heartbeat_age = lambda w: ages[w]
    srv._reply = lambda w, stop: replies.append((w, stop))
    return srv


def _push(srv, version):
    buf = torch.zeros(HDR + srv.n_params)
    buf[0], buf[1], buf[2] = float(PUSH), float(version), 4.0
    return buf


def test_a_late_worker_is_lost_then_readmitted_and_gets_its_held_reply():
    ages, replies = {1: 0.1, 2: 0.1}, []
    srv = _server(ages, replies, max_staleness=0)
    srv.pending.add(1)  # worker 1 waits for a reply held by SSP
    ages[1] = 5.0  # its heartbeat is late (a loaded machine)
    srv._check_liveness()
    assert srv.alive == {2} and srv.lost == [1] and 1 not in srv.pending
    ages[1] = 0.1  # fresh again: it was late, not dead
    srv._check_liveness()
    assert srv.alive == {1, 2} and srv.rejoined == [1]
    assert replies == [(1, False)]  # the held reply is sent (its clock is not ahead any more)


def test_a_message_from_a_lost_worker_readmits_it_and_is_applied():
    ages, replies = {1: 0.1, 2: 5.0}, []
    srv = _server(ages, replies)
    srv._check_liveness()
    assert srv.alive == {1}
    srv._handle(2, _push(srv, 0))
    assert srv.alive == {1, 2} and srv.version == 1 and srv.samples == 4.0 and replies == [(2, False)]


def test_a_worker_that_left_is_not_readmitted():
    ages, replies = {1: 0.1, 2: 0.1}, []
    srv = _server(ages, replies)
    srv._declare_dead(2, "send failed")  # not a late heartbeat: gone
    srv._handle(2, _push(srv, 0))
    assert srv.alive == {1} and srv.version == 0 and replies == []


def _sgd_server(lr_per_push, workers=2, staleness_lr=False):
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    srv = ParamServer(DistEnv(rank=0, world_size=workers + 1, timeout_s=30.0), model,
                      torch.optim.SGD(model.parameters(), lr=0.6), total_updates=100, worker_timeout_s=2.0,
                      lr_per_push=lr_per_push, staleness_lr=staleness_lr)
    srv._heartbeat_age = lambda w: 0.1
    srv._reply = lambda w, stop: None
    return srv, model


def _grad_push(srv, version, grad, nll=0.0, frames=0.0):
    buf = _push(srv, version)
    buf[6], buf[7], buf[HDR] = nll, frames, grad
    return buf


@pytest.mark.parametrize("mode, staleness_lr, steps", [
    # lr 0.6, gradient 1 on every push; the third push was computed at version 0 and arrives at version 2
    ("full", False, [0.6, 0.6, 0.6]),
    ("per_worker", False, [0.3, 0.3, 0.3]),  # W = 2: lr / 2
    ("staleness", False, [0.6, 0.6, 0.3]),  # staleness 0, 1 -> lr; staleness 2 -> lr / 2
    (None, True, [0.6, 0.6, 0.3]),  # staleness_lr is the alias of staleness
])
def test_learning_rate_per_push(mode, staleness_lr, steps):
    srv, model = _sgd_server(mode, staleness_lr=staleness_lr)
    want = 1.0
    for i, (w, version) in enumerate([(1, 0), (2, 0), (1, 0)]):
        srv._handle(w, _grad_push(srv, version, 1.0))
        want -= steps[i]
        assert float(model.weight.detach()) == pytest.approx(want)
        assert srv.optimizer.param_groups[0]["lr"] == 0.6  # restored after the push
    assert srv.staleness == [0, 1, 2] and srv.lr_scales == pytest.approx([s / 0.6 for s in steps])


def test_unknown_or_contradicting_lr_per_push_is_an_error():
    with pytest.raises(ValueError, match="expected one of"):
        _sgd_server("half")
    with pytest.raises(ValueError, match="contradicts"):
        _sgd_server("full", staleness_lr=True)


def test_pushes_carry_nll_and_frames_to_the_server():
    srv, _ = _sgd_server("full")
    srv._handle(1, _grad_push(srv, 0, 0.0, nll=7.5, frames=300.0))
    srv._handle(2, _grad_push(srv, 0, 0.0, nll=2.5, frames=100.0))
    assert srv.nll_sum == 10.0 and srv.n_frames == 400.0


def test_a_stall_of_the_server_itself_does_not_lose_every_worker():
    # worker_timeout 2 s. The whole machine stalls 15 s: the server's last check was at t=0 and every
    # heartbeat is ~15 s old when it runs again. Nobody is lost then; a worker whose heartbeat stays old
    # for a fresh 2 s after the resumption is.
    ages, replies = {1: 15.0, 2: 15.0}, []
    srv = _server(ages, replies)
    srv._last_check = 0.0
    srv._liveness_tick(15.0)
    assert srv.alive == {1, 2} and srv.lost == []
    ages[1] = 0.1  # worker 1's heartbeat thread runs again; worker 2 really died
    for now in (15.6, 16.2, 16.8):  # still inside the grace
        ages[2] = now
        srv._liveness_tick(now)
        assert srv.alive == {1, 2}
    ages[2] = 17.4  # grace over (15 + 2) and a check is due (0.5 s after 16.8)
    srv._liveness_tick(17.4)
    assert srv.alive == {1} and srv.lost == [2]


def test_without_a_server_stall_a_late_heartbeat_is_lost_at_the_next_check():
    ages, replies = {1: 0.1, 2: 2.5}, []
    srv = _server(ages, replies)
    srv._last_check = 10.0
    srv._liveness_tick(10.3)  # not due yet (every min(0.5, 2/4) s)
    assert srv.alive == {1, 2}
    srv._liveness_tick(10.6)
    assert srv.alive == {1} and srv.lost == [2]
