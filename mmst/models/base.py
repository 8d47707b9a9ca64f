"""Common base of the MMST models: shared speech encoder, optional CTC head, wait-k masking and the
incremental decoding interface used by :mod:`mmst.simultaneous`.

Sync joint training (Huang et al., ICASSP 2023): :meth:`MMSTModel.forward` runs the encoder ONCE per
batch and decodes every target language present in ``prev_output_tokens`` from that same output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .config import ModelConfig
from .encoder import EncoderOut, SpeechEncoder
from .layers import init_linear
from .masks import waitk_cross_mask


@dataclass
class ModelOutput:
    """Output of :meth:`MMSTModel.forward`.

    Attributes:
        logits: ``{lang: (B, L_lang, V_lang)}`` unnormalised scores, one per decoded language.
        encoder_out: the shared :class:`EncoderOut` (``states (B, S, D)``).
        ctc_logits: ``(B, S, V_src)`` CTC head scores (blank = id 0), or None without a CTC head.
    """

    logits: dict[str, torch.Tensor]
    encoder_out: EncoderOut
    ctc_logits: torch.Tensor | None = None


@dataclass
class JointDecoderState:
    """Incremental decoder state for a set of target languages decoded in lockstep.

    Attributes:
        langs: languages, in the order of the stacked rows (unified) or of ``states``.
        batch_size: utterances B (the encoder batch).
        states: ``{lang: DecoderState}`` (separate) or ``{"*": DecoderState}`` with ``N*B`` rows
            ordered language-major (unified).
    """

    langs: list[str]
    batch_size: int
    states: dict = field(default_factory=dict)

    def invalidate_cross(self) -> None:
        """Drop cached cross-attention keys/values (after re-encoding the source in offline mode)."""
        for s in self.states.values():
            s.invalidate_cross()

    @property
    def num_tokens(self) -> int:
        """Decoder inputs consumed per stream so far."""
        return next(iter(self.states.values())).num_tokens


class MMSTModel(nn.Module):
    """Base class: encoder + CTC head + per-language decoding (implemented by subclasses).

    Public attributes: ``cfg`` (:class:`ModelConfig`), ``tgt_langs``, ``pre_decision_ratio``.
    """

    arch = "base"

    def __init__(self, cfg: ModelConfig, encoder: nn.Module | None = None) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        # the speech encoder (mmst.models.registry.build_encoder); mmst's own by default
        self.encoder = encoder if encoder is not None else SpeechEncoder(cfg)
        self.ctc_proj = init_linear(nn.Linear(cfg.d_model, cfg.src_vocab_size)) if cfg.src_vocab_size else None

    # ------------------------------------------------------------------ properties
    @property
    def tgt_langs(self) -> list[str]:
        """Target languages of the model (config order)."""
        return list(self.cfg.tgt_langs)

    @property
    def pre_decision_ratio(self) -> int:
        """R: encoder states (40 ms each) per pre-decision chunk."""
        return int(self.cfg.pre_decision_ratio)

    def vocab_size(self, lang: str) -> int:
        """Output vocabulary size for ``lang``. Raises ``KeyError`` for an unknown language."""
        return self.cfg.lang_vocab_size(lang)

    def start_token_id(self, lang: str) -> int:
        """First decoder input for ``lang`` (bos=0 here; the unified model overrides with the tag)."""
        self.check_langs([lang])
        return int(self.cfg.bos_id)

    def never_generate_ids(self) -> list[int]:
        """Token ids a decoder must never output: pad, bos (when distinct from EOS) and every
        ``<lang:xx>`` tag (decoder inputs only, never targets). Decoding sets their logits to -inf,
        as fairseq's SequenceGenerator does for pad; an undertrained model would otherwise emit them
        and produce hypotheses that detokenize to nothing."""
        ids = {int(self.cfg.pad_id)}
        if int(self.cfg.bos_id) != int(self.cfg.eos_id):
            ids.add(int(self.cfg.bos_id))
        ids.update(int(i) for i in (self.cfg.lang_tag_ids or {}).values())
        return sorted(ids)

    def check_langs(self, langs) -> None:
        """Raise ``ValueError`` naming any language not in the model."""
        bad = [lang for lang in langs if lang not in self.cfg.tgt_langs]
        if bad:
            raise ValueError(f"target language(s) {bad} not in the model (model languages: {self.cfg.tgt_langs})")

    def num_parameters(self) -> int:
        """Number of distinct trainable parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # ------------------------------------------------------------------ encoder
    def encode(self, fbank: torch.Tensor, fbank_lengths: torch.Tensor) -> EncoderOut:
        """``fbank (B, T, 80)`` (CMVN applied), ``fbank_lengths (B,)`` frames -> :class:`EncoderOut`.

        For a waveform encoder (``cfg.input_kind == "waveform"``) the same arguments carry 16 kHz samples
        ``(B, T, 1)`` and their lengths in samples."""
        return self.encoder(fbank, fbank_lengths)

    def ctc_output(self, encoder_out: EncoderOut) -> torch.Tensor | None:
        """CTC scores ``(B, S, V_src)`` from the encoder states, or None without a CTC head."""
        return None if self.ctc_proj is None else self.ctc_proj(encoder_out.states)

    def cross_attn_mask(self, encoder_out: EncoderOut, tgt_len: int, waitk: int | None) -> torch.Tensor:
        """Cross-attention mask ``(B, tgt_len, S)`` (True=attend) for wait-k (see :mod:`.masks`)."""
        return waitk_cross_mask(
            tgt_len, encoder_out.lengths, encoder_out.states.size(1), waitk, self.pre_decision_ratio
        )

    # ------------------------------------------------------------------ forward
    def decode(
        self, prev_output_tokens: dict[str, torch.Tensor], encoder_out: EncoderOut, waitk: int | None = None
    ) -> dict[str, torch.Tensor]:
        """Teacher-forced decoding of every language in ``prev_output_tokens`` ``{lang: (B, L)}``
        from one encoder output. Returns ``{lang: (B, L, V)}`` logits."""
        raise NotImplementedError

    def forward(
        self,
        fbank: torch.Tensor,
        fbank_lengths: torch.Tensor,
        prev_output_tokens: dict[str, torch.Tensor],
        waitk: int | None = None,
    ) -> ModelOutput:
        """Sync joint forward: encoder once, all languages decoded from the same states.

        Args:
            fbank: ``(B, T, 80)`` float, CMVN applied, zero padded (waveform encoders: ``(B, T, 1)``
                16 kHz samples).
            fbank_lengths: ``(B,)`` frames (waveform encoders: samples).
            prev_output_tokens: ``{lang: (B, L_lang)}`` = [start_token_id(lang)] + tokens, pad=1.
            waitk: lagging k in pre-decision chunks (training mask), or None for offline.

        Returns:
            :class:`ModelOutput`.

        Raises:
            ValueError: unknown language, or ``waitk < 1``.
        """
        if waitk is not None and waitk < 1:
            raise ValueError(f"waitk must be >= 1 or None, got {waitk}")
        self.check_langs(prev_output_tokens)
        enc = self.encode(fbank, fbank_lengths)
        logits = self.decode(prev_output_tokens, enc, waitk)
        return ModelOutput(logits=logits, encoder_out=enc, ctc_logits=self.ctc_output(enc))

    # ------------------------------------------------------------------ incremental decoding
    def init_decoder_state(self, langs: list[str], batch_size: int = 1) -> JointDecoderState:
        """New incremental state for decoding ``langs`` jointly over ``batch_size`` utterances."""
        raise NotImplementedError

    def decoder_step(
        self,
        state: JointDecoderState,
        tokens: dict[str, torch.Tensor],
        enc_states: torch.Tensor,
        enc_padding_mask: torch.Tensor | None = None,
        cross_attn_mask: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Feed ``n`` new tokens per language and return their logits.

        Args:
            state: from :meth:`init_decoder_state` (updated in place).
            tokens: ``{lang: (B, n)}`` for every language of the state.
            enc_states: ``(B, S, D)`` encoder states available now (a growing prefix for chunk-causal
                streaming; after re-encoding call ``state.invalidate_cross()`` first).
            enc_padding_mask: ``(B, S)`` True=pad.
            cross_attn_mask: ``(B, n, S)`` True=attend (same for every language), e.g. wait-k.

        Returns:
            ``{lang: (B, n, V)}`` logits.
        """
        raise NotImplementedError
