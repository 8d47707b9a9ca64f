"""Tables of the quickstart (README, docs/recipes.md): the k sweep, tst-unseen, stage times, the total,
the convergence curve."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import md_table, num

QUICKSTART_METRICS = ("BLEU", "chrF", "AL", "LAAL", "YAAL", "AL_CA")


def quickstart_sweep(d: Mapping[str, Any]) -> str:
    """Per-language and average BLEU/chrF/AL/LAAL/YAAL/AL_CA at every k of an ``eval/simultaneous_eval.py`` sweep."""
    rows = []
    for lang in [*d["langs"], "avg"]:
        for k in d["ks"]:
            e = d["sweep"][f"k{k}"]
            r = e["average"] if lang == "avg" else e["per_lang"][lang]
            rows.append([lang, k, *(num(r.get(m)) for m in QUICKSTART_METRICS)])
    return md_table(["lang", "k", *QUICKSTART_METRICS], rows)


def quickstart_single(d: Mapping[str, Any]) -> str:
    """Per-language and average BLEU/chrF/AL/LAAL/YAAL/AL_CA of one ``scores.json`` (one k)."""
    langs = list(d["per_lang"])
    rows = [[lang, *(num(d["per_lang"][lang].get(m)) for m in QUICKSTART_METRICS)] for lang in langs]
    rows.append(["avg", *(num(d["average"].get(m)) for m in QUICKSTART_METRICS)])
    k = (d.get("config") or {}).get("waitk")
    return f"wait-{k}:\n\n" + md_table(["lang", *QUICKSTART_METRICS], rows) if k else md_table(
        ["lang", *QUICKSTART_METRICS], rows)


def quickstart_stages(d: Mapping[str, Any]) -> str:
    """Seconds per recipe stage (``EXP/.done/stageN``), with ``make setup`` before them and the whole
    ``make demo`` after them when the run recorded them."""
    st = d.get("stage_seconds") or {}
    names = d.get("stage_names") or {}
    rows = [[s, names.get(s, ""), num(v, "{:.0f}")] for s, v in sorted(st.items(), key=lambda x: int(x[0]))]
    if d.get("setup_seconds") is not None:
        rows.insert(0, ["setup", "make setup and the system packages", num(d["setup_seconds"], "{:.0f}")])
    if d.get("total_seconds") is not None:
        rows.append(["total", "the whole `make demo`, setup included", num(d["total_seconds"], "{:.0f}")])
    return md_table(["stage", "what", "seconds"], rows)


DEMO_BUDGET_S = 720


def quickstart_total(d: Mapping[str, Any]) -> str:
    """One sentence: how long ``make demo`` took in wall time, setup included, and how much was training."""
    total, train = d.get("total_seconds"), (d.get("stage_seconds") or {}).get("2")
    if total is None:
        return "The run did not record its total time (it was not started by `make demo`)."
    m = d["provenance"]["machine"]
    verdict = "met" if total <= DEMO_BUDGET_S else "**missed**"
    return (f"`make demo` took {total / 60:.1f} minutes wall on {m.get('cores')} cores ({m.get('cpu_model')}), "
            f"setup included (budget {DEMO_BUDGET_S / 60:.0f} minutes: {verdict}); training was "
            f"{num(train, '{:.0f}')} s of it.")


def quickstart_curve(d: Mapping[str, Any]) -> str:
    """Dev BLEU (mean over languages) at k = 1, 3, 5 per validated update, and wait-3 BLEU on both test sets
    where the checkpoint was evaluated (``bench/bench_quickstart_curve.py``)."""
    rows = []
    for r in d["dev_curve"]:
        t = d["test_wait3"].get(str(r["update"]), {})
        mark = " (chosen)" if r["update"] == d["chosen_update"] else ""
        rows.append([f"{r['update']}{mark}", num(r["k1"]), num(r["k3"]), num(r["k5"]), num(r["mean"]),
                     num((t.get("tst-COMMON") or {}).get("avg")), num((t.get("tst-unseen") or {}).get("avg"))])
    return (md_table(["updates", "dev k=1", "dev k=3", "dev k=5", "dev mean", "tst-COMMON k=3", "tst-unseen k=3"], rows)
            + f"\n\nChosen on dev: the first update whose dev mean is within {num(d['dev_margin'])} BLEU of the "
              f"run's best ({d['chosen_update']} updates).")
