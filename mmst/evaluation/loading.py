"""The names evaluation scripts and user code have imported from here: :func:`load_system` and
:class:`EvalSystem` are :func:`mmst.evaluation.bundle.load_bundle` and
:class:`mmst.evaluation.bundle.ModelBundle` (the one loader and its self-describing result);
:func:`load_streaming_translator` loads and builds a translator in one call. The translator input
wrappers live in :mod:`mmst.evaluation.translator_input`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmst.evaluation.bundle import (
    LoadError,
    ModelBundle,
    load_bundle,
    load_checkpoint_model,
    load_cmvn,
    load_target_vocabs,
    resolve_data_dir,
    select_langs,
)
from mmst.evaluation.translator_input import FeatureMatchedTranslator, PeakGainTranslator, reset_translator

__all__ = [
    "EvalSystem", "FeatureMatchedTranslator", "LoadError", "ModelBundle", "PeakGainTranslator", "load_bundle",
    "load_checkpoint_model", "load_cmvn", "load_streaming_translator", "load_system", "load_target_vocabs",
    "reset_translator", "resolve_data_dir", "select_langs",
]

EvalSystem = ModelBundle
"""The loaded system evaluation works with: the :class:`~mmst.evaluation.bundle.ModelBundle`."""


def load_system(
    checkpoint: str | Path,
    data_dir: str | Path | None = None,
    tgt_langs: list[str] | None = None,
    device: str = "cpu",
    quantize: str = "none",
) -> ModelBundle:
    """:func:`mmst.evaluation.bundle.load_bundle` (``checkpoint``: a model folder or a checkpoint).

    Raises:
        LoadError: see :mod:`mmst.evaluation.bundle`.
    """
    return load_bundle(checkpoint, data_dir, tgt_langs, device, quantize)


def load_streaming_translator(
    checkpoint: str | Path,
    data_dir: str | Path | None = None,
    tgt_langs: list[str] | None = None,
    waitk: int | None = 3,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    beam: int = 1,
    device: str = "cpu",
    encoder_mode: str = "auto",
    min_len: int = 0,
    policy: Any = None,
    quantize: str = "none",
) -> Any:
    """``load_bundle(...).translator(...)`` in one call.

    Raises:
        LoadError: see :mod:`mmst.evaluation.bundle`.
    """
    bundle = load_bundle(checkpoint, data_dir, tgt_langs, device, quantize)
    return bundle.translator(waitk, max_len_a=max_len_a, max_len_b=max_len_b, beam=beam,
                             encoder_mode=encoder_mode, min_len=min_len, policy=policy)
