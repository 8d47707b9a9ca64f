"""The fixed small task used by the tests and the straggler benchmark (teacher-student regression).

A frozen random teacher MLP ``y = W2 tanh(W1 x + b1) + b2`` (``dim -> hidden -> 1``) labels Gaussian
inputs ``x ~ N(0, I_dim)`` with additive noise ``N(0, noise^2)``. The student has the same architecture,
so the minimum expected MSE is exactly ``noise^2`` (the Bayes error); ``target_loss`` defaults to
``5 * noise^2`` on a fixed evaluation set (reached in ~40 single-worker SGD steps at lr 0.2). Micro-batches are a deterministic function of
``(seed, rank, step, micro)``, so every rank has its own data shard and a run resumed from a checkpoint
sees the same data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


def _mlp(dim: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))


@dataclass
class ToyTask:
    """Teacher-student regression (see module docstring).

    Attributes:
        dim / hidden: MLP sizes. noise: label noise std (Bayes MSE = noise^2). batch_size: samples per
        micro-batch. seed: data seed. teacher_seed / eval_size: fixed teacher and evaluation set.
    """

    dim: int = 8
    hidden: int = 16
    noise: float = 0.1
    batch_size: int = 16
    seed: int = 0
    teacher_seed: int = 1234
    eval_size: int = 512

    def __post_init__(self) -> None:
        g = torch.Generator().manual_seed(self.teacher_seed)
        self.teacher = _mlp(self.dim, self.hidden)
        with torch.no_grad():
            for p in self.teacher.parameters():
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
        self.teacher.requires_grad_(False)
        ge = torch.Generator().manual_seed(self.teacher_seed + 1)
        self.eval_x = torch.randn(self.eval_size, self.dim, generator=ge)
        with torch.no_grad():
            self.eval_y = self.teacher(self.eval_x) + self.noise * torch.randn(self.eval_size, 1, generator=ge)

    @property
    def bayes_loss(self) -> float:
        """Minimum achievable expected MSE (= noise^2)."""
        return self.noise ** 2

    @property
    def default_target_loss(self) -> float:
        """Target eval MSE for time-to-target: ``5 * noise^2``."""
        return 5.0 * self.noise ** 2

    def build_model(self, seed: int = 0) -> nn.Module:
        """A freshly initialised student (same architecture as the teacher), seeded by ``seed``."""
        torch.manual_seed(10_000 + seed)
        return _mlp(self.dim, self.hidden)

    def batch(self, rank: int, step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Micro-batch ``(x (B, dim), y (B, 1))`` for this rank/step/micro-batch index (deterministic)."""
        g = torch.Generator().manual_seed(((self.seed * 1_000_003 + rank) * 1_000_033 + step) * 1009 + micro)
        x = torch.randn(self.batch_size, self.dim, generator=g)
        with torch.no_grad():
            y = self.teacher(x) + self.noise * torch.randn(self.batch_size, 1, generator=g)
        return x, y

    @staticmethod
    def loss_fn(model: nn.Module, mb: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        """Mean squared error of one micro-batch, and ``{"nsamples": B}``."""
        x, y = mb
        return torch.mean((model(x) - y) ** 2), {"nsamples": x.shape[0]}

    def eval_loss(self, model: nn.Module) -> float:
        """MSE on the fixed evaluation set (no grad)."""
        with torch.no_grad():
            return float(torch.mean((model(self.eval_x) - self.eval_y) ** 2))
