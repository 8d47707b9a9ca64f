"""Unified-decoder model: one shared encoder and ONE decoder over the joint vocabulary; the target
language is selected by the ``<lang:xx>`` tag, which replaces BOS as the first decoder input (it is
never a prediction target, so the loss never counts it; decoding forces it).

Strategies (``cfg.strategy``):

* ``sync`` (TED-MMST): every language at the same lag k, each stream sees only its own prefix. All
  languages of a batch are decoded in one decoder call: the N streams are stacked language-major
  (row ``j * B + b`` = language j, utterance b) and share the encoder output without copying it
  (cross-attention keys/values are projected once per layer, see
  :class:`mmst.models.layers.MultiheadAttention`).
* ``async``: languages ``l_1..l_N`` in ``cfg.async_order`` run at lags
  ``k_j = k + (j-1) * async_delta`` and form ONE merged stream in emission order. Each element carries
  its token embedding, a language embedding (zero-initialised, so an async model starts as the sync
  one) and its position within its own language's stream. Element (j, i) predicts token i+1 of
  language j at read step ``t = k_j + i``, attends chunks ``1..min(k_j + i, n_chunks)`` and, through
  :func:`mmst.models.masks.async_self_mask`, everything emitted before it in (t, j) order plus its own
  prefix. ``async_delta=0`` with ``cross_lang_attn=False`` reduces exactly to sync (tested).
  Incremental decoding feeds elements one at a time in (t, j) order into ONE shared key/value cache
  (:meth:`UnifiedDecoderModel.async_step`; drivers in :mod:`mmst.simultaneous`).
"""

from __future__ import annotations

import torch
from torch import nn

from .base import JointDecoderState, MMSTModel
from .config import ModelConfig
from .decoder import TransformerDecoder
from .encoder import EncoderOut
from .masks import async_self_mask, waitk_cross_mask


def _pad_to(x: torch.Tensor, length: int, pad: int) -> torch.Tensor:
    if x.size(1) == length:
        return x
    return torch.cat([x, x.new_full((x.size(0), length - x.size(1)), pad)], dim=1)


