"""A scripted model, criterion and micro-batches for the gradient-normalisation tests of the distributed
modes, run through the trainer's adapters (:mod:`mmst.training.distributed`) exactly as ``mmst-train`` runs
them, the rank functions that :func:`mmst.simulation.run.launch_local` starts, and :func:`launch`, the way
the tests start local gloo ranks.

:func:`launch` forks the ranks from multiprocessing's fork server, which imports torch, ``torch._dynamo``
(that DDP's constructor imports) and the trainer once per pytest worker; a spawned rank or a fresh
``python -m ...`` process pays those imports every time (about 5 s of CPU on a 2-core machine). Each rank is
still a process of its own, with a process group of its own.

The model maps each input frame (``F`` features) to one number; the criterion is the squared error
SUMMED over the valid frames of a micro-batch, and a valid frame counts as one target token
(``ntokens`` = sum of the lengths), so micro-batches of different lengths carry different weights.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from mmst.simulation.run import launch_local

F = 3  # features per frame


@dataclass
class ScriptedBatch:
    """The attributes of :class:`mmst.data.batching.Batch` that the training step reads."""

    fbank: torch.Tensor  # (B, T, F)
    fbank_lengths: torch.Tensor  # (B,)
    target: torch.Tensor  # (B, T)
    ids: list[str]

    @property
    def prev_output_tokens(self) -> dict[str, torch.Tensor]:
        return {}

    @property
    def ntokens(self) -> dict[str, int]:
        return {"xx": int(self.fbank_lengths.sum())}

    @property
    def total_ntokens(self) -> int:
        return int(self.fbank_lengths.sum())

    @property
    def size(self) -> int:
        return int(self.fbank.shape[0])

    @property
    def n_frames(self) -> int:
        return int(self.fbank_lengths.sum())

    def to(self, device: Any) -> ScriptedBatch:
        return self


def make_batch(lengths: list[int], seed: int) -> ScriptedBatch:
    """A micro-batch of ``len(lengths)`` utterances padded to the longest (deterministic in ``seed``)."""
    g = torch.Generator().manual_seed(seed)
    t = max(lengths)
    x = torch.randn(len(lengths), t, F, generator=g)
    y = torch.randn(len(lengths), t, generator=g)
    return ScriptedBatch(x, torch.tensor(lengths), y, [f"s{seed}u{i}" for i in range(len(lengths))])


class FrameModel(torch.nn.Module):
    """``(B, T, F) -> (B, T)``: one linear layer per frame (a tanh in between, so gradients are not linear)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.a = torch.nn.Linear(F, 4)
        self.b = torch.nn.Linear(4, 1)

    def forward(self, fbank: torch.Tensor, lengths: torch.Tensor, prev: Any, waitk: Any = None) -> torch.Tensor:
        return self.b(torch.tanh(self.a(fbank))).squeeze(-1)


def criterion(out: torch.Tensor, batch: ScriptedBatch) -> tuple[torch.Tensor, dict[str, float]]:
    """Squared error summed over valid frames; ``nll_loss`` = the same sum (a token-level NLL stand-in)."""
    mask = torch.arange(out.shape[1])[None, :] < batch.fbank_lengths[:, None]
    loss = ((out - batch.target) ** 2 * mask).sum()
    return loss, {"loss": float(loss.detach()), "nll_loss": float(loss.detach()), "ntokens": batch.total_ntokens}


def stub_trainer(model: torch.nn.Module) -> SimpleNamespace:
    """The parts of :class:`mmst.training.loop.Trainer` an adapter's ``setup`` and ``run_update`` read."""
    return SimpleNamespace(model=model, cfg=SimpleNamespace(precision="fp32"), state=SimpleNamespace(num_updates=0),
                           log=SimpleNamespace(log=lambda *a, **k: None))


#: per rank: the token lengths of its micro-batches (unequal within and across ranks)
DDP_LENGTHS = {0: [[2, 5], [7]], 1: [[9, 1, 4], [3, 3]]}


def ddp_batches(rank: int) -> list[ScriptedBatch]:
    return [make_batch(ls, 100 * rank + i) for i, ls in enumerate(DDP_LENGTHS[rank])]


def ddp_rank(argv: list[str]) -> dict[str, Any]:
    """One rank: for each mode in ``argv``, in order (``ddp``; ``dropcompute`` with tau = inf), one update of a
    fresh :class:`FrameModel` with SGD(lr=1) on this rank's :data:`DDP_LENGTHS` batches, every mode in the one
    process group. Returns ``{mode: {"params": the parameters after the update, "stats": the logged stats}}``."""
    from mmst.distributed.env import init_distributed, shutdown
    from mmst.training.distributed import TrainerDDP, TrainerDropCompute

    torch.set_num_threads(1)
    env = init_distributed("gloo", 30.0)
    try:
        out = {}
        for mode in argv:
            strat = (TrainerDropCompute(dist_timeout=30, compute_threshold="inf") if mode == "dropcompute"
                     else TrainerDDP(dist_timeout=30))
            model = FrameModel(seed=0)
            strat.setup(stub_trainer(model))
            opt = torch.optim.SGD(model.parameters(), lr=1.0)
            batches = ddp_batches(env.rank)
            res = strat.run_update(model, criterion, opt, None, batches, [None] * len(batches), 0.0)
            flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            out[mode] = {"params": flat.tolist(), "stats": res.stats}
        return out
    finally:
        shutdown(env)


