"""Pre-LN Transformer decoder with incremental key/value caches.

Full forward (training): ``decoder(tokens (B, L), encoder_out, cross_attn_mask) -> logits (B, L, V)``.
Incremental (decoding): ``decoder.step(tokens (B, n), state, enc_states, ...)`` appends ``n`` tokens;
self-attention keys/values grow in ``state``; cross-attention keys/values are projected once per
encoder state and extended as new encoder states (chunks) arrive (chunk-causal encoders never change
earlier states). For re-encoding (offline encoder) call :meth:`DecoderState.invalidate_cross`.

Hooks for the async strategy: explicit ``positions`` (per-language positions in a merged
stream), ``extra_embed`` (e.g. a language embedding per token) and a custom ``self_attn_mask``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .encoder import EncoderOut
from .layers import EAGER_BLOCKS, KVCache, MultiheadAttention, init_linear, sinusoidal_positions
from .masks import causal_mask

KV = tuple[torch.Tensor, torch.Tensor]


class DecoderState:
    """Incremental state of a :class:`TransformerDecoder`.

    Caches are :class:`~mmst.models.layers.KVCache` objects (preallocated, capacity doubling), so a
    decoding step appends its keys/values in O(new) instead of copying the whole history.

    Attributes:
        self_cache: per layer self-attention :class:`KVCache` ``(B, H, L_so_far, dh)``.
        cross_cache: per layer cross-attention :class:`KVCache` ``(Bk, H, S_cached, dh)`` (``Bk`` =
            encoder batch, which may divide B: the unified model shares one encoder output among G
            languages).
        cross_len: encoder states whose cross keys/values are cached.
        num_tokens: tokens consumed so far (default positions continue from here).
        cross_attn: ``{layer: (B, H, n, S)}`` cross-attention probabilities of the last
            :meth:`~TransformerDecoder.step`, per head, for the layers it was asked for (empty otherwise).
    """

    def __init__(self, num_layers: int) -> None:
        self.self_cache: list[KVCache] = [KVCache() for _ in range(num_layers)]
        self.cross_cache: list[KVCache] = [KVCache() for _ in range(num_layers)]
        self.cross_len = 0
        self.num_tokens = 0
        self.cross_attn: dict[int, torch.Tensor] = {}

    @property
    def self_kv(self) -> list[KV | None]:
        """Per layer views ``(k, v)`` of the self-attention cache, each ``(B, H, L, dh)``, or None."""
        return [c.get() for c in self.self_cache]

    @property
    def cross_kv(self) -> list[KV | None]:
        """Per layer views ``(k, v)`` of the cross-attention cache, each ``(Bk, H, S, dh)``, or None."""
        return [c.get() for c in self.cross_cache]

    def invalidate_cross(self) -> None:
        """Forget cached cross-attention keys/values (call after re-encoding the source)."""
        self.cross_cache = [KVCache() for _ in self.cross_cache]
        self.cross_len = 0

    def forget_cross_before(self, n: int) -> None:
        """The encoder states fed to the cross-attention lost their first ``n`` rows (an endless stream
        freed them): drop their cached keys/values, so cached position i is again row i of the states
        passed next (``cross_len`` drops by as much; a cache shorter than ``n`` is emptied)."""
        k = min(int(n), self.cross_len)
        for c in self.cross_cache:
            c.drop_front(c.start + k)
        self.cross_len -= k

    def forget_tokens_before(self, n: int) -> None:
        """Drop the first ``n`` self-attention columns (inputs no query attends any more, e.g. the
        sentences a restarted language ended); ``num_tokens`` drops by ``n``, so pass explicit positions
        to later steps."""
        if not 0 <= n <= self.num_tokens:
            raise ValueError(f"cannot drop {n} of {self.num_tokens} decoder columns")
        for c in self.self_cache:
            c.drop_front(c.start + n)
        self.num_tokens -= n

    def reorder(self, index: torch.Tensor, reorder_cross: bool = True) -> None:
        """Select/reorder batch rows of the caches with ``index (B',)`` (beam search, pruning)."""
        self.self_cache = [c.reorder(index) for c in self.self_cache]
        if reorder_cross:
            self.cross_cache = [c.reorder(index) for c in self.cross_cache]


class TransformerDecoderLayer(nn.Module):
    """Pre-LN decoder layer: causal self-attn, cross-attn to encoder, FFN (fairseq names)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.self_attn = MultiheadAttention(d, cfg.attention_heads, cfg.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = MultiheadAttention(d, cfg.attention_heads, cfg.attention_dropout)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = init_linear(nn.Linear(d, cfg.ffn_dim))
        self.fc2 = init_linear(nn.Linear(cfg.ffn_dim, d))
        self.final_layer_norm = nn.LayerNorm(d)
        self.dropout = cfg.dropout
        self.activation_dropout = cfg.activation_dropout
        self.blocks = EAGER_BLOCKS  # the elementwise work (layers.ElementwiseBlocks)

    def forward(
        self,
        x: torch.Tensor,
        cross_kv: KV,
        self_mask: torch.Tensor | None,
        cross_mask: torch.Tensor | None,
        self_cache: KV | KVCache | None = None,
        cross_attn_out: list | None = None,
    ) -> tuple[torch.Tensor, KV]:
        """``x (B, n, D)``; ``cross_kv`` projected encoder keys/values; masks bool True=attend
        (``self_mask`` over cached+new keys). ``self_cache``: previous keys/values as a tuple
        (concatenated) or a :class:`KVCache` (appended in place). ``cross_attn_out``: when a list, the
        cross-attention probabilities ``(B, H, n, S)`` are appended to it (the output is unchanged).
        Returns output ``(B, n, D)`` and all self-attention keys/values ``(B, H, L_prev + n, dh)``."""
        h = self.self_attn_layer_norm(x)
        k, v = self.self_attn.project_kv(h)
        if isinstance(self_cache, KVCache):
            k, v = self_cache.append(k, v)
        elif self_cache is not None:
            k = torch.cat([self_cache[0], k], dim=2)
            v = torch.cat([self_cache[1], v], dim=2)
        b = self.blocks
        a = self.self_attn.attend(self.self_attn.project_q(h), k, v, self_mask)
        x, h = b.norm(x, a, self.dropout, self.training, self.encoder_attn_layer_norm)
        q = self.encoder_attn.project_q(h)
        a = self.encoder_attn.attend(q, cross_kv[0], cross_kv[1], cross_mask)
        if cross_attn_out is not None:
            cross_attn_out.append(self.encoder_attn.weights(q, cross_kv[0], cross_mask))
        x, h = b.norm(x, a, self.dropout, self.training, self.final_layer_norm)
        h = b.relu_dropout(self.fc1(h), self.activation_dropout, self.training)
        return b.residual_dropout(x, self.fc2(h), self.dropout, self.training), (k, v)


class TransformerDecoder(nn.Module):
    """Pre-LN Transformer decoder for one output vocabulary ``(B, L) tokens -> (B, L, V) logits``.

    Token embedding scaled by sqrt(D) plus sinusoidal positions (fairseq layout), final layer norm,
    output projection tied to the embedding when ``share_decoder_input_output_embed``.
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int) -> None:
        super().__init__()
        d = cfg.d_model
        self.vocab_size = vocab_size
        self.pad_id = cfg.pad_id
        self.d_model = d
        self.embed_scale = math.sqrt(d)
        self.dropout = cfg.dropout
        self.embed_tokens = nn.Embedding(vocab_size, d, padding_idx=cfg.pad_id)
        nn.init.normal_(self.embed_tokens.weight, mean=0.0, std=d**-0.5)
        with torch.no_grad():
            self.embed_tokens.weight[cfg.pad_id].zero_()
        self.layers = nn.ModuleList(TransformerDecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.layer_norm = nn.LayerNorm(d)
        self.output_projection = nn.Linear(d, vocab_size, bias=False)
        if cfg.share_decoder_input_output_embed:
            self.output_projection.weight = self.embed_tokens.weight
        else:
            nn.init.normal_(self.output_projection.weight, mean=0.0, std=d**-0.5)

    def embed(
        self, tokens: torch.Tensor, positions: torch.Tensor, extra_embed: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``tokens (B, L)``, 0-based ``positions`` (broadcastable to (B, L)) -> ``(B, L, D)``."""
        x = self.embed_scale * self.embed_tokens(tokens)
        x = x + sinusoidal_positions(positions, self.d_model).to(x.dtype)
        if extra_embed is not None:
            x = x + extra_embed
        return F.dropout(x, self.dropout, self.training)

    def project_cross(self, enc_states: torch.Tensor) -> list[KV]:
        """Cross-attention keys/values of every layer for ``enc_states (Bk, S, D)``."""
        return [layer.encoder_attn.project_kv(enc_states) for layer in self.layers]

    def _out(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_projection(self.layer_norm(x))

    def forward(
        self,
        tokens: torch.Tensor,
        encoder_out: EncoderOut,
        cross_attn_mask: torch.Tensor | None = None,
        self_attn_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        extra_embed: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Teacher-forced forward.

        Args:
            tokens: ``(B, L)`` decoder inputs (start token + target tokens, pad=1).
            encoder_out: states ``(Bk, S, D)`` with ``B = G * Bk`` (row ``g * Bk + b`` reads utterance b).
            cross_attn_mask: bool ``(B or Bk, L, S)`` True=attend (e.g. wait-k); default: encoder
                key padding only.
            self_attn_mask: bool ``(B or 1, L, L)``; default causal.
            positions: 0-based positions ``(B, L)``; default ``0..L-1``.
            extra_embed: ``(B, L, D)`` added to the input embedding (e.g. language embedding).

        Returns:
            logits ``(B, L, V)``.
        """
        b, n = tokens.shape
        if positions is None:
            positions = torch.arange(n, device=tokens.device)[None]
        x = self.embed(tokens, positions, extra_embed)
        if self_attn_mask is None:
            self_attn_mask = causal_mask(n, device=tokens.device)[None]
        if cross_attn_mask is None:
            cross_attn_mask = ~encoder_out.padding_mask[:, None, :]
        cross = self.project_cross(encoder_out.states)
        for layer, kv in zip(self.layers, cross):
            x, _ = layer(x, kv, self_attn_mask, cross_attn_mask)
        return self._out(x)

    def init_state(self) -> DecoderState:
        """Empty incremental state."""
        return DecoderState(len(self.layers))

    def extend_cross(self, state: DecoderState, enc_states: torch.Tensor) -> None:
        """Project encoder states ``[state.cross_len, S)`` of ``enc_states (Bk, S, D)`` into the cache."""
        s = enc_states.size(1)
        if s < state.cross_len:
            raise ValueError(f"encoder prefix shrank from {state.cross_len} to {s}; call invalidate_cross()")
        if s == state.cross_len:
            return
        new = self.project_cross(enc_states[:, state.cross_len :])
        for cache, (k, v) in zip(state.cross_cache, new):
            cache.append(k, v)
        state.cross_len = s

    def step(
        self,
        tokens: torch.Tensor,
        state: DecoderState,
        enc_states: torch.Tensor,
        enc_padding_mask: torch.Tensor | None = None,
        cross_attn_mask: torch.Tensor | None = None,
        self_attn_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        extra_embed: torch.Tensor | None = None,
        attn_layers: tuple[int, ...] = (),
    ) -> torch.Tensor:
        """Incremental forward of ``n`` new tokens.

        Args:
            tokens: ``(B, n)`` new decoder inputs.
            state: :class:`DecoderState`, updated in place.
            enc_states: ``(Bk, S, D)`` encoder states available now (prefix; ``B = G * Bk``).
            enc_padding_mask: ``(Bk, S)`` True=pad (batched utterances of different lengths).
            cross_attn_mask: ``(B or Bk, n, S)`` True=attend; default all available, non-pad states.
            self_attn_mask: ``(B or 1, n, L_prev + n)``; default causal.
            positions: ``(B, n)`` 0-based; default ``num_tokens .. num_tokens + n - 1``.
            extra_embed: ``(B, n, D)``.
            attn_layers: 0-based layers whose cross-attention probabilities are stored in
                ``state.cross_attn[layer]`` as ``(B, H, n, S)`` (AlignAtt/EDAtt); the logits are the same
                with or without.

        Returns:
            logits ``(B, n, V)``.

        Raises:
            ValueError: a layer in ``attn_layers`` outside ``0 .. num_layers - 1``.
        """
        b, n = tokens.shape
        bad = [i for i in attn_layers if not 0 <= i < len(self.layers)]
        if bad:
            raise ValueError(f"attention layer(s) {bad} outside 0..{len(self.layers) - 1}")
        self.extend_cross(state, enc_states)
        if positions is None:
            positions = torch.arange(state.num_tokens, state.num_tokens + n, device=tokens.device)[None]
        x = self.embed(tokens, positions, extra_embed)
        n_key = state.num_tokens + n
        if self_attn_mask is None and n > 1:
            self_attn_mask = causal_mask(n, n_key, device=tokens.device)[None]
        if cross_attn_mask is None and enc_padding_mask is not None:
            cross_attn_mask = ~enc_padding_mask[:, None, :]
        state.cross_attn = {}
        for li, (layer, self_cache, cross_cache) in enumerate(zip(self.layers, state.self_cache, state.cross_cache)):
            sink: list | None = [] if li in attn_layers else None
            x, _ = layer(x, cross_cache.get(), self_attn_mask, cross_attn_mask, self_cache, sink)
            if sink:
                state.cross_attn[li] = sink[0]  # (B, H, n, S)
        state.num_tokens += n
        return self._out(x)


@dataclass
class DecoderStep:
    """Compute request (:mod:`mmst.models.stacked`): one incremental step of ``R`` rows of one stream,
    with the arguments of :meth:`TransformerDecoder.step` (one new token per row).

    Attributes:
        decoder: the :class:`TransformerDecoder`.
        state: the stream's :class:`DecoderState` (``R`` self-attention rows, cross cache of batch 1
            shared by the rows); updated in place.
        tokens: ``(R, 1)`` new inputs.
        enc_states: ``(1, S, D)`` encoder states available to this step.
        cross_attn_mask: ``(R, 1, S)`` True = attend, or None (all of ``enc_states``).
        self_attn_mask: ``(R, 1, L_prev + 1)`` True = attend, or None (all cached tokens).
        positions: ``(R, 1)`` 0-based, or None (``state.num_tokens``).
        extra_embed: added to the input embedding (broadcastable to ``(R, 1, D)``), or None.
        attn_layers: layers whose cross-attention probabilities go to ``state.cross_attn``.

    The result is the logits ``(R, 1, V)``.
    """
    stage = 2  # pipeline order: VAD 0, encoder 1, decoder 2 (ties in run_stacked)

    decoder: TransformerDecoder
    state: DecoderState
    tokens: torch.Tensor
    enc_states: torch.Tensor
    cross_attn_mask: torch.Tensor | None = None
    self_attn_mask: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    extra_embed: torch.Tensor | None = None
    attn_layers: tuple[int, ...] = ()

    def stack_key(self) -> tuple:
        return ("decoder", id(self.decoder))

    def save_state(self):
        """A function that puts the stream's :class:`DecoderState` back as it is now (cache lengths,
        ``cross_len``, ``num_tokens``, ``cross_attn``): undoes this step after a failed stacked call
        (:mod:`mmst.models.stacked`)."""
        st = self.state
        self_lens = [c.length for c in st.self_cache]
        cross_lens = [c.length for c in st.cross_cache]
        cross_len, num_tokens, cross_attn = st.cross_len, st.num_tokens, dict(st.cross_attn)

        def restore() -> None:
            for c, n in zip(st.self_cache, self_lens):
                c.truncate(n)
            for c, n in zip(st.cross_cache, cross_lens):
                c.truncate(n)
            st.cross_len, st.num_tokens, st.cross_attn = cross_len, num_tokens, cross_attn
        return restore

    @torch.no_grad()
    def run(self) -> torch.Tensor:
        """This step alone (:meth:`TransformerDecoder.step`)."""
        return self.decoder.step(self.tokens, self.state, self.enc_states, None, self.cross_attn_mask,
                                 self.self_attn_mask, self.positions, self.extra_embed, attn_layers=self.attn_layers)

    @classmethod
    @torch.no_grad()
    def run_stacked(cls, steps: list[DecoderStep]) -> list[torch.Tensor | ValueError]:
        """Steps of several streams of one decoder in ONE call per layer (rows of all streams stacked).

        Self-attention: each stream's new keys are appended to its own cache, then the caches are
        copied into ``(R_all, H, L_max, dh)`` with a mask that keeps each row's own valid columns
        (its ``self_attn_mask``) and no padded column. Cross-attention: queries are grouped per stream,
        ``(N, H, G_max, dh)`` (``G_max`` = most rows of a stream), over the streams' cross caches padded
        to ``(N, H, S_max, dh)``, masked to each row's visible states. Embeddings, linear layers, layer
        norms, FFN and the output projection run on the stacked rows. Returns each step's logits
        ``(R_b, 1, V)``, or the ``ValueError`` it raises alone (a bad attention layer, a shrunk encoder
        prefix; the other steps are computed); ``state.cross_attn`` is filled per stream as
        :meth:`TransformerDecoder.step` does.
        """
        dec = steps[0].decoder
        results: list[torch.Tensor | ValueError | None] = []
        good = []
        for s in steps:  # a step that fails alone fails here alone (its error is its result)
            try:
                bad = [i for i in s.attn_layers if not 0 <= i < len(dec.layers)]
                if bad:
                    raise ValueError(f"attention layer(s) {bad} outside 0..{len(dec.layers) - 1}")
                dec.extend_cross(s.state, s.enc_states)
            except ValueError as e:
                results.append(e)
            else:
                results.append(None)
                good.append(s)
        if good:
            logits = iter(cls._stacked(good))
            results = [next(logits) if r is None else r for r in results]
        return results

    @classmethod
    def _stacked(cls, steps: list[DecoderStep]) -> list[torch.Tensor]:
        dec = steps[0].decoder
        dev = steps[0].tokens.device
        n_rows = [s.tokens.size(0) for s in steps]
        g_max, n = max(n_rows), len(steps)
        layers_wanted = sorted({li for s in steps for li in s.attn_layers})
        tokens = torch.cat([s.tokens for s in steps], 0)  # (R, 1)
        positions = torch.cat([torch.full((r, 1), s.state.num_tokens, device=dev, dtype=torch.long)
                               if s.positions is None else s.positions.reshape(r, 1)
                               for s, r in zip(steps, n_rows)], 0)
        extra = None
        if any(s.extra_embed is not None for s in steps):
            extra = torch.cat([torch.zeros(r, 1, dec.d_model, device=dev) if s.extra_embed is None
                               else s.extra_embed.expand(r, 1, dec.d_model) for s, r in zip(steps, n_rows)], 0)
        x = dec.embed(tokens, positions, extra)  # (R, 1, D)
        # self-attention mask over padded columns: (R, 1, 1, L_max)
        lens = [s.state.num_tokens + 1 for s in steps]
        l_max = max(lens)
        self_mask = torch.zeros(sum(n_rows), 1, 1, l_max, dtype=torch.bool, device=dev)
        # cross-attention: queries grouped per stream (N, H, G_max, dh); mask (N, 1, G_max, S_max)
        s_len = [s.state.cross_len for s in steps]
        s_max = max(s_len)
        cross_mask = torch.zeros(n, 1, g_max, s_max, dtype=torch.bool, device=dev)
        row0 = 0
        for i, (s, r, ln) in enumerate(zip(steps, n_rows, lens)):
            if s.self_attn_mask is None:
                self_mask[row0 : row0 + r, 0, 0, :ln] = True
            else:
                self_mask[row0 : row0 + r, 0, 0, :ln] = s.self_attn_mask.reshape(r, ln)
            if s.cross_attn_mask is None:
                cross_mask[i, 0, :r, : s_len[i]] = True
            else:
                cm = s.cross_attn_mask.reshape(-1, s.cross_attn_mask.size(-1))
                cross_mask[i, 0, :r, : cm.size(-1)] = cm
            cross_mask[i, 0, r:, 0] = True  # padded query rows: one key, output dropped
            row0 += r
        row_index = torch.cat([torch.arange(r, device=dev) + i * g_max for i, r in enumerate(n_rows)])
        attn_sinks: dict[int, torch.Tensor] = {}
        for li, layer in enumerate(dec.layers):
            sa, ca = layer.self_attn, layer.encoder_attn
            h = layer.self_attn_layer_norm(x)
            k_new, v_new = sa.project_kv(h)  # (R, H, 1, dh)
            k_all = k_new.new_zeros(sum(n_rows), sa.num_heads, l_max, sa.head_dim)
            v_all = torch.zeros_like(k_all)
            row0 = 0
            for s, r, ln in zip(steps, n_rows, lens):
                k, v = s.state.self_cache[li].append(k_new[row0 : row0 + r], v_new[row0 : row0 + r])
                k_all[row0 : row0 + r, :, :ln] = k
                v_all[row0 : row0 + r, :, :ln] = v
                row0 += r
            x = x + F.dropout(sa.attend(sa.project_q(h), k_all, v_all, self_mask), layer.dropout, layer.training)
            h = layer.encoder_attn_layer_norm(x)
            q = ca.project_q(h)  # (R, H, 1, dh)
            qg = q.new_zeros(n * g_max, ca.num_heads, 1, ca.head_dim)
            qg[row_index] = q
            qg = qg.view(n, g_max, ca.num_heads, ca.head_dim).transpose(1, 2)  # (N, H, G_max, dh)
            kc = q.new_zeros(n, ca.num_heads, s_max, ca.head_dim)
            vc = torch.zeros_like(kc)
            for i, s in enumerate(steps):
                k, v = s.state.cross_cache[li].get()
                kc[i, :, : s_len[i]] = k[0]
                vc[i, :, : s_len[i]] = v[0]
            a = ca.attend(qg, kc, vc, cross_mask)  # (N, G_max, D)
            if li in layers_wanted:
                w = ca.weights(qg, kc, cross_mask)  # (N, H, G_max, S_max)
                attn_sinks[li] = w.transpose(1, 2).reshape(n * g_max, ca.num_heads, s_max)[row_index]  # (R, H, S_max)
            x = x + F.dropout(a.reshape(n * g_max, 1, -1)[row_index], layer.dropout, layer.training)
            r_ = x
            h = F.relu(layer.fc1(layer.final_layer_norm(x)))
            h = F.dropout(h, layer.activation_dropout, layer.training)
            x = r_ + F.dropout(layer.fc2(h), layer.dropout, layer.training)
        logits = dec._out(x)  # (R, 1, V)
        out = []
        row0 = 0
        for i, (s, r) in enumerate(zip(steps, n_rows)):
            s.state.cross_attn = {li: attn_sinks[li][row0 : row0 + r, :, None, : s_len[i]] for li in s.attn_layers}
            s.state.num_tokens += 1
            out.append(logits[row0 : row0 + r])
            row0 += r
        return out
