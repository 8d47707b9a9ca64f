"""Process-group set-up and fail-fast collectives for :mod:`mmst.distributed`.

* :func:`init_distributed` - ``init_process_group`` with gloo on CPU / NCCL on GPU, reading the usual
  ``torchrun`` environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).
  Without those variables it starts a 1-process group on a free local port, so every mode also runs
  as a plain ``python`` process.
* ``--dist-timeout`` (seconds) is passed to ``init_process_group(timeout=...)``: gloo applies it to every
  collective and point-to-point operation, NCCL to its watchdog. Every collective issued by this package
  goes through :func:`guard`, which turns a backend failure (a peer died: "Connection closed by peer";
  a peer hung: "Timed out ...") into a :class:`DistributedError` naming the rank, the operation and the
  timeout, so a dead rank yields a clear error within ``timeout`` seconds instead of a silent hang.

Note (gloo): a timed-out gloo operation closes its connections, so timeouts here are always the full
``--dist-timeout``; never poll with short timeouts on a gloo process group.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 300.0


class DistributedError(RuntimeError):
    """A collective or point-to-point operation failed: a peer rank died, hung past the timeout, or the
    process group could not be formed. The message names this rank, the operation and the timeout;
    ``mmst-train`` prints it as one error line and exits 1."""


@dataclass
class DistEnv:
    """Where this process sits in the job.

    Attributes:
        rank: global rank (0-based). world_size: number of processes. local_rank: rank on this node.
        backend: ``gloo`` or ``nccl``. device: torch device for the model and the buffers.
        timeout_s: the ``--dist-timeout`` (seconds) given to ``init_process_group``.
        owns_group: True when :func:`init_distributed` created the group (and should destroy it).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str = "gloo"
    device: torch.device = torch.device("cpu")
    timeout_s: float = DEFAULT_TIMEOUT_S
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        """True on rank 0 (the rank that logs, evaluates and writes checkpoints)."""
        return self.rank == 0


def find_free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (bind to port 0, read it back, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_distributed(backend: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                     device: str | None = None) -> DistEnv:
    """Join (or create) the default process group.

    Args:
        backend: ``gloo``, ``nccl`` or ``None`` (= ``nccl`` when CUDA is available, else ``gloo``).
        timeout_s: seconds before a collective / send / recv involving a dead or hung peer fails.
        device: override the device (default ``cuda:LOCAL_RANK`` for NCCL, else ``cpu``).

    Returns:
        A :class:`DistEnv`. When the group already exists it is reused (``owns_group=False``).

    Raises:
        DistributedError: the rendezvous failed (e.g. ``MASTER_ADDR`` unreachable) within ``timeout_s``.
    """
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(find_free_port()))
        os.environ["RANK"], os.environ["WORLD_SIZE"] = "0", "1"
        os.environ.setdefault("LOCAL_RANK", "0")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if device is None:
        device = f"cuda:{local_rank}" if backend == "nccl" else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    owns = False
    if not dist.is_initialized():
        tmo = datetime.timedelta(seconds=timeout_s)
        try:
            if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
                # Under torchrun the agent's TCPStore survives restarts; gloo's address keys from the
                # previous attempt would still be there (a restarted rank may connect to a dead peer's
                # old port). Prefix the keys with the restart count so each attempt rendezvous afresh.
                base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                                     is_master=False, timeout=tmo)
                attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
                store = dist.PrefixStore(f"mmst/attempt{attempt}", base)
                dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world, timeout=tmo)
            else:
                dist.init_process_group(backend=backend, rank=rank, world_size=world, timeout=tmo)
        except Exception as e:  # noqa: BLE001 - re-raised with context
            raise DistributedError(
                f"[rank {rank}/{world}] init_process_group({backend}) failed within {timeout_s:.0f}s "
                f"(MASTER_ADDR={os.environ.get('MASTER_ADDR')}, MASTER_PORT={os.environ.get('MASTER_PORT')}): {e}"
            ) from e
        owns = True
    return DistEnv(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                   backend=dist.get_backend(), device=dev, timeout_s=timeout_s, owns_group=owns)


def shutdown(env: DistEnv | None) -> None:
    """Destroy the default process group if :func:`init_distributed` created it (never raises)."""
    if env is not None and env.owns_group and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


_BACKEND_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, ConnectionError, TimeoutError)


@contextlib.contextmanager
def guard(what: str, env: DistEnv | None = None) -> Iterator[None]:
    """Context manager converting backend failures inside it into :class:`DistributedError`.

    Args:
        what: the operation, for the message (e.g. ``"all-reduce of gradients at step 12"``).
        env: for rank / timeout in the message (optional).

    Raises:
        DistributedError: if the body raised a ``RuntimeError`` (this includes
            ``torch.distributed.DistError`` / ``DistBackendError``), ``ConnectionError`` or ``TimeoutError``.
            The original exception is chained. ``DistributedError`` itself passes through unchanged.
    """
    try:
        yield
    except DistributedError:
        raise
    except _BACKEND_ERRORS as e:
        rank = env.rank if env else (dist.get_rank() if dist.is_initialized() else -1)
        world = env.world_size if env else (dist.get_world_size() if dist.is_initialized() else -1)
        tmo = f"{env.timeout_s:.0f}s" if env else "the --dist-timeout"
        msg = str(e).strip().splitlines()[0][:400] if str(e).strip() else type(e).__name__
        raise DistributedError(
            f"[rank {rank}/{world}] {what} failed: a peer rank probably died or hung "
            f"(--dist-timeout {tmo}). Backend error: {msg}") from e


def all_reduce_sum_(tensor: torch.Tensor, env: DistEnv, what: str = "all-reduce") -> torch.Tensor:
    """In-place SUM all-reduce under :func:`guard` (no-op for world size 1). Returns ``tensor``."""
    if env.world_size > 1:
        with guard(what, env):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_gather_tensor(tensor: torch.Tensor, env: DistEnv, what: str = "all-gather") -> torch.Tensor:
    """All-gather equally-shaped tensors under :func:`guard`; returns ``(world_size, *tensor.shape)``."""
    if env.world_size == 1:
        return tensor.unsqueeze(0).clone()
    out = [torch.empty_like(tensor) for _ in range(env.world_size)]
    with guard(what, env):
        dist.all_gather(out, tensor)
    return torch.stack(out)


def broadcast_module_(module: torch.nn.Module, env: DistEnv, src: int = 0) -> None:
    """Broadcast parameters and buffers of ``module`` from ``src`` (so all ranks start identical)."""
    if env.world_size == 1:
        return
    with guard("broadcast of initial parameters", env), torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(t.data, src=src)