class UnifiedDecoderModel(MMSTModel):
    """TED-MMST unified-decoder model (sync or async strategy, see the module docstring).

    ``start_token_id(lang)`` is the ``<lang:xx>`` id from ``cfg.lang_tag_ids``.
    """

    arch = "unified"

    def __init__(self, cfg: ModelConfig, encoder: nn.Module | None = None) -> None:
        super().__init__(cfg, encoder)
        self.decoder = TransformerDecoder(cfg, cfg.vocab_size)
        self.is_async = cfg.strategy == "async"
        if self.is_async:
            self.lang_embed = nn.Embedding(len(cfg.tgt_langs), cfg.d_model)
            nn.init.zeros_(self.lang_embed.weight)

    def start_token_id(self, lang: str) -> int:
        """Id of ``<lang:xx>`` (first decoder input). Raises ``ValueError`` for an unknown language."""
        self.check_langs([lang])
        return int(self.cfg.lang_tag_ids[lang])

    def decoder_for(self, lang: str) -> TransformerDecoder:
        """The (shared) decoder. Raises ``ValueError`` for an unknown language."""
        self.check_langs([lang])
        return self.decoder

    def decoder_extra_embed(self, lang: str) -> torch.Tensor | None:
        """``(1, 1, D)`` language embedding added to ``lang``'s decoder inputs (async), else None."""
        if not self.is_async:
            return None
        idx = torch.tensor([[self.cfg.tgt_langs.index(lang)]], device=self.lang_embed.weight.device)
        return self.lang_embed(idx)

    # ------------------------------------------------------------------ async helpers
    @property
    def async_order(self) -> list[str]:
        """Languages in async order (``cfg.async_order`` or ``tgt_langs``)."""
        return list(self.cfg.async_order or self.cfg.tgt_langs)

    def async_index(self, lang: str) -> int:
        """0-based j of ``lang`` in the async order (lag ``k + j * async_delta``)."""
        self.check_langs([lang])
        return self.async_order.index(lang)

    def async_lag(self, lang: str, waitk: int | None) -> int | None:
        """Lag of ``lang`` in chunks: ``waitk + j * async_delta`` (None when offline)."""
        return None if waitk is None else int(waitk) + self.async_index(lang) * int(self.cfg.async_delta)

    # ------------------------------------------------------------------ training forward
    def decode(
        self, prev_output_tokens: dict[str, torch.Tensor], encoder_out: EncoderOut, waitk: int | None = None
    ) -> dict[str, torch.Tensor]:
        """Teacher-forced decoding of all languages of ``prev_output_tokens``; ``{lang: (B, L_lang, V)}``."""
        if self.is_async:
            return self._decode_async(prev_output_tokens, encoder_out, waitk)
        langs = list(prev_output_tokens)
        if not langs:
            return {}
        lens = [prev_output_tokens[lang].size(1) for lang in langs]
        n = max(lens)
        tokens = torch.cat([_pad_to(prev_output_tokens[lang], n, self.cfg.pad_id) for lang in langs], dim=0)
        mask = self.cross_attn_mask(encoder_out, n, waitk)  # (B, n, S), shared by all languages
        logits = self.decoder(tokens, encoder_out, cross_attn_mask=mask)
        b = encoder_out.states.size(0)
        return {lang: logits[j * b : (j + 1) * b, : lens[j]] for j, lang in enumerate(langs)}

    def _decode_async(self, prev_output_tokens, encoder_out: EncoderOut, waitk: int | None):
        langs = [lang for lang in self.async_order if lang in prev_output_tokens]
        if not langs:
            return {}
        dev = encoder_out.states.device
        s = encoder_out.states.size(1)
        toks, lidx, pos, emb, cross = [], [], [], [], []
        for lang in langs:
            x = prev_output_tokens[lang]
            n = x.size(1)
            toks.append(x)
            lidx.append(torch.full((n,), self.async_index(lang), dtype=torch.long, device=dev))
            pos.append(torch.arange(n, device=dev))
            emb.append(torch.full((n,), self.cfg.tgt_langs.index(lang), dtype=torch.long, device=dev))
            cross.append(
                waitk_cross_mask(n, encoder_out.lengths, s, self.async_lag(lang, waitk), self.pre_decision_ratio)
            )
        tokens = torch.cat(toks, dim=1)
        lidx_t, pos_t = torch.cat(lidx), torch.cat(pos)
        self_mask = async_self_mask(
            lidx_t, pos_t, self.cfg.async_delta, self.cfg.cross_lang_attn, tokens != self.cfg.pad_id
        )
        logits = self.decoder(
            tokens,
            encoder_out,
            cross_attn_mask=torch.cat(cross, dim=1),
            self_attn_mask=self_mask,
            positions=pos_t[None],
            extra_embed=self.lang_embed(torch.cat(emb))[None],
        )
        out, start = {}, 0
        for lang, x in zip(langs, toks):
            out[lang] = logits[:, start : start + x.size(1)]
            start += x.size(1)
        return out

    # ------------------------------------------------------------------ incremental decoding
    def init_decoder_state(self, langs: list[str], batch_size: int = 1) -> JointDecoderState:
        """Sync: one :class:`DecoderState` with ``N * batch_size`` rows (language-major).
        Async: one shared state with ``batch_size`` rows plus per-element bookkeeping
        (``elem_lang``, ``elem_valid``, ``next_pos``) used by :meth:`async_step`."""
        self.check_langs(langs)
        st = JointDecoderState(list(langs), batch_size, {"*": self.decoder.init_state()})
        if self.is_async:
            st.elem_lang = []  # async index j of every cached element
            st.elem_valid = []  # (B,) bool per cached element
            st.next_pos = {lang: 0 for lang in langs}
        return st

    def decoder_step(self, state, tokens, enc_states, enc_padding_mask=None, cross_attn_mask=None):
        """Sync only: one batched decoder call for all languages; see :meth:`MMSTModel.decoder_step`.

        Raises ``NotImplementedError`` for async models (use :meth:`async_step`, or the drivers
        :func:`mmst.simultaneous.greedy_waitk_decode` / :class:`mmst.simultaneous.StreamingTranslator`).
        """
        if self.is_async:
            raise NotImplementedError(
                "async models decode element by element: use async_step() or mmst.simultaneous.greedy_waitk_decode"
            )
        x = torch.cat([tokens[lang] for lang in state.langs], dim=0)
        logits = self.decoder.step(x, state.states["*"], enc_states, enc_padding_mask, cross_attn_mask)
        b = enc_states.size(0)
        return {lang: logits[j * b : (j + 1) * b] for j, lang in enumerate(state.langs)}

    def async_step(
        self,
        state: JointDecoderState,
        lang: str,
        tokens: torch.Tensor,
        enc_states: torch.Tensor,
        cross_attn_mask: torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Append the next element of ``lang`` to the shared async stream and return its logits.

        The caller feeds elements in (t, j) order (t = ``k_j + i``); then every cached element is
        emitted before the new one, so (with cross-language attention) it may attend all valid
        cached elements, else only its own language's.

        Args:
            state: from :meth:`init_decoder_state` (updated in place).
            lang: language of the element; its position is ``state.next_pos[lang]``.
            tokens: ``(B, 1)`` inputs (the tag, then the language's previous token).
            enc_states: ``(B, S, D)`` available encoder states (a growing prefix).
            cross_attn_mask: ``(B, 1, S)`` True=attend (the element's wait-k prefix / padding).
            valid: ``(B,)`` bool; False hides this element from later ones (language already ended
                in that row; like padding in training). Default all True.

        Returns:
            logits ``(B, 1, V)`` predicting the language's next token.
        """
        b = tokens.size(0)
        dev = tokens.device
        j = self.async_index(lang)
        valid = torch.ones(b, dtype=torch.bool, device=dev) if valid is None else valid.to(dev)
        if state.elem_lang:
            keys = torch.stack(state.elem_valid, dim=1)  # (B, M)
            if not self.cfg.cross_lang_attn:
                same = torch.tensor(state.elem_lang, device=dev) == j
                keys = keys & same[None, :]
            mask = torch.cat([keys, torch.ones(b, 1, dtype=torch.bool, device=dev)], dim=1)[:, None, :]
        else:
            mask = torch.ones(b, 1, 1, dtype=torch.bool, device=dev)
        p = state.next_pos[lang]
        logits = self.decoder.step(
            tokens,
            state.states["*"],
            enc_states,
            cross_attn_mask=cross_attn_mask,
            self_attn_mask=mask,
            positions=torch.full((1, 1), p, dtype=torch.long, device=dev),
            extra_embed=self.decoder_extra_embed(lang),
        )
        state.elem_lang.append(j)
        state.elem_valid.append(valid)
        state.next_pos[lang] = p + 1
        return logits
