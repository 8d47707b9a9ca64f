"""Build the multi-way (one-to-many) aligned TED corpus from per-pair MuST-C releases.

Reads ``MUSTC_ROOT/en-XX/data/<split>/txt/<split>.{yaml,en,XX}`` for every requested language,
aligns the pairs' segments within each talk (see ``mmst/corpora/mustc.py``),
enforces split hygiene (test > dev > train), then writes the same DATA directory as every other
corpus (features, manifests, vocab, config.yaml, prep_report.json) through the multi-way builder
``mmst.corpora.multiway``. The alignment report is stored under the ``alignment`` key of
``prep_report.json``, and also as ``OUT/alignment_report.json`` and a readable
``OUT/alignment_report.txt``.

Example::

    mmst-prep-mustc-multiway --mustc-root /data/MUSTC_v1.0 \\
        --tgt-langs de,es,fr,it,nl,pt,ro,ru --out data/mustc8 --jobs 8
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from mmst.cli_help import PREP_LOG_FORMAT, ArgumentParser, add_progress_arguments, run_cli
from mmst.corpora.build_cli import add_build_arguments, build_kwargs
from mmst.corpora.mustc import (
    DEFAULT_SPLITS,
    AlignParams,
    align_segments,
    build_report,
    format_report,
    is_test_split,
    read_corpus,
    to_rows,
)

log = logging.getLogger("prep_mustc_multiway")

ALIGNED_COLUMNS = ["id", "wav", "offset", "duration", "speaker", "talk", "src_text"]


def build_parser() -> ArgumentParser:
    """Command-line options (every option has help)."""
    ap = ArgumentParser(prog="mmst-prep-mustc-multiway", description=__doc__)
    ap.add_argument("--mustc-root", required=True,
                    help="MuST-C root holding one en-XX directory per pair (en-de/data/train/txt/train.yaml ...)")
    ap.add_argument("--tgt-langs", required=True,
                    help="comma-separated target languages; the first is the alignment reference (e.g. de,es,fr,it,nl,pt,ro,ru)")
    ap.add_argument("--out", required=True, help="output DATA directory")
    ap.add_argument("--splits", default=",".join(DEFAULT_SPLITS),
                    help="comma-separated splits to read (default %(default)s; a split absent from every pair is skipped)")
    ap.add_argument("--min-iou", type=float, default=0.9,
                    help="minimum intersection-over-union of two segments' time intervals to match them (default 0.9)")
    ap.add_argument("--tolerance-ms", type=float, default=10.0,
                    help="offsets and durations both within this many milliseconds match without IoU (fast path; default 10)")
    ap.add_argument("--interval", choices=("first", "union"), default="first",
                    help="utterance audio: 'first' = interval of the first language having the segment, "
                         "'union' = union of all matched intervals (default first)")
    ap.add_argument("--min-langs", type=int, default=None,
                    help="keep an utterance when at least K languages have a translation (others get empty "
                         "tgt_text cells, masked out of the loss); default: all languages")
    ap.add_argument("--split-conflict", choices=("move", "drop"), default="move",
                    help="a talk found in several splits across pairs goes to the highest of test > dev > train; "
                         "'move' re-assigns the other pairs' segments there, 'drop' drops them (default move)")
    ap.add_argument("--no-merge-splits", action="store_true",
                    help="do not try to join two consecutive unmatched segments of a pair that split one reference segment")
    ap.add_argument("--no-check-wavs", action="store_true",
                    help="do not check that the wavs named in the yaml exist (faster on slow file systems)")
    ap.add_argument("--align-only", action="store_true",
                    help="stop after alignment: write OUT/aligned/<split>.tsv and the alignment report, no features/vocab")
    ap.add_argument("--jobs", type=int, default=1, help="processes for feature extraction in the builder (default 1)")
    add_build_arguments(ap)
    add_progress_arguments(ap)
    ap.add_argument("builder_args", nargs=argparse.REMAINDER,
                    help="after '--': extra --key value options passed to the multi-way builder (e.g. -- --vocab-size 8000)")
    return ap


def _write_aligned(out: str, rows_by_split: dict, langs: list[str]) -> None:
    from mmst.atomic import atomic_write_text

    cols = ALIGNED_COLUMNS + [f"tgt_text_{lg}" for lg in langs]
    os.makedirs(os.path.join(out, "aligned"), exist_ok=True)
    for split, rows in rows_by_split.items():
        lines = ["\t".join(cols)]
        for r in rows:
            lines.append("\t".join(str(r[c]).replace("\t", " ").replace("\n", " ") for c in cols))
        atomic_write_text(os.path.join(out, "aligned", f"{split}.tsv"), "\n".join(lines) + "\n")


def _extra_builder_kwargs(tokens: list[str]) -> dict:
    toks = [t for t in tokens if t != "--"]
    kw = {}
    i = 0
    while i < len(toks):
        k = toks[i]
        if not k.startswith("--"):
            raise SystemExit(f"builder option {k!r} must look like --key value")
        key = k[2:].replace("-", "_")
        if i + 1 < len(toks) and not toks[i + 1].startswith("--"):
            v: object = toks[i + 1]
            for cast in (int, float):
                try:
                    v = cast(v)
                    break
                except ValueError:
                    pass
            kw[key] = v
            i += 2
        else:
            kw[key] = True
            i += 1
    return kw


def run_builder(out: str, rows_by_split: dict, langs: list[str], report: dict, jobs: int, options: dict) -> dict:
    """Hand the aligned rows to the multi-way builder :func:`mmst.corpora.multiway.build_from_rows`.

    Args:
        out: DATA directory.
        rows_by_split: rows from :func:`mmst.corpora.mustc.to_rows` (reference interval, '' = no translation).
        langs: target languages (column order).
        report: alignment report, stored under ``alignment`` in ``prep_report.json``.
        jobs: feature extraction processes.
        options: builder options (:class:`mmst.corpora.multiway.BuildOptions` fields).

    Returns:
        the builder's report dict.

    Raises:
        RuntimeError: the builder failed (message says why) or rejected an option.
    """
    from mmst.corpora.multiway import BuildError, build_from_rows

    try:
        return build_from_rows(
            rows_by_split,
            out,
            langs,
            jobs=jobs,
            no_filter_splits=[s for s in rows_by_split if is_test_split(s)],
            extra_report={"alignment": report},
            **options,
        )
    except BuildError as e:
        raise RuntimeError(f"building {out} failed: {e}") from None
    except TypeError as e:
        raise RuntimeError(f"bad builder option: {e}") from None


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (0 ok, 1 nothing aligned, 2 bad arguments)."""
    return run_cli(build_parser(), run, argv, errors=(), log_format=PREP_LOG_FORMAT)


