"""Model registry: an explicit name -> class dict (no import-time registration side effects), and the
speech encoder named by ``ModelConfig.encoder_type``."""

from __future__ import annotations

from torch import nn

from .base import MMSTModel
from .config import ModelConfig
from .encoder import SpeechEncoder
from .separate import SeparateDecoderModel
from .unified import UnifiedDecoderModel

#: ``ModelConfig.arch`` -> model class.
MODEL_REGISTRY: dict[str, type[MMSTModel]] = {
    "separate": SeparateDecoderModel,
    "unified": UnifiedDecoderModel,
}


#: the ``pip`` extra that brings ``transformers`` for ``encoder_type: hf``
HF_EXTRA_HINT = "pip install -e .[hf]"


def build_encoder(cfg: ModelConfig, pretrained_weights: bool = True) -> nn.Module:
    """The speech encoder of ``cfg.encoder_type``: mmst's :class:`~mmst.models.encoder.SpeechEncoder`
    (``"transformer"``) or :class:`mmst.models.hf_encoder.HFSpeechEncoder` (``"hf"``; the only place
    ``transformers`` is imported, and only then).

    ``pretrained_weights`` (``"hf"`` only): read the pretrained encoder's weights from
    ``hf_encoder_path``; False reads only its config (every weight is loaded next, from a checkpoint or an
    exported model folder, so the original pretrained folder need not hold weights).

    Raises:
        ImportError: ``"hf"`` without ``transformers`` installed (the message names the extra).
    """
    if cfg.encoder_type != "hf":
        return SpeechEncoder(cfg)
    try:
        from .hf_encoder import HFSpeechEncoder
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "transformers":
            raise ImportError(f"model config: encoder_type 'hf' needs the Hugging Face transformers package: "
                              f"{HF_EXTRA_HINT}") from e
        raise
    return HFSpeechEncoder(cfg, pretrained_weights=pretrained_weights)


def build_model(cfg: ModelConfig, pretrained_weights: bool = True) -> MMSTModel:
    """Instantiate the model named by ``cfg.arch`` over the encoder named by ``cfg.encoder_type``
    (``pretrained_weights``: see :func:`build_encoder`; False when every weight is loaded next).

    Raises:
        ValueError: unknown ``arch`` or invalid config (message names the key).
        ImportError: ``encoder_type: hf`` without ``transformers`` (see :func:`build_encoder`).
    """
    cfg.validate()
    if cfg.arch not in MODEL_REGISTRY:
        raise ValueError(f"unknown model arch {cfg.arch!r}; known: {sorted(MODEL_REGISTRY)}")
    return MODEL_REGISTRY[cfg.arch](cfg, encoder=build_encoder(cfg, pretrained_weights))
