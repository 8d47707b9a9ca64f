"""Seen vs unseen voices: BLEU/AL of systems on tst-COMMON and tst-unseen at one wait-k, and the gap.

Usage::

    mmst-unseen-gap --evals-dir exp/augment/eval --systems none,specaugment,speed,both,both_asr \\
        --seeds 1,2 --baseline none --waitk-lagging 3 --models-dir exp/augment/models --out exp/augment/augment

Reads ``EVALS/<split>/<system>/seed<S>/`` (outputs of ``mmst-eval``), writes
``OUT.json`` (first key ``summary``: ``unseen_gap_none``, ``unseen_gap_best``, ``best_system``,
``seen_bleu_change_best``, plus ``goal_met`` and ``complete``) and ``OUT.md``; see
``mmst/evaluation/unseen_gap.py``. With ``--models-dir`` the mean ``loader_wait_pct`` of each system's
training logs (``MODELS/<system>/seed*/train_log.jsonl``) is reported too. Missing evaluations make a
report marked partial. Exit status 1 with one ``error:`` line for bad input. The tables of
``docs/augmentation.md`` are rendered from the copied JSON by ``python tools/render_docs.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from mmst.cli_help import ArgumentParser


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="mmst-unseen-gap", description=__doc__)
    p.add_argument("--evals-dir", required=True, help="EVALS directory: <split>/<system>/seed<S>/scores.json")
    p.add_argument("--systems", required=True, help="comma-separated systems, in table order")
    p.add_argument("--seeds", default="", help="comma-separated seeds expected (missing ones mark the report partial)")
    p.add_argument("--baseline", default="none", help="the system without augmentation (default: none)")
    p.add_argument("--waitk-lagging", default="3", help="wait-k of the comparison, or 'offline' (default 3)")
    p.add_deprecated_alias("--k", "--waitk-lagging")
    p.add_argument("--seen-split", default="tst-COMMON", help="voices heard in training (default tst-COMMON)")
    p.add_argument("--unseen-split", default="tst-unseen", help="voices never heard (default tst-unseen)")
    p.add_argument("--models-dir", default=None, help="MODELS/<system>/seed<S>/train_log.jsonl: report loader wait")
    p.add_argument("--describe", action="append", default=[], metavar="NAME=TEXT", help="system description")
    p.add_argument("--title", default="Augmentation: voices heard in training vs never heard", help="Markdown title")
    p.add_argument("--note", default=None, help="a sentence shown above the tables and stored as 'note' "
                   "(e.g. which checkpoints were evaluated when they are not the final ones)")
    p.add_argument("--command", default="", help="the command that produced the results (recorded)")
    p.add_argument("--out", required=True, help="output prefix: writes OUT.json and OUT.md")
    p.add_argument("--copy-to", default=None, help="also copy both files to this prefix (e.g. docs/results/augment)")
    return p


def loader_wait(models_dir: Path, system: str) -> float | None:
    """Mean ``loader_wait_pct`` over the training log records of every seed of ``system``."""
    vals = []
    for log in sorted((models_dir / system).glob("seed*/train_log.jsonl")):
        for line in log.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("kind") == "train" and "loader_wait_pct" in rec:
                vals.append(float(rec["loader_wait_pct"]))
    return sum(vals) / len(vals) if vals else None


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    from mmst.evaluation.compare import CompareError
    from mmst.evaluation.unseen_gap import collect, provenance, render_markdown, unseen_gap_report

    systems = [s for s in args.systems.split(",") if s]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    k = f"k{args.waitk_lagging}" if args.waitk_lagging != "offline" else "offline"
    desc = dict(d.split("=", 1) for d in args.describe)
    try:
        scores = collect(args.evals_dir, systems, k, (args.seen_split, args.unseen_split))
        report = unseen_gap_report(scores, args.baseline, seeds, args.seen_split, args.unseen_split, k)
    except CompareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    extra = {}
    if args.models_dir:
        lw = {s: loader_wait(Path(args.models_dir), s) for s in systems}
        report["loader_wait_pct"] = lw
        extra["loader wait %"] = lw
    report["provenance"] = provenance(args.command or " ".join(sys.argv))
    if desc:
        report["descriptions"] = desc
    if args.note:
        report["note"] = args.note
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(render_markdown(report, args.title, desc or None, extra), encoding="utf-8")
    if args.copy_to:
        dst = Path(args.copy_to)
        dst.parent.mkdir(parents=True, exist_ok=True)
        for suf in (".json", ".md"):
            shutil.copyfile(out.with_suffix(suf), dst.with_suffix(suf))
    print(json.dumps(report["summary"]))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
