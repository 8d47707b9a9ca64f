"""``python -m mmst.simulation.run``: stand-alone distributed runner (works under ``torchrun``).

Runs any of the modes on the fixed small task (:mod:`mmst.simulation.toy`); the MMST model itself is
trained with ``mmst-train --distributed ...`` (see :mod:`mmst.training.distributed`). Examples::

    # 4 CPU workers, DDP with 4 micro-batches per update, lognormal stragglers
    torchrun --nproc-per-node 4 -m mmst.simulation.run --distributed ddp --update-freq 4 \\
        --straggler-delay lognormal:cv=0.5 --steps 100
    # DropCompute with an automatic threshold
    torchrun --nproc-per-node 4 -m mmst.simulation.run --distributed dropcompute --compute-threshold auto
    # parameter server: rank 0 = server, ranks 1..3 = workers, SSP bound 4
    torchrun --nproc-per-node 4 -m mmst.simulation.run --distributed param-server --max-staleness 4
    # restart on failure, resuming from the last checkpoint
    torchrun --nproc-per-node 2 --max-restarts 2 -m mmst.simulation.run --checkpoint-dir exp/ckpt

Without torchrun (no ``RANK`` in the environment) it runs as one process. :func:`launch_local` spawns
``nprocs`` local processes with the same environment torchrun would set (used by tests and the bench).

Throughput is measured on rank 0 (server in param-server mode) after ``--measure-from`` steps, with the
evaluation time excluded; time-to-target is the training time (evaluation excluded) until the
evaluation MSE first reaches ``--target-loss``.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import logging
import math
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from mmst.atomic import atomic_path
from mmst.cli_help import HelpFormatter
from mmst.distributed.ddp import DDPStrategy
from mmst.distributed.dropcompute import AUTO_WARMUP_STEPS, DropComputeStrategy, parse_threshold
from mmst.distributed.env import (
    DistEnv,
    DistributedError,
    all_gather_tensor,
    find_free_port,
    init_distributed,
    shutdown,
)
from mmst.distributed.param_server import ParamServer, ParamWorker, flat_params
from mmst.distributed.stragglers import StragglerInjector, VirtualClock, parse_delay_spec, parse_slow_rank
from mmst.simulation.toy import ToyTask

log = logging.getLogger("mmst.simulation.run")
MODES = ("none", "ddp", "dropcompute", "param-server")


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of the runner (every option has help)."""
    p = argparse.ArgumentParser(prog="python -m mmst.simulation.run", description=__doc__.split("\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--distributed", choices=MODES, default="ddp", help="training mode")
    p.add_argument("--update-freq", type=int, default=4, help="M: micro-batches per rank per update")
    p.add_argument("--compute-threshold", default="auto", help="DropCompute tau: seconds, 'inf' or 'auto'")
    p.add_argument("--auto-steps", type=int, default=5, help="S: steps recorded before choosing tau (auto)")
    p.add_argument("--auto-warmup-steps", type=int, default=AUTO_WARMUP_STEPS,
                   help="steps run before the S recorded ones and not recorded (auto; default as the DropCompute "
                        "paper's reference code)")
    p.add_argument("--max-drop-rate", type=float, default=None, help="cap on the expected drop rate for auto tau")
    p.add_argument("--max-staleness", default=None,
                   help="param-server SSP bound s (default: W, the number of workers; inf = no bound)")
    p.add_argument("--staleness-lr", action="store_true", help="param-server: divide lr by staleness")
    p.add_argument("--worker-timeout", type=float, default=None,
                   help="param-server: seconds without heartbeat before a worker is declared dead")
    p.add_argument("--straggler-delay", default="none",
                   help="none | const | lognormal:cv=C | exp:c=C | pareto:alpha=A (sleep per micro-batch)")
    p.add_argument("--straggler-fraction", type=float, default=1.0,
                   help="delay base = this fraction of the measured micro-batch compute time")
    p.add_argument("--straggler-base-ms", type=float, default=None,
                   help="fixed delay base in ms instead of the fraction of compute (benchmarks)")
    p.add_argument("--slow-rank", default=None, help="R:FACTOR, a persistent straggler")
    p.add_argument("--virtual-clock", action="store_true",
                   help="time advances only by the injected delays (compute and communication take no time): "
                        "drop decisions and times depend on the seeds alone (tests); not with param-server")
    p.add_argument("--seed", type=int, default=0, help="global seed (delays use [seed, rank])")
    p.add_argument("--dist-timeout", type=float, default=60.0, help="seconds before a dead/hung peer is an error")
    p.add_argument("--backend", default=None, help="gloo | nccl (default: nccl if CUDA else gloo)")
    p.add_argument("--steps", type=int, default=60,
                   help="synchronous steps (param-server: total updates = steps x workers)")
    p.add_argument("--batch-size", type=int, default=16, help="samples per micro-batch")
    p.add_argument("--lr", type=float, default=0.2, help="SGD learning rate")
    p.add_argument("--momentum", type=float, default=0.0, help="SGD momentum")
    p.add_argument("--target-loss", type=float, default=None, help="eval MSE target (default 5 x noise^2)")
    p.add_argument("--eval-every", type=int, default=2, help="evaluate every this many steps (0 = never)")
    p.add_argument("--measure-from", type=int, default=None,
                   help="first step counted in throughput (default: --auto-warmup-steps + --auto-steps)")
    p.add_argument("--checkpoint-dir", default=None, help="save last.pt here and resume from it")
    p.add_argument("--save-every", type=int, default=5, help="checkpoint every this many steps")
    p.add_argument("--fail-at-step", type=int, default=None, help="fault injection: step at which to die")
    p.add_argument("--fail-rank", type=int, default=1, help="fault injection: rank that dies")
    p.add_argument("--fail-always", action="store_true",
                   help="also die after a torchrun restart (default: only on the first attempt)")
    p.add_argument("--metrics-out", default=None, help="rank 0 writes the metrics JSON here")
    p.add_argument("--record-micro", action="store_true", help="include per-rank micro-batch times in metrics")
    p.add_argument("--dump-params", default=None,
                   help="rank 0 saves the final flat parameter vector here (tests); a path containing {rank} "
                        "is written by every rank, with its rank filled in")
    p.add_argument("--log-every", type=int, default=10, help="log every this many steps (rank 0)")
    return p


def _should_fail(cfg: argparse.Namespace, rank: int, step: int) -> bool:
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    return (cfg.fail_at_step is not None and rank == cfg.fail_rank and step == cfg.fail_at_step
            and (first_attempt or cfg.fail_always))


def _die(rank: int, step: int) -> None:
    log.error("rank %d: injected failure at step %d (os._exit)", rank, step)
    logging.shutdown()
    sys.stderr.flush()
    os._exit(13)


def _save_ckpt(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int, extra: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, **extra}, tmp)


