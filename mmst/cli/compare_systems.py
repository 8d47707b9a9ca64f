"""Compare systems over a wait-k sweep: BLEU and AL per language and system, seeds as mean ± std.

Usage::

    mmst-compare-systems --out exp/compare \\
        --system unified_sync=exp/eval/unified_sync/seed1,exp/eval/unified_sync/seed2 \\
        --system separate=exp/eval/separate/seed1,exp/eval/separate/seed2 \\
        --system bilingual=exp/eval/bilingual_de/seed1,exp/eval/bilingual_de/seed2 \\
        --system bilingual=exp/eval/bilingual_es/seed1,exp/eval/bilingual_es/seed2

Each DIR is an output directory of ``mmst-eval`` (a k sweep ``--waitk-lagging 1,3,5,7``
or a single k). ``NAME=DIR1,DIR2,...``: one directory per seed (mean and sample std over seeds).
Repeating a NAME adds a language group (bilingual baselines: one model per language). Parameter
counts come from ``--params NAME=N``, else ``--checkpoint-of NAME=CKPT`` (repeatable, summed), else the
checkpoint recorded in the evaluation output. Writes ``OUT/comparison.md``, ``OUT/comparison.json``
and ``OUT/bleu_al_<lang>.png`` (one curve per system; also ``bleu_al_avg.png``). Exit status 1 with
one ``error:`` line for bad input.
"""

from __future__ import annotations

import argparse
import logging
import sys

from mmst.cli_help import ArgumentParser


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="mmst-compare-systems", description=__doc__)
    p.add_argument("--system", action="append", required=True, metavar="NAME=DIR[,DIR...]",
                   help="a system and its evaluation directories, one per seed; repeat NAME for language groups")
    p.add_argument("--out", required=True, help="output directory (comparison.md, comparison.json, plots)")
    p.add_argument("--params", action="append", default=[], metavar="NAME=N",
                   help="parameter count of a system (wins over --checkpoint-of and the evaluation output)")
    p.add_argument("--checkpoint-of", action="append", default=[], metavar="NAME=CKPT",
                   help="checkpoint whose parameters are counted for NAME (repeatable; counts are summed)")
    p.add_deprecated_alias("--checkpoint", "--checkpoint-of")
    p.add_argument("--describe", action="append", default=[], metavar="NAME=TEXT",
                   help="one-line description of a system for the table legend")
    p.add_argument("--metrics", default="BLEU,AL",
                   help="comma-separated metrics of scores.json to tabulate (default BLEU,AL; e.g. BLEU,AL,LAAL)")
    p.add_argument("--latency-metric", default="AL", help="x axis of the plots (must be in --metrics)")
    p.add_argument("--title", default="System comparison (wait-k sweep)", help="Markdown title")
    p.add_argument("--no-plots", action="store_true", help="do not draw the BLEU-vs-AL plots")
    p.add_argument("--no-count-params", action="store_true",
                   help="do not load the recorded checkpoints to count parameters")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)
    from mmst.evaluation.compare import (
        CompareError,
        compare_systems,
        parse_assignment,
        parse_systems,
        write_comparison,
    )

    try:
        systems = parse_systems(args.system)
        desc = dict(parse_assignment(d, "--describe") for d in args.describe)
        for s in systems:
            s.description = desc.pop(s.name, None)
        if desc:
            raise CompareError(f"--describe names unknown system(s) {sorted(desc)}")
        params = {}
        for a in args.params:
            name, value = parse_assignment(a, "--params")
            try:
                params[name] = int(float(value))
            except ValueError:
                raise CompareError(f"--params {a!r}: N must be a number") from None
        ckpts: dict[str, list[str]] = {}
        for a in args.checkpoint_of:
            name, value = parse_assignment(a, "--checkpoint-of")
            ckpts.setdefault(name, []).append(value)
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
        if not metrics:
            raise CompareError("--metrics is empty")
        cmp = compare_systems(systems, metrics=metrics, params=params, checkpoints=ckpts,
                              count_from_eval=not args.no_count_params)
        write_comparison(cmp, args.out, title=args.title, plots=not args.no_plots, latency=args.latency_metric)
    except CompareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{args.out}/comparison.md")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
