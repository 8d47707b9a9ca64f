#!/usr/bin/env python
"""Print one summary table of ``docs/results/*.json`` (written by ``bench/run_all.sh``).

Each row: benchmark, measure, value, goal. Missing files or keys are shown as ``-``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _get(d: Any, *keys: Any) -> Any:
    for k in keys:
        if isinstance(d, dict) and k in d:
            d = d[k]
        elif isinstance(d, list) and isinstance(k, int) and -len(d) <= k < len(d):
            d = d[k]
        else:
            return None
    return d


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def rows(results: Path) -> list[tuple[str, str, str, str]]:
    """(bench, measure, value, goal) rows from the JSON files under ``results``."""
    def load(name: str) -> dict:
        p = results / f"{name}.json"
        try:
            return json.loads(p.read_text())
        except (OSError, ValueError):
            return {}

    out: list[tuple[str, str, str, str]] = []
    f = load("features")
    if f:
        x = _get(f, "results", 0, "x_realtime_per_cpu_second")
        out.append(("features", "fbank x real time per CPU second (1 process)", _f(x, "{:.0f}"), ">= 500"))
    a = load("alignment")
    if a:
        out.append(("alignment", f"read+align+report seconds ({a.get('segments')} segments)",
                    _f(_get(a, "seconds", "read_align_report")), f"<= {a.get('budget_s')}"))
    s = load("streaming")
    if s:
        for n in ("1", "4", "8"):
            out.append(("streaming", f"RTF, {n} target language(s) joint", _f(_get(s, "rtf_by_num_langs", n, "rtf"), "{:.3f}"), ""))
        out.append(("streaming", "RTF 8 langs / 1 lang", _f(s.get("joint8_over_joint1_rtf")), "<= 3"))
        out.append(("streaming", "joint 4 / 4 single runs", _f(_get(s, "joint_vs_single", "ratio")), "<= 0.4"))
        out.append(("streaming", "re-encode / incremental (20 s)", _f(_get(s, "incremental_vs_reencode", "speedup")), ">= 3"))
        for name in ("incremental", "incremental_left", "incremental_cat", "reencode"):
            v = _get(s, "growth", name, "max_over_min_from_5s")
            if v is not None:
                goal = "<= 1.2" if name.startswith("incremental") and not name.endswith("cat") else "(grows)"
                out.append(("streaming", f"ms/segment max/min from 5 s ({name})", _f(v), goal))
    t = load("train")
    for r in t.get("results", []):
        prec = r.get("precision", "fp32")
        goal = ">= 40% (s, 2t, fp32)" if r["size"] == "s" and r["threads"] == 2 and prec in ("fp32", "auto") else ""
        out.append(("train", f"{r['size']} {r['threads']}t {r['device']} {prec}: frames/s, tokens/s, MFU (same-dtype peak)",
                    f"{r['frames_per_s']:.0f}, {r['tokens_per_s']:.0f}, "
                    f"{'BUG (>100%)' if r.get('mfu') is None else format(100 * r['mfu'], '.1f') + '%'}", goal))
    for sk in t.get("meta", {}).get("skipped", []):
        out.append(("train", f"{sk['size']} {sk['threads']}t {sk['precision']}", "skipped", sk["reason"]))
    for name in ("stragglers_quick", "stragglers"):
        g = load(name)
        if g:
            out.append(("stragglers", f"table in {name}.json (table_markdown)", f"{len(g.get('rows', []))} rows", ""))
    v = load("vs_fairseq")
    if v.get("skipped"):
        out.append(("vs_fairseq", "skipped", "fairseq not installed", ""))
    elif v:
        by = v.get("by_precision") or {v.get("headline_precision", "fp32"): v}
        for prec, b in by.items():
            out.append(("vs_fairseq", f"throughput ours ({prec}) / fairseq (fp32) min / median / max",
                        f"{_f(b.get('ratio_min'))} / {_f(b.get('ratio_median'))} / {_f(b.get('ratio_max'))}", ">= 1.5"))
            e = b.get("equal_wall") or {}
            out.append(("vs_fairseq", f"dev loss at equal training time: ours ({prec}) / fairseq",
                        f"{_f(e.get('ours_dev_loss'), '{:.3f}')} / {_f(e.get('fairseq_dev_loss'), '{:.3f}')}",
                        "ours <= fairseq"))
        sm = v.get("summary")
        if sm:
            out.append(("vs_fairseq", "MFU of s at 1 / 2 threads, speed-up 2 threads / 1",
                        f"{_f(sm.get('mfu_s_1t'), '{:.1%}')} / {_f(sm.get('mfu_s_2t'), '{:.1%}')}, "
                        f"{_f(sm.get('speedup_2t_over_1t_s'))}", "MFU at 2 threads >= 50%"))
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the table for ``argv[0]`` (default docs/results)."""
    argv = sys.argv[1:] if argv is None else argv
    results = Path(argv[0] if argv else Path(__file__).resolve().parents[1] / "docs" / "results")
    print("| bench | measure | value | goal |")
    print("|---|---|---|---|")
    for r in rows(results):
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
