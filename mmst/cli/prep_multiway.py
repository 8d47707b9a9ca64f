"""Build a multi-way aligned corpus (DATA directory) from a raw MuST-C-layout corpus.

Reads ``RAW/en-XX/data/<split>/{wav/*.wav, txt/<split>.yaml, txt/<split>.en, txt/<split>.XX}`` for
every ``--tgt-langs`` language, joins the pairs on identical segments (same talk wav, offset and
duration within ``--tolerance-ms``), then extracts features, writes manifests, trains SentencePiece,
writes ``config.yaml`` and ``prep_report.json`` (see docs/data-and-corpora.md and docs/CONTRACTS.md).

Example::

    mmst-prep-multiway --mustc-root raw/ --tgt-langs de,es,ja --out data/synth --jobs 2

Exit codes: 0 ok; 1 bad input (the message names the file, line and field); 2 bad arguments.
A rerun with the same arguments skips finished work (cached features, unchanged vocab/CMVN).
"""

from __future__ import annotations

import argparse
import logging
import sys

from mmst.cli_help import PREP_LOG_FORMAT, ArgumentParser, add_progress_arguments, run_cli
from mmst.corpora.build_cli import add_build_arguments, build_kwargs
from mmst.corpora.multiway import BuildError, build_from_rows, format_summary, read_and_join
from mmst.corpora.mustc_layout import RawCorpusError, available_pairs

log = logging.getLogger("prep_multiway")


def build_parser() -> ArgumentParser:
    """Command-line options (see ``--help``)."""
    p = ArgumentParser(prog="mmst-prep-multiway", description=__doc__.split("\n\n")[0])
    p.add_argument("--mustc-root", required=True,
                   help="corpus root in MuST-C layout, holding en-XX/data/<split>/ directories (synthetic corpora "
                        "of mmst-synthesize-corpus have it)")
    p.add_deprecated_alias("--root", "--mustc-root")
    p.add_deprecated_alias("--raw", "--mustc-root")
    p.add_argument("--tgt-langs", default=None,
                   help="comma-separated target languages, in column order (de,es,...); default: every en-XX pair "
                        "under --mustc-root, sorted")
    p.add_argument("--out", required=True, help="output DATA directory (created; rerun to resume)")
    p.add_argument("--splits", default="train,dev,tst-COMMON",
                   help="comma-separated splits to read; tst*/test* splits are never filtered")
    p.add_argument("--src-lang", default="en", help="source language code (directory prefix and text suffix)")
    add_build_arguments(p)
    p.add_argument("--jobs", type=int, default=1, help="feature extraction processes")
    p.add_argument("--tolerance-ms", type=float, default=10.0,
                   help="join tolerance on offset and duration (ms); also how far a segment may end past its wav")
    p.add_argument("--join", choices=("inner", "outer"), default="inner",
                   help="inner: keep segments present in every language; outer: keep all, empty cells for "
                        "missing translations")
    add_progress_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 ok, 1 bad input, 2 bad arguments)."""
    return run_cli(build_parser(), run, argv, errors=(RawCorpusError, BuildError), log_format=PREP_LOG_FORMAT,
                   error_log=log)


def run(args: argparse.Namespace) -> int:
    """Read, join and build (see the module docstring); returns 0, or 2 for bad arguments.

    Raises:
        mmst.corpora.mustc_layout.RawCorpusError: a bad corpus file (the message names file, line and field).
        mmst.corpora.multiway.BuildError: the build failed (the message names the file).
    """
    if args.tgt_langs is None:
        langs = available_pairs(args.mustc_root, args.src_lang)
        log.info("--tgt-langs not given; using the pairs under %s: %s", args.mustc_root, ",".join(langs))
    else:
        langs = [x.strip() for x in args.tgt_langs.split(",") if x.strip()]
    splits = [x.strip() for x in args.splits.split(",") if x.strip()]
    if not langs or len(set(langs)) != len(langs):
        log.error("--tgt-langs must be a non-empty list without duplicates, got %r", args.tgt_langs)
        return 2
    if args.jobs < 1:
        log.error("--jobs must be >= 1")
        return 2
    progress = not args.no_progress
    rows, join_rep = read_and_join(args.mustc_root, langs, splits, args.tolerance_ms, args.join, args.src_lang,
                                   progress)
    for split in splits:
        log.info("split %s: %d multi-way utterances", split, len(rows.get(split, [])))
    rows = {s: rows.get(s, []) for s in splits}
    report = build_from_rows(
        rows, args.out, langs, jobs=args.jobs, extra_report={"join": join_rep, "root": args.mustc_root},
        **build_kwargs(args), end_tolerance_ms=args.tolerance_ms, src_lang=args.src_lang,
        progress=progress, tool="prep_multiway",
    )
    print(format_summary(report))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