def ddp_compute_rank(argv: list[str]) -> dict[str, Any]:
    """One DDP step (world size 1, this rank's :data:`DDP_LENGTHS` batches) on a virtual clock that the test
    scripts: ``argv = [FWD_S, BWD_S, WAIT_S]``: each forward takes FWD_S, each backward BWD_S (a hook on the model
    output) and each gradient all-reduce WAIT_S (as if waiting for a slower rank). Returns the straggler
    injector's running mean of the compute it observed and the step time."""
    import torch.distributed as dist

    from mmst.distributed.ddp import DDPStrategy
    from mmst.distributed.env import init_distributed, shutdown
    from mmst.distributed.stragglers import StragglerInjector, VirtualClock

    fwd_s, bwd_s, wait_s = (float(x) for x in argv)
    torch.set_num_threads(1)
    vc = VirtualClock()
    real = dist.all_reduce

    def waiting_all_reduce(*args: Any, **kwargs: Any) -> Any:
        vc.sleep(wait_s)
        return real(*args, **kwargs)

    def loss_fn(model: torch.nn.Module, mb: ScriptedBatch) -> tuple[torch.Tensor, dict[str, float]]:
        vc.sleep(fwd_s)
        out = model(mb.fbank, mb.fbank_lengths, None)
        out.register_hook(lambda grad: vc.sleep(bwd_s))  # None: the gradient is unchanged
        return criterion(out, mb)

    env = init_distributed("gloo", 30.0)
    try:
        strat = DDPStrategy(env, StragglerInjector("none", clock=vc.now, sleep=vc.sleep))
        model = strat.wrap(FrameModel(seed=0))
        dist.all_reduce = waiting_all_reduce
        st = strat.step(model, ddp_batches(env.rank), loss_fn)
        return {"compute_mean_s": strat.injector._ema, "step_time_s": st.step_time_s}
    finally:
        dist.all_reduce = real
        shutdown(env)


def dropcompute_warmup_rank(argv: list[str]) -> dict[str, Any]:
    """DropCompute with ``--compute-threshold auto`` (world size 1, :data:`DDP_LENGTHS` batches, two micro-batches a
    step) on a virtual clock where each micro-batch takes 10 s in the first two steps and 1 s after them; ``argv =
    [AUTO_WARMUP_STEPS, AUTO_STEPS, STEPS]``. Returns, per step, whether tau had been chosen after it, and the
    chosen ``tau_info``."""
    from mmst.distributed.dropcompute import DropComputeStrategy
    from mmst.distributed.env import init_distributed, shutdown
    from mmst.distributed.stragglers import StragglerInjector, VirtualClock

    warmup, rec, steps = (int(x) for x in argv)
    torch.set_num_threads(1)
    vc = VirtualClock()
    step = {"n": 0}

    def loss_fn(model: torch.nn.Module, mb: ScriptedBatch) -> tuple[torch.Tensor, dict[str, float]]:
        vc.sleep(10.0 if step["n"] <= 2 else 1.0)
        return criterion(model(mb.fbank, mb.fbank_lengths, None), mb)

    env = init_distributed("gloo", 30.0)
    try:
        strat = DropComputeStrategy(env, "auto", rec, StragglerInjector("none", clock=vc.now, sleep=vc.sleep),
                                    auto_warmup_steps=warmup)
        model = strat.wrap(FrameModel(seed=0))
        chosen = []
        for step["n"] in range(1, steps + 1):
            model.zero_grad()
            strat.step(model, ddp_batches(env.rank), loss_fn)
            chosen.append(bool(strat.tau_info))
        return {"chosen": chosen, "tau_info": strat.tau_info}
    finally:
        shutdown(env)


#: what the tests' fork server imports besides :mod:`mmst.simulation.run` and ``torch._dynamo``: mmst-train
FORKSERVER_PRELOAD = ("mmst.training.cli", "mmst.training.trainer", "mmst.training.distributed")


def launch(argv: list[str], nprocs: int, timeout_s: float = 120.0, target: Any = None) -> dict[int, dict[str, Any]]:
    """:func:`mmst.simulation.run.launch_local` with the ranks forked from the fork server (module docstring)."""
    return launch_local(argv, nprocs, timeout_s=timeout_s, target=target, start_method="forkserver",
                        preload=FORKSERVER_PRELOAD)


def cli_rank(argv: list[str]) -> dict[str, Any]:
    """One rank of ``mmst-train`` (:func:`mmst.training.cli.main`) started by :func:`launch`; ``argv`` =
    ``[LOG_DIR, *mmst-train arguments]``. As in a ``python -m mmst.training.cli`` process: stdout and stderr
    (together, to ``LOG_DIR/rank{RANK}.log``), logging set up by mmst-train itself (the launcher's set-up is
    undone), the exit status (``{"rc": status}``; an injected failure still ends the process with its own)."""
    fd = os.open(Path(argv[0]) / f"rank{os.environ['RANK']}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.setLevel(logging.WARNING)
    from mmst.training.cli import main

    try:
        rc = main(argv[1:])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:  # noqa: BLE001 - the interpreter would print it and exit 1
        traceback.print_exc()
        rc = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return {"rc": rc}


def sleeping_rank(argv: list[str]) -> dict[str, Any]:
    """A rank that never finishes (``time.sleep(argv[0])`` in a function named for the test to find)."""
    import time

    def stuck_here_forever() -> None:
        time.sleep(float(argv[0]))

    stuck_here_forever()
    return {}


def lingering_thread_rank(argv: list[str]) -> dict[str, Any]:
    """A rank that returns its result but leaves a non-daemon thread sleeping ``argv[0]`` seconds (as a library's
    background worker could)."""
    import threading
    import time

    threading.Thread(target=time.sleep, args=(float(argv[0]),), daemon=False).start()
    return {"done": True}
