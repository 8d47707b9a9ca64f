"""Speech encoder: fairseq-style conv subsampler + pre-LN Transformer encoder, with an exact
incremental (streaming) form for the chunk-causal attention mode.

Conv subsampler (fairseq ``Conv1dSubsampler``): ``len(conv_kernel_sizes)`` Conv1d layers (kernel 5,
stride 2, padding 2), each followed by GLU over channels; 2 layers => 4x downsampling, so one encoder
state = 40 ms of 10 ms fbank frames. Output length per layer: ``floor((L - 1) / 2) + 1``.

Receptive field and streaming. With kernel 5 / stride 2 / padding 2 twice, encoder state s depends on
fbank frames ``4s-6 .. 4s+6``: 60 ms of look-ahead, and the last states of an utterance see the zero
right-padding. Our choice (documented in docs/models.md): the training forward is the plain
non-causal conv (as fairseq, so pretrained fairseq encoders load), but padded frames are zeroed and
the first conv layer's outputs beyond each utterance's valid length are zeroed before the second
layer, so a batched utterance gives exactly what it would alone (= what a zero-padded stream gives).
:class:`EncoderStream` then computes a conv output only once all input rows of its receptive field
have arrived (or the source is finished, when the remaining outputs see the same zero padding), and
runs the Transformer layers only on complete pre-decision chunks with cached keys/values. Hence the
states of every chunk equal the full-sequence chunk-causal forward (to float rounding, ~1e-6) and
never change as speech arrives. The cost is the conv look-ahead: chunk j is final once
``4 * j * R + 3`` fbank frames have been computed, i.e. ``j * R * 40 + 45`` ms of audio (30 ms of
conv look-ahead plus the 25 ms analysis window of the last frame, minus one 10 ms shift).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .layers import (
    EAGER_BLOCKS,
    KVCache,
    MultiheadAttention,
    SeqBuffer,
    drop_front_amortised,
    init_linear,
    sinusoidal_positions,
)
from .masks import chunk_causal_mask, lengths_to_padding_mask
from .rope import apply_rotary, rotary_cos_sin
from .stacked import Steps, run_alone


@dataclass
class EncoderOut:
    """Encoder output.

    Attributes:
        states: ``(B, S, D)`` float, after the final layer norm (1 state = 40 ms).
        padding_mask: ``(B, S)`` bool, ``True`` = pad.
        lengths: ``(B,)`` long, valid states per utterance.
    """

    states: torch.Tensor
    padding_mask: torch.Tensor
    lengths: torch.Tensor


def _conv_out_len(n: int | torch.Tensor, kernel: int, finished: bool = True):
    """Outputs of a stride-2, padding ``kernel // 2`` conv over ``n`` inputs.

    ``finished=True``: all outputs (``floor((n + 2p - k) / 2) + 1``, zero right padding);
    ``finished=False``: only outputs whose receptive field lies inside the ``n`` available inputs.
    """
    p = kernel // 2
    if finished:
        if isinstance(n, torch.Tensor):
            return torch.div(n + 2 * p - kernel, 2, rounding_mode="floor") + 1
        return 0 if n <= 0 else (n + 2 * p - kernel) // 2 + 1
    m = n - kernel + p
    return 0 if m < 0 else m // 2 + 1


class Conv1dSubsampler(nn.Module):
    """fairseq ``Conv1dSubsampler``: Conv1d(k, stride 2, pad k//2) + GLU per layer.

    ``(B, T, in_channels)`` -> ``(B, S, out_channels)`` with ``S = T`` downsampled 2x per layer.
    """

    def __init__(self, in_channels: int, mid_channels: int, out_channels: int, kernel_sizes: list[int]) -> None:
        super().__init__()
        n = len(kernel_sizes)
        self.kernel_sizes = [int(k) for k in kernel_sizes]
        self.conv_layers = nn.ModuleList(
            nn.Conv1d(
                in_channels if i == 0 else mid_channels // 2,
                mid_channels if i < n - 1 else out_channels * 2,
                k,
                stride=2,
                padding=k // 2,
            )
            for i, k in enumerate(self.kernel_sizes)
        )

    def out_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """``(B,)`` frame counts -> ``(B,)`` encoder-state counts."""
        out = lengths.long()
        for k in self.kernel_sizes:
            out = _conv_out_len(out, k)
        return out

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x (B, T, C)``, ``lengths (B,)`` -> ``(B, S, D)``, ``(B,)`` output lengths.

        Inputs beyond ``lengths`` and intermediate outputs beyond each layer's valid length are zeroed,
        so every utterance is encoded as if alone (zero-padded).
        """
        t = x.size(1)
        x = x.masked_fill(lengths_to_padding_mask(lengths, t)[:, :, None], 0.0).transpose(1, 2)
        n = lengths.long()
        last = len(self.conv_layers) - 1
        for i, conv in enumerate(self.conv_layers):
            x = F.glu(conv(x), dim=1)
            n = _conv_out_len(n, self.kernel_sizes[i])
            if i < last:
                x = x.masked_fill(lengths_to_padding_mask(n, x.size(2))[:, None, :], 0.0)
        return x.transpose(1, 2), n

    def conv_range(
        self, layer: int, inp: torch.Tensor, n_total: int | None, out_start: int, out_end: int, inp_start: int = 0
    ) -> torch.Tensor:
        """Outputs ``[out_start, out_end)`` of conv layer ``layer`` (+GLU) for one utterance.

        Args:
            layer: conv layer index.
            inp: ``(N, C_in)`` the input rows kept so far (row r = input position ``inp_start + r``).
            n_total: total input length if the source is finished (rows ``>= n_total`` are the zero
                padding), else None (then every needed row must be available).
            out_start, out_end: output positions.
            inp_start: input position of ``inp``'s first row (rows before it were dropped on a long stream).

        Returns ``(out_end - out_start, C_out)``. Raises ``ValueError`` if a needed row is missing (not yet
        arrived, or already dropped).
        """
        conv = self.conv_layers[layer]
        k = self.kernel_sizes[layer]
        p = k // 2
        lo = 2 * out_start - p
        hi = 2 * (out_end - 1) - p + k  # exclusive
        n_avail = inp_start + inp.size(0)
        if hi > n_avail and (n_total is None or n_avail < n_total):
            raise ValueError("conv_range: receptive field not yet available")
        start, end = max(lo, 0), min(hi, n_avail)
        if start < inp_start:
            raise ValueError(f"conv_range: input row {start} was dropped (rows kept from {inp_start})")
        window = inp[start - inp_start:end - inp_start].transpose(0, 1)[None]
        window = F.pad(window, (start - lo, hi - end))
        y = F.glu(F.conv1d(window, conv.weight, conv.bias, stride=2), dim=1)
        return y[0].transpose(0, 1)


class TransformerEncoderLayer(nn.Module):
    """Pre-LN Transformer encoder layer (fairseq ``encoder_normalize_before=True``); ``(B, S, D)`` -> same."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.self_attn = MultiheadAttention(d, cfg.attention_heads, cfg.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = init_linear(nn.Linear(d, cfg.ffn_dim))
        self.fc2 = init_linear(nn.Linear(cfg.ffn_dim, d))
        self.final_layer_norm = nn.LayerNorm(d)
        self.dropout = cfg.dropout
        self.activation_dropout = cfg.activation_dropout
        self.blocks = EAGER_BLOCKS  # the elementwise work (layers.ElementwiseBlocks)

    def _attn_ffn(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Residual of the attention output ``a``, then the FFN sub-layer with its residual."""
        b = self.blocks
        x, h = b.norm(x, a, self.dropout, self.training, self.final_layer_norm)
        h = b.relu_dropout(self.fc1(h), self.activation_dropout, self.training)
        return b.residual_dropout(x, self.fc2(h), self.dropout, self.training)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """``x (B, S, D)``, ``attn_mask`` bool broadcastable to ``(B, H, S, S)`` (True = attend); ``rope``:
        ``(cos, sin)`` of the states' positions, broadcastable to ``(B, H, S, dh)`` (rotary positions,
        :mod:`mmst.models.rope`), or None (the positions were added to the input)."""
        h = self.self_attn_layer_norm(x)
        if rope is None:
            return self._attn_ffn(x, self.self_attn(h, attn_mask=attn_mask))
        att = self.self_attn
        k, v = att.project_kv(h)
        q = apply_rotary(att.project_q(h), *rope)
        return self._attn_ffn(x, att.attend(q, apply_rotary(k, *rope), v, attn_mask))

    def forward_incremental(
        self,
        x: torch.Tensor,
        cache: tuple[torch.Tensor, torch.Tensor] | KVCache | None,
        attn_mask: torch.Tensor | None,
        key_start: int = 0,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """New states ``x (B, n, D)`` attend cached keys/values ``(B, H, S_prev, dh)`` plus their own.

        ``cache``: a tuple (concatenated, O(S) copy) or a :class:`KVCache` (appended in place,
        amortised O(n)). ``key_start``: attend only cached keys ``>= key_start`` (an index into the
        cache, limited left context; ``attn_mask`` then covers keys ``[key_start, S)``). ``rope``:
        ``(cos, sin)`` of the new states' positions (``(n, dh)``): their queries and keys are rotated, and
        the keys are cached rotated. Returns the layer output ``(B, n, D)`` and all keys/values
        ``(B, H, S, dh)``.
        """
        h = self.self_attn_layer_norm(x)
        k, v = self.self_attn.project_kv(h)
        q = self.self_attn.project_q(h)
        if rope is not None:
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        if isinstance(cache, KVCache):
            k, v = cache.append(k, v)
        elif cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        ka, va = (k, v) if key_start == 0 else (k[:, :, key_start:], v[:, :, key_start:])
        a = self.self_attn.attend(q, ka, va, attn_mask)
        return self._attn_ffn(x, a), (k, v)


class SpeechEncoder(nn.Module):
    """Conv subsampler + positions + pre-LN Transformer encoder.

    ``forward(fbank (B, T, 80), lengths (B,)) -> EncoderOut`` with ``S ~= T / 4`` states.
    Attention mode ``cfg.encoder_attention``: ``"offline"`` (bidirectional) or ``"chunk-causal"``
    (state s attends states of chunks ``<= s // R``; see :mod:`mmst.models.masks`).
    Positions ``cfg.encoder_pos_enc_type``: ``"abs"`` (sinusoidal, added to the input, fairseq) or ``"rope"``
    (rotary, in every self-attention layer, :mod:`mmst.models.rope`: scores depend only on distances).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.subsample = Conv1dSubsampler(cfg.input_dim, cfg.conv_channels, d, cfg.conv_kernel_sizes)
        self.embed_scale = math.sqrt(d)
        self.dropout = cfg.dropout
        self.layers = nn.ModuleList(TransformerEncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.layer_norm = nn.LayerNorm(d)
        self.attention = cfg.encoder_attention
        self.ratio = cfg.pre_decision_ratio
        self.left_chunks = int(getattr(cfg, "encoder_left_chunks", 0) or 0)
        self.pos_enc_type = str(getattr(cfg, "encoder_pos_enc_type", "abs"))
        self.d_model = d
        self.head_dim = d // cfg.attention_heads

    def embed(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Scale conv output ``(B, S, D)`` by sqrt(D), add positions ``offset..offset+S-1`` (``"abs"``; with
        ``"rope"`` the positions enter the attention instead), dropout."""
        x = self.embed_scale * x
        if self.pos_enc_type == "abs":
            pos = sinusoidal_positions(torch.arange(offset, offset + x.size(1), device=x.device), self.d_model)
            x = x + pos.to(x.dtype)
        return F.dropout(x, self.dropout, self.training)

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(cos, sin)`` of the rotary angles of integer state ``positions`` (shape ``P``; each result
        ``P + (dh,)``, the model's dtype), or None when the positions are ``"abs"``."""
        if self.pos_enc_type != "rope":
            return None
        return rotary_cos_sin(positions, self.head_dim, self.layer_norm.weight.dtype)

    def forward(self, fbank: torch.Tensor, lengths: torch.Tensor, offset: int = 0) -> EncoderOut:
        """Full-sequence encoding. ``fbank (B, T, C)`` float, ``lengths (B,)`` frames (>= 1); ``offset``: the
        stream position of the first state (default 0; states are numbered ``offset, offset + 1, ...``)."""
        x, n = self.subsample(fbank, lengths)
        s = x.size(1)
        x = self.embed(x, offset)
        rope = self.rotary(torch.arange(offset, offset + s, device=x.device))
        pad = lengths_to_padding_mask(n, s)
        mask = ~pad[:, None, None, :]
        if self.attention == "chunk-causal":
            mask = mask & chunk_causal_mask(s, s, self.ratio, device=x.device, left_chunks=self.left_chunks)[None, None]
        for layer in self.layers:
            x = layer(x, mask, rope)
        return EncoderOut(self.layer_norm(x), pad, n)

    input_kind = "fbank"  # reads 10 ms log-mel frames (a waveform encoder says "waveform")

    def num_states(self, num_inputs: int, finished: bool) -> int:
        """States of ``num_inputs`` fbank frames: all (``finished``: the last see the zero padding), else
        those whose conv receptive field lies inside the frames received."""
        n = int(num_inputs)
        for k in self.subsample.kernel_sizes:
            n = _conv_out_len(n, k, finished=finished)
        return n

    def stream(self) -> EncoderStream:
        """A new :class:`EncoderStream` (chunk-causal mode only) for one utterance."""
        return EncoderStream(self)


class EncoderStream:
    """Incremental chunk-causal encoding of ONE utterance, exactly equal to the full forward.

    Feed fbank frames as they arrive with :meth:`accept_frames`; it returns the encoder states that
    became final (whole pre-decision chunks; at the end also the last partial chunk). Conv outputs are
    computed only when their receptive field is complete (see module docstring); Transformer layers
    keep per-layer key/value caches. Use with the model in ``eval()`` mode and under ``no_grad``.

    Memory on an endless stream. The conv input rows that no later conv output reads are dropped as
    the stream goes. With ``encoder_left_chunks = L > 0`` each layer's key/value cache keeps only the keys
    a later chunk may attend (the last ``L`` chunks, ``L * R`` states; rows go in amortised batches,
    :func:`~mmst.models.layers.drop_front_amortised`). The final states are kept until the caller says
    that no decoder reads them any more (:meth:`forget_states_before`). Indices stay absolute stream
    positions: :attr:`states` starts at state :attr:`states_start`.

    Raises:
        ValueError: the encoder is not chunk-causal, or frames arrive after ``finished=True``.
    """

    def __init__(self, encoder: SpeechEncoder) -> None:
        if encoder.attention != "chunk-causal":
            raise ValueError("incremental encoding needs encoder_attention='chunk-causal'")
        self.encoder = encoder
        n_layers = len(encoder.subsample.conv_layers)
        # inputs of each conv layer + output, (n, C) rows (capacity doubling; rows nobody reads are dropped)
        self._bufs: list[SeqBuffer] = [SeqBuffer(0, 256) for _ in range(n_layers + 1)]
        self._pending: torch.Tensor | None = None  # embedded conv outputs not yet encoded (n, D)
        self._cache: list[KVCache] = [KVCache(64) for _ in encoder.layers]
        self._states = SeqBuffer(1, 64)  # final states (1, S, D)
        self.num_frames = 0
        self.num_states = 0  # final encoder states
        self.finished = False

    @property
    def states(self) -> torch.Tensor:
        """The final states kept, ``(1, num_states - states_start, D)`` (may be empty): row ``r`` is stream
        state ``states_start + r``."""
        st = self._states.view()
        if st is None:
            p = next(self.encoder.parameters())
            return torch.zeros(1, 0, self.encoder.d_model, dtype=p.dtype, device=p.device)
        return st

    @property
    def states_start(self) -> int:
        """Stream position of the first final state kept (0 until :meth:`forget_states_before` drops some)."""
        return self._states.start

    def forget_states_before(self, first: int) -> int:
        """No reader needs the final states before stream state ``first`` any more: they may go. They are
        dropped in amortised batches (once at least as many as the states kept, and at least 64), so
        :attr:`states_start` may stay below ``first``. Returns the states dropped now.

        Raises:
            ValueError: ``first`` is after the states encoded.
        """
        if first > self.num_states:
            raise ValueError(f"forget_states_before({first}): only {self.num_states} states were encoded")
        return drop_front_amortised(self._states, first)

    @property
    def num_chunks(self) -> int:
        """Number of (complete, or final partial) chunks encoded so far."""
        return -(-self.num_states // self.encoder.ratio)

    @torch.no_grad()
    def accept_frames(self, frames: torch.Tensor | np.ndarray, finished: bool = False) -> torch.Tensor:
        """Append fbank frames ``(n, C)`` (CMVN applied; n may be 0) and encode what became final.

        Args:
            frames: new frames, 10 ms each.
            finished: True when these are the last frames of the source.

        Returns:
            ``(1, n_new, D)`` newly final encoder states (chunk-aligned unless ``finished``).
        """
        return run_alone(self.accept_frames_steps(frames, finished))

    def accept_frames_steps(self, frames: torch.Tensor | np.ndarray, finished: bool = False) -> Steps:
        """:meth:`accept_frames` as a generator (:mod:`mmst.models.stacked`): the conv subsampler runs
        here; the Transformer layers are one yielded :class:`EncoderBlock` request (when a block is
        ready), so several streams' blocks can be stacked into one call."""
        with torch.no_grad():
            block = self._prepare(frames, finished)
        if block is None:
            return self.states[:, :0]
        h = yield block
        self._states.append(h)
        self.num_states += block.x.size(1)
        enc = self.encoder
        if enc.left_chunks:  # keys before the next block's first visible chunk are never attended again
            first = max(0, (self.num_states // enc.ratio - enc.left_chunks) * enc.ratio)
            for c in self._cache:
                drop_front_amortised(c, first)
        return h

    def _prepare(self, frames: torch.Tensor | np.ndarray, finished: bool) -> EncoderBlock | None:
        """Conv outputs of the new frames; the block of pending states that became final (or None)."""
        if self.finished:
            raise ValueError("EncoderStream: source already finished")
        enc = self.encoder
        p = next(enc.parameters())
        x = torch.as_tensor(np.asarray(frames) if not isinstance(frames, torch.Tensor) else frames)
        x = x.to(device=p.device, dtype=p.dtype).reshape(-1, enc.subsample.conv_layers[0].in_channels)
        self.finished = finished
        self.num_frames += x.size(0)
        bufs = self._bufs
        if x.size(0):
            bufs[0].append(x)
        # conv layers: compute newly computable outputs (buffer ends are stream positions)
        for i, k in enumerate(enc.subsample.kernel_sizes):
            n_in, done = bufs[i].end, bufs[i + 1].end
            ready = _conv_out_len(n_in, k, finished=finished)
            if ready > done:
                bufs[i + 1].append(enc.subsample.conv_range(i, bufs[i].view(), n_in if finished else None, done,
                                                            ready, bufs[i].start))
        n_conv = bufs[-1].end
        n_have = self.num_states + (0 if self._pending is None else self._pending.size(0))
        if n_conv > n_have:
            first = bufs[-1].start
            new = enc.embed(bufs[-1].view()[n_have - first:n_conv - first][None], offset=n_have)[0]
            self._pending = new if self._pending is None else torch.cat([self._pending, new], dim=0)
        self._drop_conv_rows(n_conv)
        if self._pending is None:
            return None
        n_pend = self._pending.size(0)
        n_enc = n_pend if finished else (n_pend // enc.ratio) * enc.ratio
        if n_enc == 0:
            return None
        block = self._pending[:n_enc][None]
        self._pending = self._pending[n_enc:] if n_enc < n_pend else None
        off = self.num_states  # a multiple of R (only the final block may be partial)
        # limited left context: keys before chunk (first new chunk - left_chunks) are never attended
        key_start = max(0, (off // enc.ratio - enc.left_chunks) * enc.ratio) if enc.left_chunks else 0
        if n_enc <= enc.ratio:  # one chunk: it sees all (visible) cached states and itself, no mask
            mask = None
        else:
            mask = chunk_causal_mask(n_enc, off + n_enc - key_start, enc.ratio, query_offset=off, device=block.device,
                                     left_chunks=enc.left_chunks, key_offset=key_start)
        return EncoderBlock(self, block, key_start, mask, off)

    def _drop_conv_rows(self, n_embedded: int) -> None:
        """Drop the conv rows no later output reads: the next output ``o`` of conv layer ``i`` reads its inputs
        from ``2 * o - k_i // 2`` on; the last conv's outputs once embedded (``n_embedded`` of them)."""
        for i, k in enumerate(self.encoder.subsample.kernel_sizes):
            drop_front_amortised(self._bufs[i], 2 * self._bufs[i + 1].end - k // 2)
        drop_front_amortised(self._bufs[-1], n_embedded)


@dataclass
class EncoderBlock:
    """Compute request (:mod:`mmst.models.stacked`): the Transformer layers over one stream's new block.

    Attributes:
        stream: the :class:`EncoderStream` (its per-layer key/value caches are appended).
        x: ``(1, n, D)`` embedded conv outputs of the new states (whole chunks unless finished).
        key_start: first key the block may attend, a stream position (limited left context; 0 = all).
        mask: ``(n, S - key_start)`` bool chunk-causal mask over keys ``[key_start, S)``, ``S`` = cached +
            new states, True = attend; None = attend every such key (a single chunk).
        start: stream position of the block's first state (its rotary positions).

    The result is the block's final states ``(1, n, D)`` (after the encoder's final layer norm).
    """
    stage = 1  # pipeline order: VAD 0, encoder 1, decoder 2 (ties in run_stacked)

    stream: EncoderStream
    x: torch.Tensor
    key_start: int
    mask: torch.Tensor | None
    start: int = 0

    def stack_key(self) -> tuple:
        return ("encoder", id(self.stream.encoder))

    def save_state(self):
        """A function that truncates the stream's key/value caches back to their present lengths (undoes
        this block's appends after a failed stacked call, :mod:`mmst.models.stacked`)."""
        lengths = [c.length for c in self.stream._cache]

        def restore() -> None:
            for c, n in zip(self.stream._cache, lengths):
                c.truncate(n)
        return restore

    @torch.no_grad()
    def run(self) -> torch.Tensor:
        """This block alone: each layer attends this stream's cache plus the block."""
        enc = self.stream.encoder
        mask = None if self.mask is None else self.mask[None, None]
        rope = enc.rotary(torch.arange(self.start, self.start + self.x.size(1), device=self.x.device))
        h = self.x
        for layer, cache in zip(enc.layers, self.stream._cache):
            h, _ = layer.forward_incremental(h, cache, mask, self.key_start - cache.start, rope)
        return enc.layer_norm(h)

    @classmethod
    @torch.no_grad()
    def run_stacked(cls, blocks: list[EncoderBlock]) -> list[torch.Tensor]:
        """Blocks of several streams of one encoder in ONE call per layer.

        Queries: the blocks padded to ``(B, n_max, D)``. Keys/values: each stream's new keys are
        appended to its own cache, then all caches are copied into ``(B, H, K_max, dh)`` with a mask
        ``(B, 1, n_max, K_max)`` that gives every real query exactly the keys it has alone (its
        chunk-causal mask over its own keys) and no padded key; padded queries attend one key and are
        dropped. Rotary positions (``"rope"``): each row's queries and new keys are rotated by its own
        stream positions (``(B, 1, n_max, dh)``). Linear layers, layer norms and the FFN run on the stacked
        rows. Returns each block's states ``(1, n_b, D)``.
        """
        enc = blocks[0].stream.encoder
        x, rows = _pad_rows([b.x[0] for b in blocks])  # (B, n_max, D), [n_b]
        n_max = x.size(1)
        dev = x.device
        # keys [a, e) as indices into each stream's cache (its first cached key is stream position start)
        spans = [(b.key_start - b.stream._cache[0].start, b.stream._cache[0].length + r) for b, r in zip(blocks, rows)]
        k_max = max(e - a for a, e in spans)
        mask = torch.zeros(len(blocks), 1, n_max, k_max, dtype=torch.bool, device=dev)
        for i, (b, r, (a, e)) in enumerate(zip(blocks, rows, spans)):
            if b.mask is None:
                mask[i, 0, :r, : e - a] = True
            else:
                mask[i, 0, :r, : e - a] = b.mask
            mask[i, 0, r:, 0] = True  # padded queries: one key, output dropped
        pos = torch.tensor([b.start for b in blocks], device=dev)[:, None] + torch.arange(n_max, device=dev)
        rope = enc.rotary(pos)  # (B, n_max, dh) each, or None
        rope = None if rope is None else (rope[0][:, None], rope[1][:, None])  # (B, 1, n_max, dh)
        for li, layer in enumerate(enc.layers):
            att = layer.self_attn
            h = layer.self_attn_layer_norm(x)
            k_new, v_new = att.project_kv(h)  # (B, H, n_max, dh)
            q = att.project_q(h)
            if rope is not None:
                q, k_new = apply_rotary(q, *rope), apply_rotary(k_new, *rope)
            k_all = k_new.new_zeros(len(blocks), att.num_heads, k_max, att.head_dim)
            v_all = torch.zeros_like(k_all)
            for i, (b, r, (a, e)) in enumerate(zip(blocks, rows, spans)):
                k, v = b.stream._cache[li].append(k_new[i : i + 1, :, :r], v_new[i : i + 1, :, :r])
                k_all[i, :, : e - a] = k[0, :, a:e]
                v_all[i, :, : e - a] = v[0, :, a:e]
            a_out = att.attend(q, k_all, v_all, mask)
            x = layer._attn_ffn(x, a_out)
        x = enc.layer_norm(x)
        return [x[i : i + 1, :r] for i, r in enumerate(rows)]


def _pad_rows(xs: list[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    """``[(n_b, D), ...]`` -> zero-padded ``(B, n_max, D)`` and ``[n_b]``."""
    rows = [t.size(0) for t in xs]
    out = xs[0].new_zeros(len(xs), max(rows), xs[0].size(-1))
    for i, t in enumerate(xs):
        out[i, : t.size(0)] = t
    return out, rows
