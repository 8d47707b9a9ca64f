"""Straggler-robust distributed training on ``torch.distributed`` (gloo on CPU, NCCL on GPU).

Modes (all work on any ``loss_fn(model, micro_batch) -> (loss, stats)`` step):

* :class:`~mmst.distributed.ddp.DDPStrategy` - ``--distributed ddp``: DistributedDataParallel with
  ``no_sync`` gradient accumulation (the synchronous baseline).
* :class:`~mmst.distributed.dropcompute.DropComputeStrategy` - ``--distributed dropcompute``:
  compute-threshold dropping (Giladi et al., NeurIPS 2023, arXiv:2306.10598).
* :class:`~mmst.distributed.param_server.ParamServer` / :class:`~mmst.distributed.param_server.ParamWorker`
  - ``--distributed param-server``: asynchronous parameter server on c10d send/recv, SSP bound.

Support: :mod:`~mmst.distributed.env` (process group, ``--dist-timeout``, :class:`DistributedError`),
:mod:`~mmst.distributed.stragglers` (delay injection), :mod:`~mmst.distributed.straggler_model`
(analytic step-time model), :mod:`~mmst.distributed.run` (stand-alone torchrun runner on the fixed
small task :mod:`~mmst.distributed.toy`), :mod:`~mmst.distributed.integration` (``mmst-train``
strategies; registered on import when :mod:`mmst.training` is available).
"""

from __future__ import annotations

from mmst.distributed.env import DistEnv, DistributedError, init_distributed

__all__ = ["DistEnv", "DistributedError", "init_distributed"]

try:  # make `mmst-train --distributed ddp|dropcompute|param-server` available
    from mmst.distributed.integration import register as _register

    _register()
except ImportError:  # pragma: no cover - trainer not installed
    pass
