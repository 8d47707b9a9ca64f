"""Building blocks: multi-head attention over ``scaled_dot_product_attention``, sinusoidal positions,
fairseq-like initialisation. Parameter names follow fairseq (``q_proj``, ``k_proj``, ``v_proj``,
``out_proj``, ``self_attn_layer_norm``, ``fc1``, ``fc2``, ``final_layer_norm``, ...) so fairseq
``s2t_transformer`` encoder weights map by name.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def sinusoidal_positions(positions: torch.Tensor, dim: int, padding_idx: int = 1) -> torch.Tensor:
    """fairseq ``SinusoidalPositionalEmbedding`` values for 0-based ``positions`` (any shape).

    fairseq numbers the first real position ``padding_idx + 1``; embedding of position p is
    ``[sin(p * w_j), cos(p * w_j)]`` with ``w_j = exp(-j * ln(10000) / (dim/2 - 1))`` (Vaswani et al.
    2017, sec. 3.5, in fairseq's half-sin/half-cos layout). Returns ``positions.shape + (dim,)`` float32.
    """
    half = dim // 2
    freq = torch.exp(
        torch.arange(half, dtype=torch.float32, device=positions.device) * -(math.log(10000.0) / (half - 1))
    )
    p = (positions.to(torch.float32) + (padding_idx + 1))[..., None] * freq
    return torch.cat([torch.sin(p), torch.cos(p)], dim=-1)


class MultiheadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017) with fairseq parameter names, computed with
    :func:`torch.nn.functional.scaled_dot_product_attention`.

    Keys/values may come pre-projected (``kv=(k, v)``, each ``(Bk, H, S, dh)``) for incremental
    decoding. If the key batch ``Bk`` divides the query batch ``Bq = G * Bk`` (query rows ordered
    group-major: row ``g * Bk + b`` uses key row b), queries are folded into the key batch so that a
    shared encoder output is projected once for G target streams (unified joint decoding/training).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """fairseq init: xavier_uniform (gain 1/sqrt(2)) for q/k/v, xavier_uniform for out, zero bias."""
        for lin in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(lin.weight, gain=1 / math.sqrt(2))
            nn.init.zeros_(lin.bias)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, S, D)`` -> keys, values ``(B, H, S, dh)``."""
        return self._heads(self.k_proj(x)), self._heads(self.v_proj(x))

    def project_q(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, L, D)`` -> queries ``(B, H, L, dh)``."""
        return self._heads(self.q_proj(x))

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Attention of projected ``q (Bq,H,L,dh)`` over ``k, v (Bk,H,S,dh)`` -> ``(Bq, L, D)``.

        ``attn_mask``: bool, ``True`` = attend, shape ``(Bq or Bk or 1, L, S)`` or already 4-D
        ``(Bq|1, 1|H, L, S)``. Raises ``ValueError`` if ``Bq`` is not a multiple of ``Bk``.
        """
        bq, h, n_q, dh = q.shape
        bk = k.size(0)
        drop = self.dropout if self.training else 0.0
        if attn_mask is not None and attn_mask.dim() == 3:
            attn_mask = attn_mask[:, None]
        if bq != bk:
            if bq % bk:
                raise ValueError(f"query batch {bq} is not a multiple of key batch {bk}")
            g = bq // bk
            qf = q.view(g, bk, h, n_q, dh).permute(1, 2, 0, 3, 4).reshape(bk, h, g * n_q, dh)
            if attn_mask is not None:
                mb, mh = attn_mask.shape[:2]
                if mb == bq:
                    m = attn_mask.reshape(g, bk, mh, n_q, -1).permute(1, 2, 0, 3, 4).reshape(bk, mh, g * n_q, -1)
                else:  # (Bk or 1, H or 1, L, S): same mask for every group
                    m = attn_mask.repeat(1, 1, g, 1)
                attn_mask = m
            o = F.scaled_dot_product_attention(qf, k, v, attn_mask=attn_mask, dropout_p=drop)
            o = o.view(bk, h, g, n_q, dh).permute(2, 0, 3, 1, 4).reshape(bq, n_q, h * dh)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=drop)
            o = o.transpose(1, 2).reshape(bq, n_q, h * dh)
        return self.out_proj(o)

    def weights(self, q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        """Attention probabilities of projected ``q (Bq, H, L, dh)`` over ``k (Bk, H, S, dh)``:
        ``softmax(q k^T / sqrt(dh))`` with masked keys at 0 -> ``(Bq, H, L, S)`` (rows sum to 1).

        Computed apart from :meth:`attend` (which uses the fused kernel), so reading the weights never
        changes the layer's output. ``attn_mask`` as in :meth:`attend`; ``Bk`` must divide ``Bq``
        (query row ``g * Bk + b`` reads key row b)."""
        bq, bk = q.size(0), k.size(0)
        if bq != bk:
            if bq % bk:
                raise ValueError(f"query batch {bq} is not a multiple of key batch {bk}")
            k = k.repeat(bq // bk, 1, 1, 1)
        s = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(q.size(-1))  # (Bq, H, L, S)
        if attn_mask is not None:
            m = attn_mask[:, None] if attn_mask.dim() == 3 else attn_mask
            if m.size(0) not in (1, bq):
                m = m.repeat(bq // m.size(0), 1, 1, 1)
            s = s.masked_fill(~m, float("-inf"))
        return torch.softmax(s, dim=-1)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        kv: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``query (Bq, L, D)``; keys/values from ``key (Bk, S, D)`` (default: query) or pre-projected
        ``kv``. Returns ``(Bq, L, D)``."""
        if kv is None:
            kv = self.project_kv(query if key is None else key)
        return self.attend(self.project_q(query), kv[0], kv[1], attn_mask)


def residual_dropout(x: torch.Tensor, a: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``x + dropout(a)``: a sub-layer's residual connection; ``(B, n, D)`` -> same."""
    return x + F.dropout(a, p, training)


def residual_dropout_norm(x: torch.Tensor, a: torch.Tensor, p: float, training: bool, weight: torch.Tensor,
                          bias: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``y = x + dropout(a)`` and the next sub-layer's pre-LN input ``layer_norm(y)``; ``(B, n, D)`` each."""
    y = x + F.dropout(a, p, training)
    return y, F.layer_norm(y, (y.size(-1),), weight, bias, eps)


def relu_dropout(h: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``dropout(relu(h))``: the FFN's activation; ``(B, n, F)`` -> same."""
    return F.dropout(F.relu(h), p, training)


class ElementwiseBlocks:
    """The elementwise work between a Transformer layer's matrix products, as replaceable callables:
    :func:`residual_dropout`, :func:`residual_dropout_norm` and :func:`relu_dropout`.

    Every layer holds one (attribute ``blocks``); ``mmst.training.compile`` gives the layers of a model one
    whose callables are compiled (training config ``compile: blocks``), so inductor fuses each block into
    one kernel while the matrix products stay eager (oneDNN / cuBLAS).
    """

    def __init__(self, wrap=None) -> None:
        w = wrap or (lambda f: f)
        self.residual_dropout = w(residual_dropout)
        self.residual_dropout_norm = w(residual_dropout_norm)
        self.relu_dropout = w(relu_dropout)

    def norm(self, x: torch.Tensor, a: torch.Tensor, p: float, training: bool,
             ln: nn.LayerNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`residual_dropout_norm` with the parameters of ``ln``."""
        return self.residual_dropout_norm(x, a, p, training, ln.weight, ln.bias, ln.eps)


#: The eager blocks every layer starts with.
EAGER_BLOCKS = ElementwiseBlocks()


def init_linear(lin: nn.Linear) -> nn.Linear:
    """fairseq FFN init: xavier_uniform weight, zero bias. Returns the layer."""
    nn.init.xavier_uniform_(lin.weight)
    if lin.bias is not None:
        nn.init.zeros_(lin.bias)
    return lin



class SeqBuffer:
    """Append-only tensor that grows along one dimension with capacity doubling.

    ``append(x)`` copies ``x`` into preallocated storage and returns a view of everything appended
    so far; storage is reallocated (doubled) only when full, so appending ``N`` rows in total costs
    ``O(N)`` copies (amortised) instead of the ``O(N^2)`` of repeated ``torch.cat``. Used for the
    streaming key/value caches and buffers (one utterance, growing with the stream).

    When autograd records the appended tensor (``x.requires_grad`` under grad mode) the buffer falls
    back to ``torch.cat`` (in-place writes into storage that earlier graph nodes saved would be an
    autograd error); incremental decoding runs under ``no_grad`` and takes the fast path.

    On an endless stream the rows nobody reads any more are dropped with :meth:`drop_front`; ``start`` then
    counts the rows dropped, so row ``r`` of :meth:`view` is stream row ``start + r`` and ``end`` is the
    stream row after the last one appended.

    Args:
        dim: the growing dimension (negative allowed).
        min_capacity: smallest allocation along ``dim`` (rows).
    """

    __slots__ = ("dim", "min_capacity", "_buf", "length", "start")

    #: benchmarking switch: True restores the old behaviour (``torch.cat`` of the whole history at
    #: every append), to measure the gain in the same run (``bench/bench_streaming.py --kv-cat``).
    use_cat = False

    def __init__(self, dim: int, min_capacity: int = 16) -> None:
        self.dim = dim
        self.min_capacity = min_capacity
        self._buf: torch.Tensor | None = None
        self.length = 0
        self.start = 0

    @property
    def end(self) -> int:
        """Stream row after the last one appended (``start + length``)."""
        return self.start + self.length

    def drop_front(self, first: int) -> int:
        """Forget the rows before stream row ``first`` (clipped to ``[start, end]``); returns how many went.

        The kept rows move to a new allocation of ``max(2 * kept, min_capacity)`` rows, so memory follows
        what is kept. The copy costs the kept rows: callers drop once the dead rows are as many as the kept
        ones (:func:`drop_front_amortised`), which keeps the cost O(1) per appended row.
        """
        n = min(max(0, first - self.start), self.length)
        if n == 0:
            return 0
        kept = self.length - n
        if self._buf is not None:
            rest = self._buf.narrow(self.dim, n, kept)
            shape = list(rest.shape)
            shape[self.dim] = max(2 * kept, self.min_capacity)
            buf = rest.new_empty(shape)
            buf.narrow(self.dim, 0, kept).copy_(rest)
            self._buf = buf
        self.length = kept
        self.start += n
        return n

    @property
    def capacity(self) -> int:
        """Rows allocated along ``dim``."""
        return 0 if self._buf is None else self._buf.size(self.dim)

    def view(self) -> torch.Tensor | None:
        """Everything appended so far (a view of the storage), or None when empty."""
        if self._buf is None:
            return None
        return self._buf.narrow(self.dim, 0, self.length)

    def append(self, x: torch.Tensor) -> torch.Tensor:
        """Append ``x`` (same shape as the buffer except along ``dim``); returns :meth:`view`."""
        n = x.size(self.dim)
        need = self.length + n
        if SeqBuffer.use_cat or (torch.is_grad_enabled() and x.requires_grad):
            old = self.view()
            self._buf = x if old is None else torch.cat([old, x], dim=self.dim)
            self.length = need
            return self._buf
        if self._buf is None or need > self._buf.size(self.dim):
            cap = max(need, 2 * self.capacity, self.min_capacity)
            shape = list(x.shape)
            shape[self.dim] = cap
            buf = x.new_empty(shape)
            if self.length:
                buf.narrow(self.dim, 0, self.length).copy_(self.view())
            self._buf = buf
        self._buf.narrow(self.dim, self.length, n).copy_(x)
        self.length = need
        return self.view()

    def index_select(self, dim: int, index: torch.Tensor) -> SeqBuffer:
        """A new buffer with rows ``index`` of dimension ``dim`` (e.g. beam reordering), same capacity."""
        out = SeqBuffer(self.dim, self.min_capacity)
        out.start = self.start
        if self._buf is not None:
            out._buf = self._buf.index_select(dim, index)
            out.length = self.length
        return out


def drop_front_amortised(buf: SeqBuffer | KVCache, first: int, min_rows: int = 64) -> int:
    """:meth:`SeqBuffer.drop_front` of the rows before stream row ``first``, but only once they are at least
    as many as the rows kept and at least ``min_rows`` (so each row is copied O(1) times on an endless
    stream, and memory stays within a small factor of what is kept). Returns the rows dropped (0 if
    postponed)."""
    dead = first - buf.start
    if dead < max(min_rows, buf.end - first):
        return 0
    return buf.drop_front(first)


class KVCache:
    """Growing key/value cache for one attention layer: keys and values ``(B, H, S, dh)``, appended along
    S with :class:`SeqBuffer` (capacity doubling, no per-step ``torch.cat`` of the whole history)."""

    __slots__ = ("k", "v")

    def __init__(self, min_capacity: int = 16) -> None:
        self.k = SeqBuffer(2, min_capacity)
        self.v = SeqBuffer(2, min_capacity)

    @property
    def length(self) -> int:
        """Cached positions S."""
        return self.k.length

    @property
    def start(self) -> int:
        """Positions dropped from the front (:meth:`drop_front`): cached position ``i`` is stream position
        ``start + i``."""
        return self.k.start

    @property
    def end(self) -> int:
        """Stream position after the last cached one (``start + length``)."""
        return self.k.end

    def drop_front(self, first: int) -> int:
        """Forget the keys/values before stream position ``first`` (:meth:`SeqBuffer.drop_front`)."""
        self.v.drop_front(first)
        return self.k.drop_front(first)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``k, v (B, H, n, dh)``; returns views of all cached keys, values ``(B, H, S, dh)``."""
        return self.k.append(k), self.v.append(v)

    def get(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Views ``(k, v)`` of the cache, or None when empty."""
        if self.k.length == 0:
            return None
        return self.k.view(), self.v.view()

    def truncate(self, length: int) -> None:
        """Forget the positions after the first ``length`` (undo appends; the storage is kept)."""
        if not 0 <= length <= self.k.length:
            raise ValueError(f"cannot truncate a cache of {self.k.length} positions to {length}")
        self.k.length = self.v.length = length

    def reorder(self, index: torch.Tensor) -> KVCache:
        """A new cache with batch rows ``index (B',)`` (beam search)."""
        out = KVCache()
        out.k = self.k.index_select(0, index)
        out.v = self.v.index_select(0, index)
        return out
