#!/usr/bin/env python
"""Quality of a bounded encoder left context against unbounded: two quickstart-sized models trained on the same
data, one with ``encoder_left_chunks`` > 0 and rotary positions (``recipes/synthetic/run.sh --left-chunks N``), one
with the defaults (unbounded left context, sinusoidal positions: the quickstart model). Per model, language and
wait-k (k = 1, 3, 5 on tst-COMMON, joint decoding): BLEU and LAAL (ms), read from each experiment's evaluation
(the recipe's stage 3, ``<exp-dir>/eval/scores.json``), and each model's encoder settings
(``<exp-dir>/model_export/config.json``, else the checkpoint's). The table prints and the JSON records both
experiments and their BLEU difference per k (bounded minus unbounded, mean over languages).

Usage, after both recipes ran (stage 3; stage 7 for the model folder)::

    bash recipes/synthetic/run.sh --exp-dir exp/bounded --left-chunks 8 --stage 2 --stop-stage 7
    python bench/bench_left_context.py --unbounded exp/synthetic --bounded exp/bounded
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from provenance import RESULTS_DIR, run_record, write_results

from mmst.cli_help import ArgumentParser

#: The paths this benchmark uses without importing them (the recipe that trained and evaluated both models).
DEPENDS_ON = ("bench/bench_left_context.py", "recipes/synthetic/run.sh", "recipes/synthetic/conf/train_xs.yaml")

#: the encoder settings recorded per model
ENCODER_KEYS = ("encoder_left_chunks", "encoder_pos_enc_type", "pre_decision_ratio", "encoder_layers", "d_model")


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(description=__doc__)
    p.add_argument("--unbounded", default="exp/synthetic",
                   help="experiment directory (--exp-dir) of the unbounded model (the quickstart's)")
    p.add_argument("--bounded", default="exp/bounded",
                   help="experiment directory (--exp-dir) of the model trained with --left-chunks N")
    p.add_argument("--note", default="", help="a note recorded in the provenance (e.g. machine load)")
    p.add_argument("--out", default=str(RESULTS_DIR / "left_context.json"), help="results JSON")
    return p


def encoder_settings(exp_dir: Path) -> dict[str, Any]:
    """The encoder keys of an experiment's model (``model_export/config.json``, else its best checkpoint).

    Raises:
        FileNotFoundError: neither exists.
    """
    folder = exp_dir / "model_export" / "config.json"
    if folder.is_file():
        cfg = json.loads(folder.read_text())["model"]
    else:
        import torch

        ckpt = exp_dir / "model" / "checkpoint_best.pt"
        if not ckpt.is_file():
            raise FileNotFoundError(f"{exp_dir}: no model_export/config.json and no model/checkpoint_best.pt")
        cfg = torch.load(ckpt, map_location="cpu", weights_only=False)["model_cfg"]
    out = {k: cfg.get(k) for k in ENCODER_KEYS}
    out["encoder_left_chunks"] = int(out["encoder_left_chunks"] or 0)
    out["encoder_pos_enc_type"] = out["encoder_pos_enc_type"] or "abs"  # configs written before the option
    return out


def read_scores(exp_dir: Path) -> dict[str, dict[str, dict[str, float]]]:
    """``{"k1": {lang: {"BLEU", "LAAL"}}, ...}`` from ``<exp_dir>/eval/scores.json`` (a wait-k sweep).

    Raises:
        FileNotFoundError: no scores; ValueError: not a wait-k sweep.
    """
    path = exp_dir / "eval" / "scores.json"
    d = json.loads(path.read_text())
    if d.get("swept_param") != "k":
        raise ValueError(f"{path}: not a wait-k sweep (swept_param={d.get('swept_param')!r})")
    return {k: {lang: {m: v[m] for m in ("BLEU", "LAAL")} for lang, v in run["per_lang"].items()}
            for k, run in d["sweep"].items()}


def main(argv: list[str] | None = None) -> int:
    """Collect both experiments' scores; print the table and write the JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    prov = run_record(" ".join(["python", "bench/bench_left_context.py", *argv]), depends_on=DEPENDS_ON)
    if args.note:
        prov["note"] = args.note
    systems = {}
    for name, d in (("unbounded", Path(args.unbounded)), ("bounded", Path(args.bounded))):
        systems[name] = {"exp_dir": str(d), "encoder": encoder_settings(d), "scores": read_scores(d)}
    ks = [k for k in systems["unbounded"]["scores"] if k in systems["bounded"]["scores"]]
    langs = sorted(systems["unbounded"]["scores"][ks[0]])
    diff = {k: statistics.mean(systems["bounded"]["scores"][k][lang]["BLEU"]
                               - systems["unbounded"]["scores"][k][lang]["BLEU"] for lang in langs) for k in ks}
    obj = {"provenance": prov, "ks": ks, "langs": langs, "systems": systems,
           "summary": {"bleu_diff_mean": diff, "bleu_diff_min": min(diff.values())}}
    for k in ks:
        for name, s in systems.items():
            row = " ".join(f"{lang} {s['scores'][k][lang]['BLEU']:6.2f}/{s['scores'][k][lang]['LAAL']:5.0f}"
                           for lang in langs)
            print(f"{k} {name:9s} (left {s['encoder']['encoder_left_chunks']:2d}, {s['encoder']['encoder_pos_enc_type']:4s})"
                  f"  BLEU/LAAL {row}")
        print(f"{k} BLEU bounded - unbounded, mean over languages: {diff[k]:+.2f}")
    write_results(args.out, obj, indent=1, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
