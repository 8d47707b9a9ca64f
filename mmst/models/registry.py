"""Model registry: an explicit name -> class dict (no import-time registration side effects)."""

from __future__ import annotations

from .base import MMSTModel
from .config import ModelConfig
from .separate import SeparateDecoderModel
from .unified import UnifiedDecoderModel

#: ``ModelConfig.arch`` -> model class.
MODEL_REGISTRY: dict[str, type[MMSTModel]] = {
    "separate": SeparateDecoderModel,
    "unified": UnifiedDecoderModel,
}


def build_model(cfg: ModelConfig) -> MMSTModel:
    """Instantiate the model named by ``cfg.arch``.

    Raises:
        ValueError: unknown ``arch`` or invalid config (message names the key).
    """
    cfg.validate()
    if cfg.arch not in MODEL_REGISTRY:
        raise ValueError(f"unknown model arch {cfg.arch!r}; known: {sorted(MODEL_REGISTRY)}")
    return MODEL_REGISTRY[cfg.arch](cfg)
