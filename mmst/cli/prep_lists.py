"""Build a training DATA directory (train, dev, test splits) from lists of your own recordings.

Each list is a TSV with a header: ``id``, ``audio`` (a path, relative to the list's folder), the
English transcript (``--src-col``, default ``en``) and one column per target language, plus the
optional columns ``offset`` and ``duration`` (seconds: the utterance is that segment of a longer
recording), ``speaker`` and ``duration_s`` (the whole file's length, checked). The SentencePiece
models and the global CMVN are estimated on ``--train`` only (or copied with ``--vocab-from DATA`` or
``--vocab-from MODEL_DIR`` to fine-tune an exported model). Writes the DATA layout of
``mmst-prep-multiway`` and ``prep_report.json``, and prints a summary.

Example::

    mmst-prep-lists --train train.tsv --dev dev.tsv --test tst-COMMON=tst.tsv \\
        --tgt-langs de,es --out DATA

Every clip (or segment) is decoded and checked first: unreadable, silent, or truncated audio stops
the run with one line per clip (list file, line, id, reason) unless ``--skip-bad`` is given, which
leaves those rows out and lists them under ``skipped_bad_audio`` in ``prep_report.json`` (the split's
``rows_in`` still counts them, its ``dropped`` as ``bad_audio``, in the report and the printed summary).
Exit codes: 0 ok; 1 bad input (the message names the file, line and field); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import logging
import sys

from mmst.cli_help import PREP_LOG_FORMAT, ArgumentParser, add_progress_arguments, run_cli
from mmst.corpora.audiolist import AudioListError
from mmst.corpora.build_cli import add_build_arguments, build_kwargs
from mmst.corpora.lists import build_from_lists, parse_test_lists
from mmst.corpora.multiway import BuildError, format_summary

log = logging.getLogger("prep_lists")


def build_parser() -> ArgumentParser:
    """Command-line options (see ``--help``)."""
    p = ArgumentParser(prog="mmst-prep-lists", description=__doc__.split("\n\n")[0],
                       epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--train", required=True, help="list of the training split (vocabulary and CMVN come from it)")
    p.add_argument("--dev", default=None, help="list of the validation split")
    p.add_argument("--test", action="append", default=[], metavar="NAME=FILE",
                   help="a test split and its list (repeatable), e.g. tst-COMMON=tst.tsv; never filtered")
    p.add_argument("--out", required=True, help="output DATA directory (created; rerun to resume)")
    p.add_argument("--tgt-langs", default=None,
                   help="comma-separated target language columns; default: every language-code column of --train "
                        "except --src-col")
    p.add_argument("--src-col", default="en", help="column holding the English transcript (src_text)")
    add_build_arguments(p)
    p.add_argument("--skip-bad", action="store_true",
                   help="leave out bad clips (unreadable, silent, truncated) with a report naming each one and its "
                        "reason, instead of stopping")
    p.add_argument("--jobs", type=int, default=1, help="feature extraction processes")
    add_progress_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns 0 ok, 1 bad input, 2 bad arguments."""
    return run_cli(build_parser(), run, argv, errors=(AudioListError, BuildError), log_format=PREP_LOG_FORMAT,
                   error_log=log)


def run(args: argparse.Namespace) -> int:
    """Build the DATA directory from the lists (see the module docstring); returns 0, or 2 for bad arguments.

    Raises:
        mmst.corpora.audiolist.AudioListError: a bad list or bad audio (without ``--skip-bad``).
        mmst.corpora.multiway.BuildError: the build failed (the message names the file).
    """
    langs = [x.strip() for x in args.tgt_langs.split(",") if x.strip()] if args.tgt_langs else None
    if args.jobs < 1 or (langs is not None and (not langs or len(set(langs)) != len(langs))):
        log.error("--jobs must be >= 1 and --tgt-langs a non-empty list without duplicates")
        return 2
    tests = parse_test_lists(args.test)
    report = build_from_lists(args.train, args.out, dev=args.dev, tests=tests, tgt_langs=langs,
                              src_col=args.src_col, skip_bad=args.skip_bad, jobs=args.jobs,
                              progress=not args.no_progress, **build_kwargs(args))
    print(format_summary(report))
    if report["skipped_bad_audio"]:
        print(f"bad audio left out: {len(report['skipped_bad_audio'])} clip(s) (skipped_bad_audio in prep_report.json)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
