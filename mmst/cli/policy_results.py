"""Compare simultaneous policies at equal latency and write the results JSON, Markdown and plot.

Reads ``EVALS/<model>/<policy>/scores.json`` (sweeps from ``mmst-eval --policy ...``) and
``EVALS/<model>/offline/scores.json`` (offline greedy, optional), for every model of ``--models``; with
``--seeds 1,2`` (training seeds), ``EVALS/<model>/seed<N>/<policy>/`` and ``EVALS/<model>/seed<N>/offline/`` of
every seed, all decoded on the same test sentences.
For each model, language and k in ``--waitk-lagging``: wait-k's own LAAL (and LAAL_CA) at k, and each adaptive
policy's BLEU interpolated there on its sweep, with a paired bootstrap interval of the difference
(``mmst.evaluation.policy_compare``). With seeds, each seed is compared at its own wait-k latency and the headline
is the mean over seeds of the difference, its interval from one draw of sentence indices shared by every seed;
every seed's own comparison is kept (``per_seed``). Writes:

- ``--out-json``: ``{"summary": {...}, "provenance", "langs", "models", "equal_latency", "coverage", "sweeps"}``
  (with seeds also ``"seeds"`` and ``"sweeps_by_seed"``: ``{model: {"seed<N>": {policy: sweep}}}``; ``sweeps``,
  ``coverage`` and the plots are then the first seed's);
  ``summary`` counts, on the first model of ``--models`` (the offline-trained one), the languages where
  some adaptive policy beats wait-k at wait-k's LAAL (significant after Holm's correction over the table's
  paired bootstrap tests), per k, names the correction and the best policy per language, and gives
  ``min_laal_ms``, ``min/max_length_ratio`` and ``points_per_policy_min`` over every point of every sweep,
  and ``sweeps_short_of_waitk_laal_range`` (how many model x policy x language sweeps miss an end of wait-k's
  LAAL range for k=1..5); ``coverage`` says, per model, policy and language, which end
  (``policy_compare.waitk_range_coverage``); the protocol: ``test_split``, and with ``--seeds`` / ``--tune-split``
  ``seeds``, ``interval`` and ``tune_split``;
- ``--out-md``: the same as tables; ``--plot-dir``: one BLEU-vs-AL/AL_CA figure per model.

``--coverage-only`` writes the tuning report instead (on the tune split, where grids and the length cap are
chosen): ``--out-json``/``--out-md`` with each sweep's reach over wait-k's LAAL range and every point; no
comparison, no plots.

The summary table of ``docs/policies.md`` is rendered from the JSON by ``python tools/render_docs.py``, like every
results table (with its source and stale lines).

Usage::

    mmst-policy-results --evals-dir exp/synthetic_hard/policies/tst-COMMON --models offline,multik --seeds 1,2 \\
        --tune-split dev --out-json docs/results/policies_hard.json --out-md docs/results/policies_hard.md \\
        --plot-dir docs/images
    python tools/render_docs.py
    mmst-policy-results --evals-dir exp/synthetic_hard/policies/dev --models offline,multik --seeds 1 \\
        --coverage-only --out-json exp/synthetic_hard/policies/dev/coverage.json \\
        --out-md exp/synthetic_hard/policies/dev/coverage.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mmst.cli_help import ArgumentParser


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="mmst-policy-results", description=__doc__)
    p.add_argument("--evals-dir", required=True,
                   help="folder with <model>/<policy>/scores.json (with --seeds: <model>/seed<N>/<policy>/scores.json)")
    p.add_deprecated_alias("--root", "--evals-dir")
    p.add_argument("--models", default="offline,multik", help="model folders; the first is the offline-trained one")
    p.add_argument("--seeds", default=None,
                   help="training seeds, comma list: read <model>/seed<N>/ of each; the headline difference is the mean "
                        "over seeds, its bootstrap resampling the same sentences in every seed (default: one model "
                        "folder, no seed level)")
    p.add_argument("--tune-split", default=None,
                   help="the split the grids and the length cap were chosen on (recorded in the summary; it must not "
                        "be the split the sweeps were decoded on)")
    p.add_argument("--coverage-only", action="store_true",
                   help="write only the tuning report: each sweep's reach over wait-k's LAAL range for k=1..5 and "
                        "every point (--out-json, --out-md; no comparison, no plots)")
    p.add_argument("--policies", default=None,
                   help="policy folders to read (default: every folder of <model>/ with a scores.json but offline)")
    p.add_argument("--bootstrap", type=int, default=10000,
                   help="paired bootstrap resamples for the BLEU intervals and p-values (0: point estimates only); "
                        "no p-value is below 2/(N+1), so Holm's correction over a table of m tests can confirm a win "
                        "only with N >= 40 m (10000: up to 250 tests; about a second per test and seed)")
    p.add_argument("--waitk-lagging", default="3,5",
                   help="comma-separated wait-k points whose latency the policies are compared at")
    p.add_deprecated_alias("--ks", "--waitk-lagging")
    p.add_argument("--describe", action="append", default=[], metavar="MODEL=TEXT",
                   help="one line describing a model (repeatable)")
    p.add_deprecated_alias("--description", "--describe")
    p.add_argument("--checkpoint-of", action="append", default=[], metavar="MODEL=PATH[,PATH...]",
                   help="the checkpoint a model's sweeps decoded (its training updates go into the results); with "
                        "--seeds one path per seed, in --seeds order")
    p.add_deprecated_alias("--checkpoint", "--checkpoint-of")
    p.add_argument("--title", default="Simultaneous policies on the hard synthetic corpus")
    p.add_argument("--out-json", default=None, help="results JSON (required)")
    p.add_argument("--out-md", default=None, help="results Markdown (required)")
    p.add_argument("--plot-dir", default=None, help="folder for <prefix>_<model>.png (required unless --coverage-only)")
    p.add_argument("--plot-prefix", default="policies_hard", help="plot file name prefix")
    return p


def _seed_dirs(seeds: list[int] | None) -> list[str]:
    """The folder level of each seed under ``<model>/`` (``seed<N>``), or ``[""]`` without seeds."""
    return [f"seed{s}" for s in seeds] if seeds is not None else [""]


def _read_sweeps(base: Path, policies: str | None) -> dict[str, dict]:
    """``{policy: sweep}`` of one model (and seed) folder ``base``.

    Raises:
        CompareError: no wait-k sweep; OSError: no folder.
    """
    from mmst.evaluation.policy_compare import CompareError, load_sweep

    names = policies.split(",") if policies else sorted(
        d.name for d in base.iterdir() if d.is_dir() and d.name != "offline")
    sweeps = {pol: load_sweep(base / pol) for pol in names if (base / pol / "scores.json").is_file()}
    if "waitk" not in sweeps:
        raise CompareError(f"{base / 'waitk'}: wait-k sweep missing")
    return sweeps


def _eval_config(waitk_dir: Path) -> dict[str, Any]:
    """The evaluation config (split, utterances, segment size) of a wait-k sweep folder's first point."""
    cfg = json.loads((waitk_dir / "scores.json").read_text())
    point0 = next(iter(cfg["sweep"])) if "sweep" in cfg else None
    return json.loads((waitk_dir / point0 / "scores.json").read_text())["config"] if point0 else cfg["config"]


