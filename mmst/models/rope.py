"""Rotary position embedding (RoPE; Su et al. 2021, "RoFormer", eq. 34) for the encoder self-attention.

Each head's query and key at stream position ``m`` are rotated pairwise: for ``j = 0 .. dh/2 - 1`` the pair
``(x_j, x_{j + dh/2})`` (the "rotate half" layout) is turned by the angle ``m * theta_j`` with
``theta_j = base^(-2j / dh)``, ``base = 10000``. Then ``<R(m) q, R(n) k> = <q, R(n - m) k>``: attention
scores depend only on the distance ``n - m``, so an encoder with a bounded left context gives the same
output for a chunk wherever it lies in an endless stream.

The angles are computed in float64 (``m * theta_j`` at ``m = 10^6`` keeps ~10 significant digits; float32
would keep ~1) and only their cosine and sine are cast to the model's dtype. Keys are cached already rotated,
so a streaming step rotates only its new rows.
"""

from __future__ import annotations

import torch

#: base of the rotary frequencies (Su et al. 2021)
ROPE_BASE = 10000.0


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, dtype: torch.dtype = torch.float32
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine and sine of the rotation angles of ``positions``.

    Args:
        positions: integer stream positions (encoder states, 40 ms each), any shape ``P``.
        head_dim: ``dh`` (even).
        dtype: dtype of the result (the angles themselves are float64).

    Returns:
        ``cos, sin``, each ``P + (dh,)``: entry ``[..., j]`` and ``[..., j + dh/2]`` hold the angle
        ``position * theta_j``.

    Raises:
        ValueError: ``head_dim`` is odd.
    """
    if head_dim % 2:
        raise ValueError(f"rotary positions need an even head dimension, got {head_dim}")
    half = head_dim // 2
    theta = ROPE_BASE ** (-torch.arange(half, dtype=torch.float64, device=positions.device) * 2.0 / head_dim)
    ang = positions.to(torch.float64)[..., None] * theta  # P + (dh/2,), float64
    ang = torch.cat([ang, ang], dim=-1)
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate queries or keys ``x (B, H, n, dh)`` by angles whose ``cos, sin`` broadcast to it
    (``(n, dh)`` for one stream, ``(B, 1, n, dh)`` for rows at different positions). Returns the same shape."""
    half = x.size(-1) // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)  # rotate half: (-x2, x1)
    return x * cos + rot * sin
