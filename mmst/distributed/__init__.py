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
(DropCompute's automatic threshold, :func:`~mmst.distributed.straggler_model.choose_tau`).
``mmst-train`` reaches these modes through :mod:`mmst.training.distributed`; the stand-alone runner on
a small synthetic task and the step-time predictions live in :mod:`mmst.simulation`.
This package imports nothing from :mod:`mmst.training`.
"""

from __future__ import annotations

from mmst.distributed.env import DistEnv, DistributedError, init_distributed

__all__ = ["DistEnv", "DistributedError", "init_distributed"]
