"""The DATA builder's options that the multi-way prep scripts share (``data_prep/prep_multiway.py``,
``data_prep/prep_mustc_multiway.py``): one name, default and help text per
:class:`~mmst.corpora.multiway.BuildOptions` field."""

from __future__ import annotations

import argparse
from typing import Any

from .multiway import BuildOptions

#: The :class:`BuildOptions` fields that :func:`add_build_arguments` adds, as ``argparse`` dests.
BUILD_ARGUMENTS = ("vocab_size", "src_vocab_size", "pretokenize", "per_lang_vocab", "vocab_from", "max_frames",
                   "min_frames", "dither")


def add_build_arguments(p: argparse.ArgumentParser) -> None:
    """Add the vocabulary, filter and fbank options of :func:`~mmst.corpora.multiway.build_from_rows`
    (``--vocab-size`` ... ``--dither``; :data:`BUILD_ARGUMENTS`), with :class:`BuildOptions`' defaults."""
    p.add_argument("--vocab-size", type=int, default=BuildOptions.vocab_size,
                   help="joint (and per-language) SentencePiece size, an upper bound on tiny corpora; "
                        "default: automatic, logged: min(cap, max(64, word types of the train text)), cap "
                        "10000 joint, 8000 per language")
    p.add_argument("--src-vocab-size", type=int, default=BuildOptions.src_vocab_size,
                   help="English SentencePiece size (CTC target); default automatic: "
                        "min(5000, max(64, English word types))")
    p.add_argument("--pretokenize", choices=("auto", "none"), default=BuildOptions.pretokenize,
                   help="auto: ja/zh target text gets word boundaries (MeCab for ja, Han characters for zh) for "
                        "SentencePiece training only, so no piece spans several words; none: raw text")
    p.add_argument("--per-lang-vocab", action="store_true",
                   help="also train one SentencePiece model per target language (separate decoders)")
    p.add_argument("--vocab-from", default=BuildOptions.vocab_from,
                   help="reuse the SentencePiece models (spm_*.model) and gcmvn.npz of this DATA directory, or "
                        "of an exported model folder (mmst-export), instead of training them")
    p.add_argument("--max-frames", type=int, default=BuildOptions.max_frames,
                   help="drop train utterances longer than this many 10 ms frames (never applied to tst-*)")
    p.add_argument("--min-frames", type=int, default=BuildOptions.min_frames,
                   help="drop train/dev utterances shorter than this many frames (tst-* are kept)")
    p.add_argument("--dither", type=float, default=BuildOptions.dither,
                   help="deterministic dither std in 16-bit units before fbank (1.0 = one LSB; 0 = off), "
                        "so digital silence (espeak) does not sit at the log floor")


def build_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``{field: value}`` of the options :func:`add_build_arguments` added, for ``build_from_rows(**...)``."""
    return {name: getattr(args, name) for name in BUILD_ARGUMENTS}