def train(cfg: argparse.Namespace) -> dict[str, Any]:
    """Run one training job in this process (one rank). Returns the metrics (rank 0: full; others: own).

    Raises:
        DistributedError: a peer died / hung (a clear message, within ``--dist-timeout``).
        ValueError: bad option values.
    """
    torch.set_num_threads(1)
    spec = parse_delay_spec(cfg.straggler_delay)
    slow = parse_slow_rank(cfg.slow_rank)
    thr = parse_threshold(cfg.compute_threshold)
    if cfg.virtual_clock and cfg.distributed == "param-server":
        raise ValueError("--virtual-clock is for ddp and dropcompute (the parameter server times its own pushes)")
    env = init_distributed(cfg.backend, cfg.dist_timeout)
    try:
        return _train(cfg, env, spec, slow, thr)
    finally:
        shutdown(env)


def _train(cfg: argparse.Namespace, env: DistEnv, spec: Any, slow: Any, thr: Any) -> dict[str, Any]:
    task = ToyTask(batch_size=cfg.batch_size, seed=cfg.seed)
    target = cfg.target_loss if cfg.target_loss is not None else task.default_target_loss
    model = task.build_model(cfg.seed).to(env.device)
    base_s = cfg.straggler_base_ms / 1000.0 if cfg.straggler_base_ms is not None else None
    vc = VirtualClock() if cfg.virtual_clock else None
    injector = StragglerInjector(spec, env.rank, cfg.seed, cfg.straggler_fraction, base_s, slow,
                                 **({"sleep": vc.sleep, "clock": vc.now} if vc is not None else {}))
    m = cfg.update_freq
    measure_from = cfg.measure_from if cfg.measure_from is not None else cfg.auto_warmup_steps + cfg.auto_steps
    out: dict[str, Any] = {"mode": cfg.distributed, "world_size": env.world_size, "update_freq": m,
                           "batch_size": cfg.batch_size, "straggler_delay": str(spec), "slow_rank": cfg.slow_rank,
                           "target_loss": target, "rank": env.rank}
    if cfg.distributed == "param-server":
        return _train_param_server(cfg, env, task, model, injector, target, out)

    if cfg.distributed == "dropcompute":
        strat: Any = DropComputeStrategy(env, thr, cfg.auto_steps, injector, cfg.max_drop_rate, cfg.seed,
                                         auto_warmup_steps=cfg.auto_warmup_steps)
    else:
        strat = DDPStrategy(env, injector)
    model = strat.wrap(model)
    inner = model.module if hasattr(model, "module") else model
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    start = 0
    ckpt = Path(cfg.checkpoint_dir) / "last.pt" if cfg.checkpoint_dir else None
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, map_location=env.device, weights_only=False)
        inner.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["step"])
        if isinstance(strat, DropComputeStrategy) and math.isfinite(state.get("tau_s", math.inf)):
            strat.tau_s = float(state["tau_s"])
        log.warning("rank %d: resumed from %s at step %d", env.rank, ckpt, start)
    out["resumed_from_step"] = start
    clock = injector.clock
    train_time = meas_time = 0.0
    meas_samples = meas_computed = meas_total = 0.0
    steps_meas, step_times, computes, overshoots, overshoots_max, delays = 0, [], [], [], [], []
    curve: list[tuple[float, float]] = []
    ttt = None
    micro_rec: list[list[float]] = []
    for step in range(start, cfg.steps):
        if _should_fail(cfg, env.rank, step):
            _die(env.rank, step)
        mbs = [task.batch(env.rank, step, i) for i in range(m)]
        t0 = clock()
        st = strat.step(model, mbs, task.loss_fn)  # mean losses: weight 1 per micro-batch
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = clock() - t0
        train_time += dt
        if step >= measure_from:
            meas_time += dt
            meas_samples += st.global_samples
            meas_computed += st.global_computed
            meas_total += st.global_total
            steps_meas += 1
            step_times.append(dt)
            computes.append(st.compute_s)
            overshoots.append(st.overshoot_s)
            overshoots_max.append(st.overshoot_s_max)
            delays.append(st.delay_s)
            micro_rec.append(list(st.micro_times_s) + [float("nan")] * (m - len(st.micro_times_s)))
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0:
            loss = task.eval_loss(inner)
            curve.append((train_time, loss))
            if ttt is None and loss <= target:
                ttt = train_time
        if env.is_main and cfg.log_every and (step + 1) % cfg.log_every == 0:
            log.info("step %d step_time %.4fs compute(rank0) %.4fs drop_rate %.3f tau %.4f loss %.4f", step + 1,
                     st.step_time_s, st.compute_s, st.drop_rate, st.tau_s, curve[-1][1] if curve else float("nan"))
        if ckpt is not None and env.is_main and (step + 1) % cfg.save_every == 0:
            _save_ckpt(ckpt, inner, opt, step + 1, {"tau_s": getattr(strat, "tau_s", math.inf)})
    if cfg.dump_params and (env.is_main or "{rank}" in cfg.dump_params):
        torch.save(flat_params(inner), cfg.dump_params.format(rank=env.rank))
    out.update(
        steps=cfg.steps, train_time_s=train_time, measured_steps=steps_meas,
        samples_per_s=meas_samples / meas_time if meas_time else 0.0,
        step_time_s=meas_time / steps_meas if steps_meas else 0.0,
        drop_rate=1.0 - meas_computed / meas_total if meas_total else 0.0,
        compute_s_rank=sum(computes) / len(computes) if computes else 0.0,
        delay_s_rank=sum(delays) / len(delays) if delays else 0.0,
        overshoot_s=sum(overshoots) / len(overshoots) if overshoots else 0.0,
        overshoot_s_max=sum(overshoots_max) / len(overshoots_max) if overshoots_max else 0.0,
        tau_s=getattr(strat, "tau_s", math.inf), tau_info=getattr(strat, "tau_info", {}),
        final_loss=task.eval_loss(inner), time_to_target_s=ttt, curve=curve)
    # reporting only (after training): per-rank compute times and micro-batch times
    comp = all_gather_tensor(torch.tensor([out["compute_s_rank"]], dtype=torch.float64), env, "metrics gather")
    out["compute_s_per_rank"] = comp.view(-1).tolist()
    if cfg.record_micro and micro_rec:
        g = all_gather_tensor(torch.tensor(micro_rec, dtype=torch.float64), env, "metrics gather")
        out["micro_times_s"] = g.tolist()
    if env.is_main:
        log.info("done: %s", {k: v for k, v in out.items() if k not in ("curve", "micro_times_s")})
    return out


