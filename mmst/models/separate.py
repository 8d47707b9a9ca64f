"""Separate-decoder model: one shared speech encoder, one decoder per target language
(``nn.ModuleDict`` keyed by language), joint or per-language vocabularies."""

from __future__ import annotations

import torch
from torch import nn

from .base import JointDecoderState, MMSTModel
from .config import ModelConfig
from .decoder import TransformerDecoder
from .encoder import EncoderOut


class SeparateDecoderModel(MMSTModel):
    """TED-MMST separate-decoder model. ``decoders[lang]`` has vocab ``cfg.lang_vocab_size(lang)``;
    every decoder starts from bos (id 0)."""

    arch = "separate"

    def __init__(self, cfg: ModelConfig, encoder: nn.Module | None = None) -> None:
        super().__init__(cfg, encoder)
        self.decoders = nn.ModuleDict({lang: TransformerDecoder(cfg, cfg.lang_vocab_size(lang)) for lang in cfg.tgt_langs})

    def decoder_for(self, lang: str) -> TransformerDecoder:
        """The decoder of ``lang``. Raises ``ValueError`` for an unknown language."""
        self.check_langs([lang])
        return self.decoders[lang]

    def decode(
        self, prev_output_tokens: dict[str, torch.Tensor], encoder_out: EncoderOut, waitk: int | None = None
    ) -> dict[str, torch.Tensor]:
        """Each language's decoder on the same encoder output; ``{lang: (B, L, V_lang)}``."""
        out = {}
        for lang, prev in prev_output_tokens.items():
            mask = self.cross_attn_mask(encoder_out, prev.size(1), waitk)
            out[lang] = self.decoder_for(lang)(prev, encoder_out, cross_attn_mask=mask)
        return out

    def init_decoder_state(self, langs: list[str], batch_size: int = 1) -> JointDecoderState:
        """One :class:`DecoderState` per language decoder."""
        self.check_langs(langs)
        return JointDecoderState(list(langs), batch_size, {lang: self.decoders[lang].init_state() for lang in langs})

    def decoder_step(self, state, tokens, enc_states, enc_padding_mask=None, cross_attn_mask=None):
        """N decoder calls (one per language) on the same encoder states; see :meth:`MMSTModel.decoder_step`."""
        return {
            lang: self.decoders[lang].step(
                tokens[lang], state.states[lang], enc_states, enc_padding_mask, cross_attn_mask
            )
            for lang in state.langs
        }
