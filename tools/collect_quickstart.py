#!/usr/bin/env python
"""Collect the results of a finished quickstart run (``make demo``) into ``docs/results/quickstart.json``.

Reads what ``recipes/synthetic/run.sh`` wrote under ``EXP`` (default ``exp/synthetic``):

* ``EXP/eval/scores.json``: the k sweep on tst-COMMON (``mmst-eval``, stage 3);
* ``EXP/eval_unseen/scores.json``: wait-3 on tst-unseen (stage 4), when present;
* ``EXP/.done/stage<N>``: seconds per stage;
* ``EXP/.done/setup`` and ``EXP/.done/total``: the seconds of ``make setup`` (with the system packages) and of
  the whole ``make demo`` command, setup included, when ``make demo`` ran it.

and writes one JSON with a ``provenance`` record (command, the date of the tst-COMMON scores, git
commit, machine; ``bench/provenance.py``). ``tools/render_docs.py`` renders the README's quickstart
tables from it. Run it on the machine that ran the recipe.

Usage::

    python tools/collect_quickstart.py --exp-dir exp/synthetic [--command "make demo"] [--out docs/results/quickstart.json]

Exit status 1 with one ``error:`` line when a required file is missing or not JSON.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from provenance import RESULTS_DIR, run_record  # noqa: E402

from mmst.cli_help import ArgumentParser  # noqa: E402

#: The source paths a quickstart run exercises: its recipe, the corpus, training and evaluation code
#: (recorded with their digests in ``provenance.depends_on``; collect right after the run).
DEPENDS_ON = ("recipes/synthetic/run.sh", "recipes/synthetic/conf/train_xs.yaml", "recipes/lib/", "mmst/cli/",
              "mmst/audio.py", "mmst/features.py", "mmst/gain.py", "mmst/cmvn.py", "mmst/corpora/", "mmst/data/",
              "mmst/models/", "mmst/losses.py", "mmst/training/", "mmst/simultaneous/", "mmst/evaluation/")

#: Stage titles of ``recipes/synthetic/run.sh``.
STAGE_NAMES = {"0": "generate the grammar corpus", "1": "prep the multi-way corpus (fbank, CMVN, SentencePiece)",
               "2": "train the xs unified model (multi-k wait-k)", "3": "evaluate tst-COMMON at k = 1, 3, 5 and tst-unseen at k = 3",
               "4": "print the results", "5": "real speech: your recordings (--real-audio-tsv)",
               "6": "long form: a synthetic talk as one stream", "7": "export the model folder"}


def _read_json(p: Path) -> dict[str, Any]:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: {p}: {e}") from None


def collect(exp: Path, command: str) -> dict[str, Any]:
    """The quickstart results of run directory ``exp`` as one dict (see the module docstring)."""
    sweep_p = exp / "eval" / "scores.json"
    sweep = _read_json(sweep_p)
    if "sweep" not in sweep:
        raise SystemExit(f"error: {sweep_p}: not a k sweep (no 'sweep' key); run stage 3 with several k")
    out: dict[str, Any] = {"provenance": run_record(command, depends_on=DEPENDS_ON), "tst-COMMON": sweep}
    out["provenance"]["date"] = dt.datetime.fromtimestamp(sweep_p.stat().st_mtime, dt.timezone.utc).isoformat(
        timespec="seconds")
    unseen = exp / "eval_unseen" / "scores.json"
    if unseen.exists():
        out["tst-unseen"] = _read_json(unseen)
    stages = {}
    for n in STAGE_NAMES:
        marker = exp / ".done" / f"stage{n}"
        if marker.exists():
            try:
                stages[n] = int(marker.read_text().strip())
            except ValueError:
                raise SystemExit(f"error: {marker}: expected the stage's seconds") from None
    out["stage_seconds"] = stages
    out["stage_names"] = {n: STAGE_NAMES[n] for n in stages}
    for key in ("setup", "total"):
        marker = exp / ".done" / key
        if marker.exists():
            try:
                out[f"{key}_seconds"] = int(marker.read_text().strip())
            except ValueError:
                raise SystemExit(f"error: {marker}: expected the seconds of make demo's {key}") from None
    return out


def build_parser() -> ArgumentParser:
    """Command-line options."""
    ap = ArgumentParser(prog="tools/collect_quickstart.py", description=__doc__.split("\n")[0])
    ap.add_argument("--exp-dir", default="exp/synthetic", help="the recipe's --exp-dir (default exp/synthetic)")
    ap.add_deprecated_alias("--exp", "--exp-dir")
    ap.add_argument("--command", default="make demo",
                    help="the command that produced the run, recorded in the JSON (default 'make demo')")
    ap.add_argument("--out", default=str(RESULTS_DIR / "quickstart.json"),
                    help="output JSON (default docs/results/quickstart.json)")
    return ap


def main(argv: list[str] | None = None) -> int:
    """CLI: collect and write the JSON."""
    a = build_parser().parse_args(argv)
    data = collect(Path(a.exp_dir), a.command)
    out = Path(a.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, out)
    print(f"wrote {out} (tst-COMMON k = {data['tst-COMMON'].get('ks')}, "
          f"tst-unseen: {'yes' if 'tst-unseen' in data else 'no'}, stages {sorted(data['stage_seconds'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
