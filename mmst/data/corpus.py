"""Access to a prepared DATA directory: ``config.yaml``, split manifests, vocabularies, CMVN.

A DATA directory is written by ``data_prep/prep_multiway.py``, ``prep_audio_list.py`` or
``prep_mustc_multiway.py`` (see docs/CONTRACTS.md for the layout). Paths inside ``config.yaml`` are
relative to the DATA directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

REQUIRED_CONFIG_KEYS = ("tgt_langs", "features", "gcmvn", "vocab", "splits")


class DataConfigError(ValueError):
    """``config.yaml`` is missing or malformed (message names the file and key)."""


def load_data_config(data_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate ``DATA/config.yaml``.

    Returns:
        The config dict as stored (paths relative to ``data_dir``); see :func:`data_path` to resolve.

    Raises:
        DataConfigError: missing file, not a mapping, or a required key
            (``tgt_langs, features, gcmvn, vocab, splits``) absent.
    """
    import yaml

    p = Path(data_dir) / "config.yaml"
    if not p.is_file():
        raise DataConfigError(f"{p}: missing (is {data_dir} a prepared DATA directory?)")
    with open(p, encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    if not isinstance(cfg, dict):
        raise DataConfigError(f"{p}: expected a mapping, got {type(cfg).__name__}")
    for k in REQUIRED_CONFIG_KEYS:
        if k not in cfg:
            raise DataConfigError(f"{p}: missing key {k!r}")
    return cfg


def data_path(data_dir: str | os.PathLike[str], rel: str) -> Path:
    """Resolve a path from ``config.yaml`` (relative to ``data_dir``; absolute paths pass through)."""
    return Path(data_dir) / rel


def split_manifest_path(data_dir: str | os.PathLike[str], split: str) -> Path:
    """``DATA/<split>.tsv``."""
    return Path(data_dir) / f"{split}.tsv"


def vocab_paths(data_dir: str | os.PathLike[str], cfg: dict[str, Any] | None = None) -> dict[str, Any]:
    """Absolute paths of the SentencePiece models: ``{"joint": Path, "src": Path, "per_lang": {lang: Path}}``
    (keys absent when the DATA has no such model)."""
    cfg = cfg if cfg is not None else load_data_config(data_dir)
    v = cfg.get("vocab") or {}
    out: dict[str, Any] = {}
    for k in ("joint", "src"):
        if v.get(k):
            out[k] = data_path(data_dir, v[k])
    if v.get("per_lang"):
        out["per_lang"] = {lang: data_path(data_dir, f) for lang, f in v["per_lang"].items()}
    return out
