"""BLEU of the quickstart model as a function of training updates: how many updates ``make demo`` needs.

Trains the quickstart configuration (``recipes/synthetic/conf/train_xs.yaml``) on a prepared quickstart DATA
dir (``bash recipes/synthetic/run.sh --stop-stage 1``) for ``--max-update`` updates, validating on dev with
greedy wait-k BLEU at k = 1, 3, 5 every ``--interval`` updates and keeping a checkpoint at each, then
evaluates chosen checkpoints on tst-COMMON (voices heard in training) and tst-unseen (voices never heard) at
wait-3 with ``eval/simultaneous_eval.py``. The learning-rate schedule (inverse square root after warmup) does
not depend on ``optim.max_update``, so checkpoint N of this run is the model a run with ``max_update=N``
ends with.

The number of updates is chosen on dev (the first checkpoint whose dev BLEU, the mean over languages and
k = 1, 3, 5, is within ``--dev-margin`` of the best of the run); the test columns are reported, not tuned on.

Finished steps are reused (a training run that reached ``--max-update``, evaluations whose ``scores.json``
exists), so an interrupted run goes on where it stopped.

Example (about 20 minutes on 2 idle cores)::

    bash recipes/synthetic/run.sh --exp-dir exp/curve --stop-stage 1
    python bench/bench_quickstart_curve.py --data exp/curve/data --work exp/curve --out docs/results/quickstart_curve.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from provenance import finish_record, run_record

from mmst.cli_help import ArgumentParser

REPO = Path(__file__).resolve().parents[1]
CONFIG = "recipes/synthetic/conf/train_xs.yaml"
DEPENDS_ON = ("bench/bench_quickstart_curve.py", "recipes/synthetic/conf/train_xs.yaml")
LANGS = "de,es,fr,ja"


def train_command(data: Path, model_dir: Path, max_update: int, interval: int,
                  overrides: list[str] | None = None) -> list[str]:
    """The ``mmst-train`` command of the curve run (validation BLEU at k = 1, 3, 5 on the whole dev set),
    with extra config ``overrides`` (``key=value``) last."""
    return [sys.executable, "-m", "mmst.training.cli", "--config", CONFIG, "--data", str(data),
            "--save-dir", str(model_dir), f"optim.max_update={max_update}", f"valid.interval_updates={interval}",
            f"checkpoint.save_interval_updates={interval}", "checkpoint.keep_last=0", "valid.bleu_waitk=[1,3,5]",
            "valid.bleu_subset=200", *(overrides or [])]


def eval_command(ckpt: Path, data: Path, split: str, out: Path) -> list[str]:
    """The stage-3/4 evaluation of the quickstart recipe at wait-3 for one checkpoint."""
    return [sys.executable, "eval/simultaneous_eval.py", "--model", str(ckpt), "--data", str(data),
            "--split", split, "--tgt-langs", LANGS, "--waitk-lagging", "3", "--source-segment-size", "320",
            "--no-progress", "--out", str(out)]


def dev_curve(log: Path) -> list[dict]:
    """``[{"update", "k1", "k3", "k5", "mean"}]``: the mean over languages of the dev BLEU at each validation
    (``mean``: over languages and k, the run's validation metric ``bleu``)."""
    rows = []
    for line in log.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") != "valid":
            continue
        row = {"update": r["update"]}
        for k in (1, 3, 5):
            vals = [v for key, v in r.items() if key.startswith("bleu_") and key.endswith(f"_k{k}")]
            row[f"k{k}"] = round(sum(vals) / len(vals), 2) if vals else None
        row["mean"] = round(r["bleu"], 2)
        rows.append(row)
    return rows


def chosen_update(curve: list[dict], margin: float) -> int:
    """The first validated update whose dev BLEU (mean over languages and k = 1, 3, 5) is within ``margin``
    of the run's best."""
    best = max(r["mean"] for r in curve)
    return next(r["update"] for r in curve if r["mean"] >= best - margin)


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="bench/bench_quickstart_curve.py", description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="prepared quickstart DATA dir (run.sh --stop-stage 1)")
    ap.add_argument("--work", type=Path, required=True, help="folder for the model and the evaluations")
    ap.add_argument("--max-update", type=int, default=450, help="updates of the curve run")
    ap.add_argument("--interval", type=int, default=50, help="validate and keep a checkpoint every this many updates")
    ap.add_argument("--eval-updates", default="250,300,350,400,450",
                    help="checkpoints evaluated on tst-COMMON and tst-unseen at wait-3, comma separated")
    ap.add_argument("--dev-margin", type=float, default=0.5,
                    help="BLEU: the chosen update is the first within this of the run's best dev BLEU (mean over k = 1, 3, 5)")
    ap.add_argument("--overrides", nargs="*", default=[],
                    help="extra mmst-train config overrides (key=value) of the curve run, e.g. model.overrides.dropout=0.0")
    ap.add_argument("--out", type=Path, required=True, help="results JSON")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    record = run_record(depends_on=DEPENDS_ON)
    model_dir = a.work / "model"
    cmd = train_command(a.data, model_dir, a.max_update, a.interval, a.overrides)
    if not (model_dir / f"checkpoint_{a.max_update}.pt").is_file():
        print("training:", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=REPO, check=True)
    curve = dev_curve(model_dir / "train_log.jsonl")
    tests: dict[str, dict[str, dict]] = {}
    for u in [int(x) for x in a.eval_updates.split(",") if x]:
        for split in ("tst-COMMON", "tst-unseen"):
            out = a.work / f"eval_{u}_{split}"
            if not (out / "scores.json").is_file():
                ecmd = eval_command(model_dir / f"checkpoint_{u}.pt", a.data, split, out)
                print("evaluating:", " ".join(ecmd), flush=True)
                subprocess.run(ecmd, cwd=REPO, check=True)
            s = json.loads((out / "scores.json").read_text())
            tests.setdefault(str(u), {})[split] = {
                "avg": round(s["average"]["BLEU"], 2),
                "per_lang": {lang: round(v["BLEU"], 2) for lang, v in s["per_lang"].items()}}
    res = {"provenance": finish_record(record), "train_command": " ".join(cmd[1:]), "overrides": a.overrides, "dev_curve": curve,
           "dev_margin": a.dev_margin, "chosen_update": chosen_update(curve, a.dev_margin), "test_wait3": tests}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"{'update':>6} {'dev k1':>7} {'dev k3':>7} {'dev k5':>7} {'dev mean':>8} {'tst-COMMON k3':>14} "
          f"{'tst-unseen k3':>14}")
    for r in curve:
        t = tests.get(str(r["update"]), {})
        print(f"{r['update']:6d} {r['k1']:7.2f} {r['k3']:7.2f} {r['k5']:7.2f} {r['mean']:8.2f} "
              f"{t.get('tst-COMMON', {}).get('avg', float('nan')):14.2f} {t.get('tst-unseen', {}).get('avg', float('nan')):14.2f}")
    print(f"chosen on dev: {res['chosen_update']} updates; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