def _model_info(m: str, root: Path, seed_dirs: list[str], desc: dict[str, str], ckpts: dict[str, str],
                langs: list[str]) -> dict[str, Any]:
    """A model's ``models`` entry: description, the checkpoint(s) decoded and their updates, offline greedy BLEU
    (with seeds: the mean over seeds and ``*_per_seed``)."""
    info: dict[str, Any] = {"description": desc.get(m, "")}
    paths = ckpts[m].split(",") if m in ckpts and seed_dirs != [""] else [ckpts[m]] if m in ckpts else []
    updates = {}
    for sd, path in zip(seed_dirs, paths):
        if Path(path).is_file():
            import torch

            state = torch.load(path, map_location="cpu", weights_only=False).get("train_state", {})
            updates[sd] = state.get("num_updates")
    if seed_dirs == [""] and "" in updates:
        info["updates"], info["checkpoint"] = updates[""], paths[0]
    elif updates:
        info["updates_per_seed"], info["checkpoint_per_seed"] = updates, dict(zip(seed_dirs, paths))
    offline = {}
    for sd in seed_dirs:
        off = root / m / sd / "offline" / "scores.json"
        if off.is_file():
            per = json.loads(off.read_text()).get("per_lang", {})
            offline[sd] = {lang: per.get(lang, {}).get("BLEU") for lang in langs}
    if seed_dirs == [""] and "" in offline:
        info["offline_bleu"] = offline[""]
    elif offline and len(offline) == len(seed_dirs):
        from mmst.evaluation.policy_compare import mean_or_none

        info["offline_bleu"] = {lang: mean_or_none([b[lang] for b in offline.values()]) for lang in langs}
        info["offline_bleu_per_seed"] = offline
    return info


