"""Model configuration: the :class:`ModelConfig` dataclass and the named sizes ``xs``, ``s``, ``m``.

The config is saved in every checkpoint as a plain dict (:meth:`ModelConfig.to_dict`) and rebuilt with
:meth:`ModelConfig.from_dict`; unknown keys and out-of-range values raise ``ValueError`` naming the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ARCHS = ("separate", "unified")
ENCODER_TYPES = ("transformer", "hf")
HF_FREEZE = ("all", "feature_extractor", "none")
ENCODER_ATTENTION_MODES = ("chunk-causal", "offline")
#: encoder position encodings (fairseq's ``pos_enc_type`` values): sinusoidal added to the input, rotary
ENCODER_POS_ENC_TYPES = ("abs", "rope")
STRATEGIES = ("sync", "async")

#: Named sizes. ``s`` follows fairseq ``s2t_transformer_s``; ``m`` follows ``s2t_transformer_m``
#: (without its larger dropout); ``xs`` is the CPU demo size (the calibration prototype:
#: d=192, 4 encoder / 3 decoder layers, ~4.5M parameters with a 1k vocab).
SIZES: dict[str, dict[str, Any]] = {
    "xs": dict(
        d_model=192, encoder_layers=4, decoder_layers=3, attention_heads=4, ffn_dim=768, conv_channels=512
    ),
    "s": dict(
        d_model=256, encoder_layers=12, decoder_layers=6, attention_heads=4, ffn_dim=2048, conv_channels=1024
    ),
    "m": dict(
        d_model=512, encoder_layers=12, decoder_layers=6, attention_heads=8, ffn_dim=2048, conv_channels=1024
    ),
}


@dataclass
class ModelConfig:
    """Hyper-parameters of an MMST model (encoder + decoder(s)); saved in checkpoints.

    Attributes:
        arch: ``"separate"`` (one decoder per target language) or ``"unified"`` (one decoder, the
            ``<lang:xx>`` tag replaces BOS as first decoder input).
        tgt_langs: target language codes, in order (e.g. ``["de", "es", "fr", "ja"]``).
        vocab_size: joint target vocabulary size (unified; separate with a joint vocab).
        vocab_sizes: per-language vocabulary sizes (separate model with per-language vocabs); when
            given it overrides ``vocab_size`` for the languages it names.
        lang_tag_ids: ``{lang: id of "<lang:xx>"}`` in the joint vocab (required for unified).
        src_vocab_size: English (source) vocab size for the auxiliary CTC head; 0 = no CTC head.
            The CTC blank is id ``bos_id`` (0), which never occurs in a transcript.
        input_dim: fbank channels (80).
        conv_channels: hidden channels of the conv subsampler (fairseq ``conv_channels``).
        conv_kernel_sizes: kernel of each stride-2 Conv1d of the subsampler (len = number of layers,
            each halves the frame rate: 2 layers => 4x, 1 encoder state = 40 ms).
        d_model, encoder_layers, decoder_layers, attention_heads, ffn_dim: Transformer sizes.
        dropout, attention_dropout, activation_dropout: dropout probabilities.
        encoder_attention: ``"chunk-causal"`` (default; a state attends to its own pre-decision
            chunk and all earlier chunks) or ``"offline"`` (bidirectional).
        pre_decision_ratio: R, encoder states per pre-decision chunk (R=7 => 280 ms).
        encoder_left_chunks: chunk-causal only: a state attends at most this many chunks before its
            own (limited left context, as in streaming Transformer/Emformer encoders; bounds the
            per-chunk cost of long streams); 0 (default) = all earlier chunks.
        encoder_pos_enc_type: encoder positions (fairseq's ``pos_enc_type``): ``"abs"`` (default; sinusoidal
            positions added to the conv output, absolute from the stream's start) or ``"rope"`` (rotary
            positions in each self-attention layer, Su et al. 2021: attention depends only on the distance
            between states, so a model trained on short utterances sees no unseen position on an endless
            stream; use with ``encoder_left_chunks`` > 0, :mod:`mmst.models.rope`). ``"transformer"``
            encoders only; the head dimension ``d_model / attention_heads`` must be even.
        share_decoder_input_output_embed: tie decoder input embedding and output projection.
        pad_id, bos_id, eos_id: special ids (see CONTRACTS.md).
        strategy: unified only, ``"sync"`` or ``"async"`` (see :mod:`mmst.models.unified`).
        async_order: async language order (default ``tgt_langs``); language j (0-based) lags
            ``k + j * async_delta`` chunks.
        async_delta: lag step between consecutive async languages, in chunks (>= 0).
        cross_lang_attn: async only: attend other languages' earlier elements (False + delta 0 = sync).
        size: the named size this config was built from (informational).
        encoder_type: ``"transformer"`` (mmst's own fbank encoder, default) or ``"hf"`` (a pretrained
            Hugging Face speech encoder on the raw 16 kHz waveform, :mod:`mmst.models.hf_encoder`; needs
            ``pip install -e .[hf]`` and ``encoder_attention="offline"``). With ``"hf"``, ``encoder_layers``,
            ``ffn_dim`` and ``input_dim`` are unused; ``conv_kernel_sizes`` / ``conv_channels`` are the
            length adapter's stride-2 convolutions (1 to 3 of them) over the pretrained encoder's frames.
        hf_encoder_path: ``"hf"`` only: a local folder written by ``save_pretrained`` (Wav2Vec2Model,
            HubertModel, WavLMModel or WhisperModel weights in safetensors); mmst reads local folders only
            (never a hub id, never the network). Training stores it absolute (a relative path is resolved
            against the working directory, :meth:`with_absolute_hf_encoder_path`); needed again when a
            checkpoint of the model is loaded.
        hf_freeze: ``"hf"`` only: ``"all"`` (the pretrained encoder is frozen, run in eval mode),
            ``"feature_extractor"`` (its convolutional front end is frozen; default) or ``"none"``.
        hf_layer: ``"hf"`` only: which hidden state feeds the adapter: ``-1`` (the last, default), ``N``
            (0 = the embeddings before the first layer, N = the output of layer N), or ``"weighted"``
            (a learned softmax-weighted sum of all hidden states, as in SUPERB, Yang et al. 2021).
    """

    arch: str = "unified"
    tgt_langs: list[str] = field(default_factory=list)
    vocab_size: int = 0
    vocab_sizes: dict[str, int] | None = None
    lang_tag_ids: dict[str, int] | None = None
    src_vocab_size: int = 0
    input_dim: int = 80
    conv_channels: int = 1024
    conv_kernel_sizes: list[int] = field(default_factory=lambda: [5, 5])
    d_model: int = 256
    encoder_layers: int = 12
    decoder_layers: int = 6
    attention_heads: int = 4
    ffn_dim: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    encoder_attention: str = "chunk-causal"
    pre_decision_ratio: int = 7
    encoder_left_chunks: int = 0
    encoder_pos_enc_type: str = "abs"
    share_decoder_input_output_embed: bool = True
    pad_id: int = 1
    bos_id: int = 0
    eos_id: int = 2
    strategy: str = "sync"
    async_order: list[str] | None = None
    async_delta: int = 1
    cross_lang_attn: bool = True
    size: str = "custom"
    encoder_type: str = "transformer"
    hf_encoder_path: str | None = None
    hf_freeze: str = "feature_extractor"
    hf_layer: int | str = -1

    @property
    def input_kind(self) -> str:
        """What the encoder reads: ``"fbank"`` (10 ms log-mel frames, CMVN applied) or ``"waveform"``
        (16 kHz samples in [-1, 1], for ``encoder_type="hf"``)."""
        return "waveform" if self.encoder_type == "hf" else "fbank"

    # ------------------------------------------------------------------ helpers
    def lang_vocab_size(self, lang: str) -> int:
        """Output vocabulary size of ``lang``'s decoder. Raises ``KeyError`` for an unknown language."""
        if lang not in self.tgt_langs:
            raise KeyError(f"target language {lang!r} not in model languages {self.tgt_langs}")
        if self.vocab_sizes and lang in self.vocab_sizes:
            return int(self.vocab_sizes[lang])
        return int(self.vocab_size)

    def validate(self) -> ModelConfig:
        """Check every field; raises ``ValueError`` naming the offending key. Returns ``self``."""

        def bad(key: str, msg: str) -> None:
            raise ValueError(f"model config: {key}={getattr(self, key)!r}: {msg}")

        if self.arch not in ARCHS:
            bad("arch", f"must be one of {ARCHS}")
        if not self.tgt_langs:
            bad("tgt_langs", "must name at least one target language")
        if len(set(self.tgt_langs)) != len(self.tgt_langs):
            bad("tgt_langs", "duplicate language")
        for lang in self.tgt_langs:
            if self.lang_vocab_size(lang) <= max(self.pad_id, self.bos_id, self.eos_id):
                bad("vocab_size", f"vocab size of {lang!r} must exceed the special ids (set vocab_size)")
        if self.vocab_sizes:
            extra = set(self.vocab_sizes) - set(self.tgt_langs)
            if extra:
                bad("vocab_sizes", f"languages {sorted(extra)} are not in tgt_langs")
            if self.arch == "unified":
                bad("vocab_sizes", "the unified model uses one joint vocab (set vocab_size)")
        if self.arch == "unified":
            tags = self.lang_tag_ids or {}
            missing = [lang for lang in self.tgt_langs if lang not in tags]
            if missing:
                bad("lang_tag_ids", f"unified model needs a <lang:xx> tag id for {missing}")
            for lang, i in tags.items():
                if not 0 <= int(i) < self.vocab_size:
                    bad("lang_tag_ids", f"tag id of {lang!r} outside the vocab [0, {self.vocab_size})")
        if self.src_vocab_size < 0:
            bad("src_vocab_size", "must be >= 0 (0 = no CTC head)")
        for key in ("input_dim", "conv_channels", "d_model", "encoder_layers", "decoder_layers",
                    "attention_heads", "ffn_dim", "pre_decision_ratio"):
            if int(getattr(self, key)) < 1:
                bad(key, "must be >= 1")
        if self.conv_channels % 2:
            bad("conv_channels", "must be even (GLU halves the channels)")
        if not self.conv_kernel_sizes or any(int(k) < 1 or int(k) % 2 == 0 for k in self.conv_kernel_sizes):
            bad("conv_kernel_sizes", "must be a non-empty list of odd kernel sizes")
        if self.d_model % self.attention_heads:
            bad("d_model", f"must be divisible by attention_heads={self.attention_heads}")
        if self.d_model % 2:
            bad("d_model", "must be even (sinusoidal positions)")
        for key in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= float(getattr(self, key)) < 1.0:
                bad(key, "must be in [0, 1)")
        if self.encoder_attention not in ENCODER_ATTENTION_MODES:
            bad("encoder_attention", f"must be one of {ENCODER_ATTENTION_MODES}")
        if int(self.encoder_left_chunks) < 0:
            bad("encoder_left_chunks", "must be >= 0 (0 = unlimited left context)")
        if self.encoder_left_chunks and self.encoder_attention != "chunk-causal":
            bad("encoder_left_chunks", "needs encoder_attention='chunk-causal'")
        if self.encoder_pos_enc_type not in ENCODER_POS_ENC_TYPES:
            bad("encoder_pos_enc_type", f"must be one of {ENCODER_POS_ENC_TYPES}")
        if self.encoder_pos_enc_type == "rope" and (self.d_model // self.attention_heads) % 2:
            bad("encoder_pos_enc_type", "rope needs an even head dimension d_model / attention_heads")
        if self.encoder_pos_enc_type == "rope" and self.encoder_type != "transformer":
            bad("encoder_pos_enc_type", "rope is an option of the 'transformer' encoder (encoder_type)")
        if self.strategy not in STRATEGIES:
            bad("strategy", f"must be one of {STRATEGIES}")
        if self.strategy == "async" and self.arch != "unified":
            bad("strategy", "async needs arch='unified'")
        if self.async_order is not None and sorted(self.async_order) != sorted(self.tgt_langs):
            bad("async_order", f"must be a permutation of tgt_langs {self.tgt_langs}")
        if self.async_delta < 0:
            bad("async_delta", "must be >= 0")
        if self.encoder_type not in ENCODER_TYPES:
            bad("encoder_type", f"must be one of {ENCODER_TYPES}")
        if self.hf_freeze not in HF_FREEZE:
            bad("hf_freeze", f"must be one of {HF_FREEZE}")
        if not (isinstance(self.hf_layer, int) and self.hf_layer >= -1) and self.hf_layer != "weighted":
            bad("hf_layer", "must be -1 (last), a hidden-state index N >= 0 or 'weighted'")
        if self.encoder_type == "hf":
            if not self.hf_encoder_path:
                bad("hf_encoder_path", "encoder_type 'hf' needs a local save_pretrained folder")
            if self.encoder_attention != "offline":
                bad("encoder_attention", "a pretrained Hugging Face encoder attends the whole input: "
                    "set encoder_attention: offline")
            if not 1 <= len(self.conv_kernel_sizes) <= 3:
                bad("conv_kernel_sizes", "the length adapter of an 'hf' encoder has 1 to 3 convolutions")
        return self

    def with_absolute_hf_encoder_path(self) -> ModelConfig:
        """This config with ``hf_encoder_path`` made absolute when it names an existing local folder
        (resolved against the working directory), so that a checkpoint that stores it loads from any
        directory; ``self`` otherwise (no path, or a path that is not a folder here: loading it stops
        with an error naming it)."""
        path = self.hf_encoder_path
        if not path or not Path(path).is_dir() or Path(path).is_absolute():
            return self
        return dataclasses.replace(self, hf_encoder_path=str(Path(path).resolve()))

    def to_dict(self) -> dict[str, Any]:
        """Plain-python dict (JSON/YAML/``torch.save(weights_only=True)`` safe)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """Rebuild from :meth:`to_dict` output. Raises ``ValueError`` naming any unknown key."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"model config: unknown key(s) {unknown}; known keys: {sorted(names)}")
        return cls(**d).validate()


def model_config_for_size(
    size: str,
    *,
    arch: str = "unified",
    tgt_langs: list[str],
    vocab_size: int = 0,
    vocab_sizes: dict[str, int] | None = None,
    lang_tag_ids: dict[str, int] | None = None,
    src_vocab_size: int = 0,
    **overrides: Any,
) -> ModelConfig:
    """Build a validated :class:`ModelConfig` for a named size (``xs``, ``s``, ``m``).

    Args:
        size: key of :data:`SIZES`.
        arch: ``"separate"`` or ``"unified"``.
        tgt_langs: target languages.
        vocab_size: joint vocab size; ``vocab_sizes``: per-language sizes (separate only).
        lang_tag_ids: ``{lang: <lang:xx> id}`` (unified; e.g. from ``Vocab.lang_tag_id``).
        src_vocab_size: source vocab size for the CTC head (0 = none).
        **overrides: any other :class:`ModelConfig` field (e.g. ``pre_decision_ratio=7``,
            ``encoder_attention="offline"``, ``dropout=0.0``).

    Raises:
        ValueError: unknown size, unknown override key, or invalid value (the message names the key).
    """
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; choose from {sorted(SIZES)}")
    names = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"model config: unknown key(s) {unknown}")
    kw: dict[str, Any] = dict(SIZES[size])
    kw.update(overrides)
    return ModelConfig(
        arch=arch,
        tgt_langs=list(tgt_langs),
        vocab_size=vocab_size,
        vocab_sizes=dict(vocab_sizes) if vocab_sizes else None,
        lang_tag_ids=dict(lang_tag_ids) if lang_tag_ids else None,
        src_vocab_size=src_vocab_size,
        size=size,
        **kw,
    ).validate()