def _train_param_server(cfg: argparse.Namespace, env: DistEnv, task: ToyTask, model: torch.nn.Module,
                        injector: StragglerInjector, target: float, out: dict[str, Any]) -> dict[str, Any]:
    workers = env.world_size - 1
    if workers < 1:
        raise ValueError("param-server needs >= 2 processes (rank 0 = server)")
    m = cfg.update_freq
    total = cfg.steps * workers
    if env.rank == 0:
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        curve: list[tuple[float, float]] = []
        state = {"eval_s": 0.0, "ttt": None, "meas_t0": None, "meas_v0": 0, "meas_s0": 0.0}
        measure_from = (cfg.measure_from if cfg.measure_from is not None
                        else cfg.auto_warmup_steps + cfg.auto_steps) * workers

        def on_update(srv: ParamServer) -> None:
            now = time.perf_counter()
            if srv.version == measure_from:
                state.update(meas_t0=now - state["eval_s"], meas_v0=srv.version, meas_s0=srv.samples)
            if cfg.eval_every and srv.version % (cfg.eval_every * workers) == 0:
                te = time.perf_counter()
                loss = task.eval_loss(model)
                t_train = te - srv.t_start - state["eval_s"]
                curve.append((t_train, loss))
                if state["ttt"] is None and loss <= target:
                    state["ttt"] = t_train
                state["eval_s"] += time.perf_counter() - te
            if srv.version == total:
                state["end"] = time.perf_counter() - state["eval_s"]

        bound = cfg.max_staleness
        bound = workers if bound is None else (None if str(bound).lower() in ("inf", "none") else int(bound))
        srv = ParamServer(env, model, opt, total, bound, cfg.staleness_lr, cfg.worker_timeout, on_update=on_update)
        stats = srv.serve()
        if cfg.dump_params:
            torch.save(flat_params(model), cfg.dump_params.format(rank=env.rank))
        end = state.get("end", time.perf_counter() - state["eval_s"])
        if state["meas_t0"] is not None and end > state["meas_t0"]:
            sps = (srv.samples - state["meas_s0"]) / (end - state["meas_t0"])
            ups = (srv.version - state["meas_v0"]) / (end - state["meas_t0"])
        else:
            sps, ups = stats["samples_per_s"], stats["updates_per_s"]
        out.update(steps=cfg.steps, updates=stats["updates"], train_time_s=end - srv.t_start,
                   samples_per_s=sps, updates_per_s=ups, drop_rate=0.0,
                   staleness_mean=stats["staleness_mean"], staleness_max=stats["staleness_max"],
                   lost_workers=stats["lost_workers"], lost_at_update=stats["lost_at_update"], final_loss=task.eval_loss(model),
                   time_to_target_s=state["ttt"], curve=curve, workers=workers)
        log.info("param-server done: updates %d (%.1f/s) staleness mean %.2f max %d lost %s", stats["updates"],
                 ups, stats["staleness_mean"], stats["staleness_max"], stats["lost_workers"])
        return out

    def before(step: int) -> None:
        if _should_fail(cfg, env.rank, step):
            _die(env.rank, step)

    wrk = ParamWorker(env, model, injector)
    res = wrk.run(lambda s: [task.batch(env.rank, s, i) for i in range(m)], task.loss_fn, 1.0 / m,
                  before_step=before)
    out.update(res)
    return out


