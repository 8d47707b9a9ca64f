"""The parameter server's bookkeeping without processes: liveness, readmission, SSP release (fast).

The messaging (:meth:`ParamServer._reply`) and the heartbeat store are replaced by recorders; the
multi-process behaviour is tested in tests/test_distributed.py and tests/test_distributed_trainer.py.
"""

from __future__ import annotations

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
