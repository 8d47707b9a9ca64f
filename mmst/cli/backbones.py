"""``mmst-backbones``: the speech-encoder comparison of ``recipes/synthetic/run_backbones.sh``.

Usage::

    mmst-backbones --evals-dir exp/backbones/eval --models-dir exp/backbones/models --seeds 1,2 \
        --budget compute --waitk-lagging 3 --out exp/backbones/backbones

Reads ``EVALS/<split>/<system>/seed<S>/`` (``mmst-eval`` outputs; systems ``hf_pretrained``, ``hf_scratch``,
``xs_asr``; splits ``tst-COMMON``, ``tst-unseen``; each ``<lang>/instances.log`` feeds the paired bootstrap) and,
with ``--models-dir``, each training run's ``MODELS/<run>/seed<S>/train_log.jsonl`` (training time in s, updates),
and writes ``OUT.json`` (first key ``summary``: ``pretrained_minus_scratch_bleu_k3`` and ``hf_minus_xs_asr_bleu_k3``
(means over seeds) with their ``..._interval`` and its kind ``interval``, ``seeds``, ``test_splits``, ``budget``,
``train_time_s`` per system, ``goal_met``, ``complete``; then a ``provenance`` record) and ``OUT.md``; see
``mmst/evaluation/backbones.py``. Exit status 1 with one ``error:`` line for bad input.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from mmst.cli_help import ArgumentParser, run_cli
from mmst.evaluation.compare import CompareError


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="mmst-backbones", description=__doc__)
    p.add_argument("--evals-dir", required=True, help="EVALS directory: <split>/<system>/seed<S>/scores.json")
    p.add_argument("--seeds", default="", help="comma-separated seeds expected (missing ones mark the report partial)")
    p.add_argument("--models-dir", default=None,
                   help="MODELS directory: <run>/seed<S>/train_log.jsonl of every training run, read for each system's "
                        "training time (s) and updates (default: none, the report has no training times)")
    p.add_argument("--budget", default=None, choices=["updates", "compute"],
                   help="how the recipe sized the runs (recorded): equal updates, or equal wall-clock training time "
                        "(default: not recorded)")
    p.add_argument("--waitk-lagging", default="3", help="wait-k of the comparison (default 3)")
    p.add_argument("--describe", action="append", default=[], metavar="NAME=TEXT", help="system description")
    p.add_argument("--command", default="", help="the command that produced the results (recorded)")
    p.add_argument("--out", required=True, help="output prefix: writes OUT.json and OUT.md")
    p.add_argument("--copy-to", default=None, help="also copy both files to this prefix (committed results live under docs/results/)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""

    def run(args: argparse.Namespace) -> int:
        from mmst.evaluation.backbones import (
            SYSTEMS,
            backbones_report,
            collect_training,
            provenance,
            render_markdown,
        )
        from mmst.evaluation.unseen_gap import collect

        k = f"k{args.waitk_lagging}"
        seeds = [int(s) for s in args.seeds.split(",") if s]
        desc = dict(d.split("=", 1) for d in args.describe)
        scores = collect(args.evals_dir, SYSTEMS, k)
        training = None
        if args.models_dir:
            evaluated = {s for per_split in scores.values() for per_seed in per_split.values() for s in per_seed}
            training = collect_training(args.models_dir, sorted(set(seeds) | evaluated))
        report = backbones_report(scores, seeds, k, evals_dir=args.evals_dir, training=training, budget=args.budget)
        report["provenance"] = provenance(args.command or " ".join(sys.argv))
        if desc:
            report["descriptions"] = desc
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        out.with_suffix(".md").write_text(render_markdown(report, desc), encoding="utf-8")
        if args.copy_to:
            dst = Path(args.copy_to)
            dst.parent.mkdir(parents=True, exist_ok=True)
            for suf in (".json", ".md"):
                shutil.copyfile(out.with_suffix(suf), dst.with_suffix(suf))
        print(json.dumps(report["summary"]))
        return 0

    return run_cli(build_parser(), run, argv, errors=(CompareError, ValueError, OSError))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