def run(args: argparse.Namespace) -> int:
    """Read and align the pairs, write the alignment report, then build the DATA directory (see the module
    docstring); returns the exit code (0 ok, 1 nothing aligned or the build failed, 2 bad arguments)."""
    langs = [x.strip() for x in args.tgt_langs.split(",") if x.strip()]
    splits = [x.strip() for x in args.splits.split(",") if x.strip()]
    if not langs:
        log.error("--tgt-langs is empty")
        return 2
    if len(set(langs)) != len(langs):
        log.error("--tgt-langs has duplicates: %s", args.tgt_langs)
        return 2
    if not os.path.isdir(args.mustc_root):
        log.error("--mustc-root %s is not a directory", args.mustc_root)
        return 2
    try:
        params = AlignParams(args.min_iou, args.tolerance_ms, args.interval, args.min_langs, not args.no_merge_splits)
    except ValueError as e:
        log.error("%s", e)
        return 2
    progress = not args.no_progress
    segs, n_in, issues = read_corpus(args.mustc_root, langs, splits, not args.no_check_wavs, progress)
    missing = {i.lang for i in issues if i.kind == "pair_missing"}
    present = [lg for lg in langs if lg not in missing]
    if not present:
        log.error("none of the requested pairs exist under %s", args.mustc_root)
        return 1
    if missing:
        log.warning("continuing with the pairs present: %s (missing: %s)", ",".join(present), ",".join(sorted(missing)))
    res = align_segments(segs, present, params, args.split_conflict, progress)
    report = build_report(res, n_in, issues, params)
    report["requested_langs"] = langs
    rows_by_split = to_rows(res)
    text = format_report(report)
    os.makedirs(args.out, exist_ok=True)
    from mmst.atomic import atomic_write_json, atomic_write_text

    atomic_write_json(os.path.join(args.out, "alignment_report.json"), report)
    atomic_write_text(os.path.join(args.out, "alignment_report.txt"), text + "\n")
    _write_aligned(args.out, rows_by_split, present)
    print(text)
    if not rows_by_split:
        log.error("no utterance survived the alignment; see %s", os.path.join(args.out, "alignment_report.txt"))
        return 1
    if args.align_only:
        log.info("--align-only: aligned TSVs in %s", os.path.join(args.out, "aligned"))
        return 0
    options = dict(build_kwargs(args), progress=progress, tool="prep_mustc_multiway")
    options.update(_extra_builder_kwargs(args.builder_args))
    try:
        built = run_builder(args.out, rows_by_split, present, report, args.jobs, options)
    except RuntimeError as e:
        log.error("%s", e)
        return 1
    from mmst.corpora.multiway import format_summary

    print(format_summary(built))
    log.info("done: %s", json.dumps({s: v.get("kept") for s, v in built.get("splits", {}).items()}))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
