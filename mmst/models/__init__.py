"""MMST models: shared streaming speech encoder with separate or unified decoders (TED-MMST,
Huang et al., ICASSP 2023). See docs/models.md."""

from .base import JointDecoderState, MMSTModel, ModelOutput
from .config import SIZES, ModelConfig, model_config_for_size
from .decoder import DecoderState, TransformerDecoder
from .encoder import EncoderOut, EncoderStream, SpeechEncoder
from .registry import MODEL_REGISTRY, build_model
from .separate import SeparateDecoderModel
from .unified import UnifiedDecoderModel

__all__ = [
    "MODEL_REGISTRY",
    "SIZES",
    "DecoderState",
    "EncoderOut",
    "EncoderStream",
    "JointDecoderState",
    "MMSTModel",
    "ModelConfig",
    "ModelOutput",
    "SeparateDecoderModel",
    "SpeechEncoder",
    "TransformerDecoder",
    "UnifiedDecoderModel",
    "build_model",
    "model_config_for_size",
]
