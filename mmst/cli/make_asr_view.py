"""Write the English ASR view of a multi-way DATA directory (for encoder pretraining).

Usage::

    mmst-make-asr-view --data DATA --out DATA_ASR
    mmst-train --config recipes/ted_mmst/conf/asr_xs.yaml --data DATA_ASR --save-dir exp/asr

The view has one target language ``en`` whose text is the English transcript (``src_text``), the
English SentencePiece model as the target vocabulary, and the SAME features (relative symlinks to
``fbank80.zip``/``gcmvn.npz``; no copy). Train it with ``model.arch=separate`` (CTC + attention on
English), then pass the checkpoint to ST training with
``checkpoint.load_pretrained_encoder_from=exp/asr/checkpoint_avg.pt``. See ``mmst/corpora/asr_view.py``.
Prints a JSON summary (utterances and 10 ms frames per split). Exit status 1 with one ``error:``
line for a bad source directory.
"""

from __future__ import annotations

import argparse
import json
import sys

from mmst.cli_help import ArgumentParser
from mmst.corpora.asr_view import LINK_MODES, AsrViewError, make_asr_view
from mmst.data.corpus import DataConfigError


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="mmst-make-asr-view", description=__doc__)
    p.add_argument("--data", required=True, help="source multi-way DATA directory (with config.yaml, vocab.src)")
    p.add_argument("--out", required=True, help="output ASR-view DATA directory (created)")
    p.add_argument("--splits", default=None,
                   help="comma-separated splits to include (default: every split of the source config.yaml)")
    p.add_argument("--lang", default="en", help="target-language code of the view (column tgt_text_<lang>)")
    p.add_argument("--link", choices=LINK_MODES, default="symlink",
                   help="symlink: relative symlinks to the source features/CMVN/vocab; relpath: no links, "
                        "paths like ../data/fbank80.zip:<offset>:<size> in the manifests")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    splits = [s.strip() for s in args.splits.split(",") if s.strip()] if args.splits else None
    try:
        summary = make_asr_view(args.data, args.out, splits=splits, lang=args.lang, link=args.link)
    except (AsrViewError, DataConfigError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
