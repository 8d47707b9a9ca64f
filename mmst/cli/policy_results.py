"""Compare simultaneous policies at equal latency and write the results JSON, Markdown and plot.

Reads ``EVALS/<model>/<policy>/scores.json`` (sweeps from ``mmst-eval --policy ...``) and
``EVALS/<model>/offline/scores.json`` (offline greedy, optional), for every model of ``--models``.
For each model, language and k in ``--waitk-lagging``: wait-k's own LAAL (and LAAL_CA) at k, and each adaptive
policy's BLEU interpolated there on its sweep, with a paired bootstrap interval of the difference
(``mmst.evaluation.policy_compare``). Writes:

- ``--out-json``: ``{"summary": {...}, "provenance", "langs", "models", "equal_latency", "coverage", "sweeps"}``;
  ``summary`` counts, on the first model of ``--models`` (the offline-trained one), the languages where
  some adaptive policy beats wait-k at wait-k's LAAL (significant after Holm's correction over the table's
  paired bootstrap tests), per k, names the correction and the best policy per language, and gives
  ``min_laal_ms``, ``min/max_length_ratio`` and ``points_per_policy_min`` over every point of every sweep,
  and ``sweeps_short_of_waitk_laal_range`` (how many model x policy x language sweeps miss an end of wait-k's
  LAAL range for k=1..5); ``coverage`` says, per model, policy and language, which end
  (``policy_compare.waitk_range_coverage``);
- ``--out-md``: the same as tables; ``--plot-dir``: one BLEU-vs-AL/AL_CA figure per model.

The summary table of ``docs/policies.md`` is rendered from the JSON by ``python tools/render_docs.py``, like every
results table (with its source and stale lines).

Usage::

    mmst-policy-results --evals-dir exp/synthetic_hard/policies --models offline,multik \\
        --out-json docs/results/policies_hard.json --out-md docs/results/policies_hard.md \\
        --plot-dir docs/images
    python tools/render_docs.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mmst.cli_help import ArgumentParser


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="mmst-policy-results", description=__doc__)
    p.add_argument("--evals-dir", required=True, help="folder with <model>/<policy>/scores.json")
    p.add_deprecated_alias("--root", "--evals-dir")
    p.add_argument("--models", default="offline,multik", help="model folders; the first is the offline-trained one")
    p.add_argument("--policies", default=None,
                   help="policy folders to read (default: every folder of <model>/ with a scores.json but offline)")
    p.add_argument("--bootstrap", type=int, default=10000,
                   help="paired bootstrap resamples for the BLEU intervals and p-values (0: point estimates only); "
                        "no p-value is below 2/(N+1), so Holm's correction over a table of m tests can confirm a win "
                        "only with N >= 40 m (10000: up to 250 tests; about a second per test)")
    p.add_argument("--waitk-lagging", default="3,5",
                   help="comma-separated wait-k points whose latency the policies are compared at")
    p.add_deprecated_alias("--ks", "--waitk-lagging")
    p.add_argument("--describe", action="append", default=[], metavar="MODEL=TEXT",
                   help="one line describing a model (repeatable)")
    p.add_deprecated_alias("--description", "--describe")
    p.add_argument("--checkpoint-of", action="append", default=[], metavar="MODEL=PATH",
                   help="the checkpoint a model's sweeps decoded (its training updates go into the results)")
    p.add_deprecated_alias("--checkpoint", "--checkpoint-of")
    p.add_argument("--title", default="Simultaneous policies on the hard synthetic corpus")
    p.add_argument("--out-json", default=None, help="results JSON (required)")
    p.add_argument("--out-md", default=None, help="results Markdown (required)")
    p.add_argument("--plot-dir", default=None, help="folder for <prefix>_<model>.png (required)")
    p.add_argument("--plot-prefix", default="policies_hard", help="plot file name prefix")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (1 with a one-line error)."""
    args = build_parser().parse_args(argv)
    from mmst.evaluation.policy_compare import (
        CompareError,
        equal_latency,
        load_sweep,
        plot_policies,
        provenance,
        render_markdown,
        summary,
        waitk_range_coverage,
    )
    if not (args.out_json and args.out_md and args.plot_dir):
        print("error: --out-json, --out-md and --plot-dir are needed", file=sys.stderr)
        return 1
    root = Path(args.evals_dir)
    models = [m for m in args.models.split(",") if m]
    ks = [int(k) for k in args.waitk_lagging.split(",") if k]
    desc = dict(d.split("=", 1) for d in args.describe if "=" in d)
    out_md = Path(args.out_md)
    try:
        sweeps = {}
        for m in models:
            sweeps[m] = {}
            names = args.policies.split(",") if args.policies else sorted(
                d.name for d in (root / m).iterdir() if d.is_dir() and d.name != "offline")
            for pol in names:
                if (root / m / pol / "scores.json").is_file():
                    sweeps[m][pol] = load_sweep(root / m / pol)
            if "waitk" not in sweeps[m]:
                raise CompareError(f"{root / m / 'waitk'}: wait-k sweep missing")
        first = next(iter(sweeps[models[0]].values()))
        langs = sorted(first["points"][0]["per_lang"])
        cfg = json.loads((root / models[0] / "waitk" / "scores.json").read_text())
        point0 = next(iter(cfg["sweep"])) if "sweep" in cfg else None
        pcfg = json.loads((root / models[0] / "waitk" / point0 / "scores.json").read_text())["config"] if point0 \
            else cfg["config"]
        eq = {m: {metric: equal_latency(sweeps[m], langs, ks, metric, args.bootstrap) for metric in ("LAAL", "LAAL_CA")}
              for m in models}
        coverage = {m: waitk_range_coverage(sweeps[m], langs) for m in models}
    except (CompareError, OSError, KeyError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    res = {"summary": summary(eq[models[0]]["LAAL"], sweeps, "LAAL"), "title": args.title, "provenance": provenance(),
           "langs": langs, "ks": ks, "split": pcfg.get("split"), "n_utterances": pcfg.get("n_utterances"),
           "segment_ms": pcfg.get("source_segment_size_ms"), "models": {}, "equal_latency": eq, "coverage": coverage,
           "sweeps": sweeps}
    short = [c for per in coverage.values() for pl in per.values() for c in pl.values() if c["unreached"]]
    res["summary"]["sweeps_short_of_waitk_laal_range"] = {
        "short": len(short), "of": sum(len(pl) for per in coverage.values() for pl in per.values())}
    for m in models:
        info: dict = {"description": desc.get(m, "")}
        ckpts = dict(c.split("=", 1) for c in args.checkpoint_of if "=" in c)
        if m in ckpts and Path(ckpts[m]).is_file():
            import torch

            state = torch.load(ckpts[m], map_location="cpu", weights_only=False).get("train_state", {})
            info["updates"] = state.get("num_updates")
            info["checkpoint"] = ckpts[m]
        off = root / m / "offline" / "scores.json"
        if off.is_file():
            per = json.loads(off.read_text()).get("per_lang", {})
            info["offline_bleu"] = {lang: per.get(lang, {}).get("BLEU") for lang in langs}
        png = Path(args.plot_dir) / f"{args.plot_prefix}_{m}.png"
        plot_policies(sweeps[m], langs, png, f"{args.title}: {m} model")
        info["plot"] = str(Path("..") / png.relative_to(png.parents[1])) if len(png.parents) > 1 else str(png)
        res["models"][m] = info
    from mmst.atomic import atomic_write_text

    atomic_write_text(Path(args.out_json), json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    md = render_markdown(res)
    atomic_write_text(out_md, md)
    print(f"wrote {args.out_json}, {out_md}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