def _short(coverage: dict) -> dict[str, int]:
    """How many model x policy x language sweeps miss an end of wait-k's LAAL range, of how many."""
    short = [c for per in coverage.values() for pl in per.values() for c in pl.values() if c["unreached"]]
    return {"short": len(short), "of": sum(len(pl) for per in coverage.values() for pl in per.values())}


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (1 with a one-line error)."""
    args = build_parser().parse_args(argv)
    from mmst.evaluation.policy_compare import (
        CompareError,
        equal_latency,
        equal_latency_seeds,
        plot_policies,
        provenance,
        render_markdown,
        summary,
        waitk_range_coverage,
    )
    if not (args.out_json and args.out_md and (args.plot_dir or args.coverage_only)):
        print("error: --out-json, --out-md and --plot-dir are needed (--plot-dir not with --coverage-only)", file=sys.stderr)
        return 1
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()] if args.seeds is not None else None
    except ValueError:
        print(f"error: --seeds takes whole numbers, got '{args.seeds}'", file=sys.stderr)
        return 1
    if seeds is not None and (not seeds or len(set(seeds)) != len(seeds)):
        print(f"error: --seeds needs distinct seeds, got '{args.seeds}'", file=sys.stderr)
        return 1
    root = Path(args.evals_dir)
    models = [m for m in args.models.split(",") if m]
    ks = [int(k) for k in args.waitk_lagging.split(",") if k]
    desc = dict(d.split("=", 1) for d in args.describe if "=" in d)
    seed_dirs = _seed_dirs(seeds)
    try:
        by_seed = {m: {sd: _read_sweeps(root / m / sd, args.policies) for sd in seed_dirs} for m in models}
        sweeps = {m: by_seed[m][seed_dirs[0]] for m in models}
        first = next(iter(sweeps[models[0]].values()))
        langs = sorted(first["points"][0]["per_lang"])
        pcfg = _eval_config(root / models[0] / seed_dirs[0] / "waitk")
        if args.tune_split and args.tune_split == pcfg.get("split"):
            raise CompareError(f"the sweeps were decoded on {pcfg.get('split')}, the --tune-split: report on another split")
        coverage = {m: waitk_range_coverage(sweeps[m], langs) for m in models}
        if args.coverage_only:
            return _write_coverage(args, seeds, langs, pcfg, coverage, sweeps)
        if seeds is None:
            eq = {m: {metric: equal_latency(sweeps[m], langs, ks, metric, args.bootstrap) for metric in ("LAAL", "LAAL_CA")}
                  for m in models}
        else:
            eq = {m: {metric: equal_latency_seeds(by_seed[m], langs, ks, metric, args.bootstrap)
                      for metric in ("LAAL", "LAAL_CA")} for m in models}
    except (CompareError, OSError, KeyError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    every = {f"{m}/{sd}" if sd else m: sw for m in models for sd, sw in by_seed[m].items()}
    res = {"summary": summary(eq[models[0]]["LAAL"], every, "LAAL", seeds=seeds,
                              test_split=pcfg.get("split") if seeds is not None or args.tune_split else None,
                              tune_split=args.tune_split),
           "title": args.title, "provenance": provenance(),
           "langs": langs, "ks": ks, "split": pcfg.get("split"), "n_utterances": pcfg.get("n_utterances"),
           "segment_ms": pcfg.get("source_segment_size_ms"), "models": {}, "equal_latency": eq, "coverage": coverage,
           "sweeps": sweeps}
    if seeds is not None:
        res["seeds"] = seeds
        res["sweeps_by_seed"] = by_seed
    res["summary"]["sweeps_short_of_waitk_laal_range"] = _short(coverage)
    ckpts = dict(c.split("=", 1) for c in args.checkpoint_of if "=" in c)
    for m in models:
        info = _model_info(m, root, seed_dirs, desc, ckpts, langs)
        png = Path(args.plot_dir) / f"{args.plot_prefix}_{m}.png"
        plot_policies(sweeps[m], langs, png, f"{args.title}: {m} model" + (f", seed {seeds[0]}" if seeds else ""))
        info["plot"] = str(Path("..") / png.relative_to(png.parents[1])) if len(png.parents) > 1 else str(png)
        res["models"][m] = info
    _write(Path(args.out_json), Path(args.out_md), res, render_markdown(res))
    return 0


def _write_coverage(args: argparse.Namespace, seeds: list[int] | None, langs: list[str], pcfg: dict[str, Any],
                    coverage: dict, sweeps: dict) -> int:
    """Write the tuning report (``--coverage-only``): the reach of each sweep (``coverage``, per model) and every
    point of ``sweeps`` (``{model: {policy: sweep}}``) on the split of ``pcfg``."""
    from mmst.evaluation.policy_compare import provenance, render_coverage_markdown

    res = {"summary": {"sweeps_short_of_waitk_laal_range": _short(coverage)}, "title": "tuning report",
           "provenance": provenance(), "split": pcfg.get("split"), "n_utterances": pcfg.get("n_utterances"),
           "langs": langs, "seeds": seeds, "cap": [pcfg.get("max_len_a"), pcfg.get("max_len_b")],
           "coverage": coverage, "sweeps": sweeps}
    _write(Path(args.out_json), Path(args.out_md), res, render_coverage_markdown(res))
    return 0


def _write(out_json: Path, out_md: Path, res: dict, md: str) -> None:
    """Write the results JSON and Markdown atomically."""
    from mmst.atomic import atomic_write_text

    atomic_write_text(out_json, json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    atomic_write_text(out_md, md)
    print(f"wrote {out_json}, {out_md}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