# ---------------------------------------------------------------------------------------------------------
def _run_argv(argv: list[str]) -> dict[str, Any]:
    return train(build_parser().parse_args(argv))


def _entry(rank: int, world: int, port: int, argv: list[str], result_dir: str,
           target: Callable[[list[str]], dict[str, Any]] = _run_argv, environ: dict[str, str] | None = None) -> None:
    if environ is not None:  # forkserver: the launching process's environment, as spawn would give it
        os.environ.clear()
        os.environ.update(environ)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    logging.basicConfig(level=logging.WARNING, format=f"[rank {rank}] %(levelname)s %(message)s")
    path = Path(result_dir) / f"rank{rank}.json"
    # on SIGUSR1 (sent by launch_local to a rank alive at its deadline) every thread's stack goes to this file;
    # it stays open for the life of the process
    faulthandler.register(signal.SIGUSR1, file=open(Path(result_dir) / f"rank{rank}.stack", "w"),  # noqa: SIM115
                          all_threads=True)
    try:
        res = target(argv)
        with atomic_path(path) as tmp:  # the launcher reads a rank's result as finished only when it is whole
            tmp.write_text(json.dumps(res))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        path.write_text(json.dumps({"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}))
        raise SystemExit(1) from e
    # the result is written: end here, without multiprocessing's exit path (it joins leftover non-daemon threads
    # and runs finalizers, where a library's background thread could keep a finished rank alive until the deadline)
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(0)


def launch_local(argv: list[str], nprocs: int, timeout_s: float = 120.0,
                 target: Callable[[list[str]], dict[str, Any]] | None = None, start_method: str = "spawn",
                 preload: Sequence[str] = ()) -> dict[int, dict[str, Any]]:
    """Run ``nprocs`` local ranks of this runner (spawned or forked processes, gloo) and collect each rank's result.

    Args:
        argv: runner arguments (as on the command line). nprocs: world size. timeout_s: wall-clock
            bound; ranks still alive then are killed.
        target: run ``target(argv) -> JSON-able dict`` in each rank instead of this runner (a module-level
            function, so the spawned processes can import it); the environment is the same.
        start_method: ``spawn`` (every rank a fresh interpreter) or ``forkserver`` (tests, which launch many
            short jobs): every rank is forked from multiprocessing's fork server, which imports this module,
            torch, ``torch._dynamo`` (DDP's constructor imports it) and ``preload`` once, when this process
            first starts it, instead of once per rank (several seconds of CPU a rank on a small machine). A
            rank still starts without a process group, with the caller's current environment. A fork server
            that other code of this process started earlier keeps its own preloads: the ranks then import
            what they need themselves, as spawned ones do.
        preload: more modules for the fork server to import (``forkserver`` only; installed modules: the
            fork server does not see ``sys.path`` changes of this process).

    Returns:
        ``{rank: metrics}``; a rank that raised has ``{"error": ..., "traceback": ...}``, one that died
        without a word ``{"error": "exit code X"}``, one still alive at the deadline ``{"error": "killed after
        ... (hang)", "traceback": the Python stacks of its threads}`` (faulthandler, on SIGUSR1); each also has ``exitcode``, ``exit_s`` (seconds from
        the start of the launch to that rank's exit; None if it was killed) and ``wall_s`` (of the launch).

    Raises:
        ValueError: an unknown ``start_method``.
    """
    if start_method not in ("spawn", "forkserver"):
        raise ValueError(f"start_method={start_method!r}: expected 'spawn' or 'forkserver'")
    ctx = mp.get_context(start_method)
    environ = None
    if start_method == "forkserver":
        ctx.set_forkserver_preload([__name__, "torch._dynamo", *preload])
        environ = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        port = find_free_port()
        procs = [ctx.Process(target=_entry, args=(r, nprocs, port, argv, tmp, target or _run_argv, environ),
                             daemon=False)
                 for r in range(nprocs)]
        t0 = time.monotonic()
        for p in procs:
            p.start()
        exit_s: dict[int, float] = {}
        while len(exit_s) < nprocs:
            left = timeout_s - (time.monotonic() - t0)
            if left <= 0:
                break
            mp_connection.wait([p.sentinel for r, p in enumerate(procs) if r not in exit_s], timeout=left)
            now = time.monotonic() - t0
            for r, p in enumerate(procs):
                if r not in exit_s and p.exitcode is not None:
                    exit_s[r] = now
        wall = time.monotonic() - t0
        res: dict[int, dict[str, Any]] = {}
        hung = [p for p in procs if p.is_alive()]
        for p in hung:  # every thread's Python stack to rank{r}.stack (faulthandler, registered by _entry)
            with contextlib.suppress(OSError):
                os.kill(p.pid, signal.SIGUSR1)
        if hung:
            time.sleep(1.0)
        for r, p in enumerate(procs):
            if p.is_alive():
                p.kill()
                p.join(5)
                stack_file = Path(tmp) / f"rank{r}.stack"
                stack = stack_file.read_text(errors="replace") if stack_file.exists() else ""
                finished = (Path(tmp) / f"rank{r}.json").exists()
                res[r] = {"error": f"killed after {timeout_s:.0f}s (hang"
                                   f"{', after writing its result' if finished else ''})",
                          "traceback": stack[-6000:] or "(no stack: the rank hung before it could record one)"}
            p.join(5)
            f = Path(tmp) / f"rank{r}.json"
            if r not in res:
                res[r] = json.loads(f.read_text()) if f.exists() else {"error": f"exit code {p.exitcode}"}
            res[r]["exitcode"] = p.exitcode
            res[r]["exit_s"] = exit_s.get(r)
            res[r]["wall_s"] = wall
        return res


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code (1 with a one-line message on a distributed failure)."""
    cfg = build_parser().parse_args(argv)
    rank = os.environ.get("RANK", "0")
    logging.basicConfig(level=logging.INFO if rank == "0" else logging.WARNING,
                        format=f"[rank {rank}] %(asctime)s %(levelname)s %(message)s")
    try:
        res = train(cfg)
    except DistributedError as e:
        log.error("%s", e)
        return 1
    if cfg.metrics_out and res.get("rank") == 0:
        Path(cfg.metrics_out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.metrics_out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
