"""Policies compared at equal latency: read policy sweeps, interpolate, summarise, render.

Input: the sweep folders written by ``eval/simultaneous_eval.py --policy NAME --policy-args p=v1,v2,..``
(``scores.json`` with ``{"policy", "swept_param", "values", "sweep": {point: {"per_lang": {lang:
{metric: value}}, ...}}}``), one per (model, policy).

Comparison at equal latency (for each model and language): wait-k's own point at k (e.g. 3 and 5)
gives a latency ``L_k`` (plain AL, and separately AL_CA); every adaptive policy's BLEU at ``L_k`` is
read off its sweep by linear interpolation between the two neighbouring points (sorted by latency),
and only inside the sweep's latency range (never extrapolated; ``None`` outside). A policy *beats*
wait-k there when its interpolated BLEU is higher than wait-k's BLEU at k.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mmst.provenance import run_record

#: The source paths the policy experiment exercises (``recipes/synthetic/run_policies_hard.sh``: the two
#: models' training, the policy sweeps, this comparison); recorded with their digests in
#: ``provenance.depends_on``.
DEPENDS_ON = ("recipes/synthetic/run_policies_hard.sh", "recipes/synthetic/run_waitk_hard.sh", "recipes/synthetic/conf/",
              "recipes/lib/", "mmst/cli/simultaneous_eval.py", "mmst/cli/policy_results.py", "mmst/features.py", "mmst/data/",
              "mmst/models/", "mmst/losses.py", "mmst/training/", "mmst/simultaneous/", "mmst/evaluation/")


class CompareError(ValueError):
    """A missing or malformed sweep (one-line message naming the file)."""


def load_sweep(path: str | os.PathLike) -> dict[str, Any]:
    """A policy sweep folder -> ``{"policy", "param", "points": [{"value", "params", "per_lang"}]}``.

    A folder with a single evaluation (no sweep) gives one point.

    Raises:
        CompareError: no ``scores.json``, or one without per-language results.
    """
    f = Path(path) / "scores.json"
    if not f.is_file():
        raise CompareError(f"{f}: not found (run eval/simultaneous_eval.py first)")
    obj = json.loads(f.read_text())
    if "sweep" in obj:
        param = obj.get("swept_param") or ("k" if "ks" in obj else None)
        points = []
        for key, entry in obj["sweep"].items():
            params = entry.get("params") or ({"k": int(key[1:])} if key.startswith("k") else {})
            points.append({"value": params.get(param), "params": params, "per_lang": entry["per_lang"],
                           "rtf": entry.get("rtf")})
        return {"policy": obj.get("policy", "waitk"), "param": param, "points": points}
    if "per_lang" not in obj:
        raise CompareError(f"{f}: no per_lang results")
    cfg = obj.get("config", {})
    params = cfg.get("policy_params") or {}
    per_lang = {lang: {m: v for m, v in d.items() if m != "info"} for lang, d in obj["per_lang"].items()}
    return {"policy": cfg.get("policy") or "waitk", "param": None,
            "points": [{"value": None, "params": params, "per_lang": per_lang, "rtf": obj.get("rtf")}]}


def curve(sweep: Mapping[str, Any], lang: str, metric: str = "AL") -> list[tuple[float, float, Any]]:
    """``[(latency, BLEU, parameter value)]`` of one language, sorted by latency (points lacking a
    metric are left out)."""
    pts = []
    for p in sweep["points"]:
        d = p["per_lang"].get(lang, {})
        if metric in d and "BLEU" in d and d[metric] is not None and d["BLEU"] is not None:
            pts.append((float(d[metric]), float(d["BLEU"]), p["value"]))
    return sorted(pts, key=lambda x: (x[0], x[1]))


def interpolate(points: Sequence[tuple[float, float, Any]], x: float) -> float | None:
    """Piecewise-linear value at latency ``x`` of ``points`` sorted by latency; None outside
    ``[min, max]`` latency (no extrapolation). Equal latencies average their BLEU."""
    if not points:
        return None
    xs = [p[0] for p in points]
    if x < xs[0] or x > xs[-1]:
        return None
    merged: dict[float, list[float]] = {}
    for lat, b, _ in points:
        merged.setdefault(lat, []).append(b)
    pts = sorted((lat, sum(bs) / len(bs)) for lat, bs in merged.items())
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[0][1]  # a single point equal to x


def equal_latency(
    sweeps: Mapping[str, Mapping[str, Any]], langs: Sequence[str], ks: Sequence[int] = (3, 5), metric: str = "AL"
) -> dict[str, dict[str, dict[str, Any]]]:
    """For one model's ``{policy: sweep}``: ``{f"k{k}": {lang: {"waitk": {"latency", "BLEU"},
    "adaptive": {policy: BLEU or None}, "best": policy, "beats_waitk": [policies]}}}``.

    Raises:
        CompareError: no wait-k sweep, or wait-k lacks a k.
    """
    if "waitk" not in sweeps:
        raise CompareError("the comparison needs a wait-k sweep")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for k in ks:
        row: dict[str, dict[str, Any]] = {}
        for lang in langs:
            wk = [p for p in sweeps["waitk"]["points"] if p["params"].get("k") == k]
            if not wk or metric not in wk[0]["per_lang"].get(lang, {}):
                raise CompareError(f"wait-k sweep has no k={k} {metric} for {lang}")
            lat = float(wk[0]["per_lang"][lang][metric])
            bleu = float(wk[0]["per_lang"][lang]["BLEU"])
            ada = {pol: interpolate(curve(sw, lang, metric), lat) for pol, sw in sweeps.items() if pol != "waitk"}
            scored = {pol: b for pol, b in ada.items() if b is not None}
            best = max(scored, key=scored.get) if scored and max(scored.values()) > bleu else "waitk"
            row[lang] = {"waitk": {"latency": lat, "BLEU": bleu}, "adaptive": ada, "best": best,
                         "beats_waitk": sorted(p for p, b in scored.items() if b > bleu)}
        out[f"k{k}"] = row
    return out


def summary(eq_offline_al: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The headline object from the offline model's plain-AL comparison: languages (of all) where some
    adaptive policy beats wait-k, per k, and the best policy per language and k."""
    langs = sorted({lang for row in eq_offline_al.values() for lang in row})
    return {
        "langs_adaptive_beats_waitk_offline_model": {
            kk: sum(1 for lang in row if row[lang]["beats_waitk"]) for kk, row in eq_offline_al.items()},
        "best_policy_per_lang": {lang: {kk: row[lang]["best"] for kk, row in eq_offline_al.items()} for lang in langs},
    }


def provenance(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The results JSON's provenance record (:func:`mmst.provenance.run_record`) for ``argv``
    (default: this process's command line), with the experiment's :data:`DEPENDS_ON`."""
    return run_record(shlex.join(["python", *argv]) if argv is not None else None, depends_on=DEPENDS_ON)


def plot_policies(
    sweeps: Mapping[str, Mapping[str, Any]], langs: Sequence[str], path: str | os.PathLike, title: str
) -> Path:
    """One panel per language and latency metric (rows: AL, AL_CA), one BLEU-vs-latency curve per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, len(langs), figsize=(3.6 * len(langs), 6.4), squeeze=False)
    for r, metric in enumerate(("AL", "AL_CA")):
        for c, lang in enumerate(langs):
            ax = axes[r][c]
            for pol, sw in sweeps.items():
                pts = curve(sw, lang, metric)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=pol)
            ax.set_title(f"{lang}: BLEU vs {metric}", fontsize=9)
            ax.set_xlabel(f"{metric} (ms)", fontsize=8)
            ax.grid(True, alpha=0.3)
            if c == 0:
                ax.set_ylabel("BLEU")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _f(v: Any, nd: int = 1) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


def render_markdown(res: Mapping[str, Any]) -> str:
    """The results Markdown (every number from ``res``, the object written as JSON)."""
    s = res["summary"]
    langs = res["langs"]
    md = [f"# {res['title']}", "",
          f"Command: `{res['provenance']['command']}`  ",
          f"Date: {res['provenance']['date']}, commit `{res['provenance']['git_commit']}`, "
          f"{res['provenance']['machine'].get('cpu_model') or res['provenance']['machine'].get('cpu')} ({res['provenance']['machine']['cores']} cores), "
          f"torch {res['provenance']['machine']['torch']}.  ",
          f"Test set: {res['split']}, first {res['n_utterances']} utterances; segments of "
          f"{res['segment_ms']:.0f} ms; joint decoding of {', '.join(langs)}; greedy.", ""]
    md += ["## Summary", "",
           f"Languages (of {len(langs)}) where an adaptive policy scores more BLEU than wait-k at wait-k's own "
           f"plain AL (offline-trained model): k=3: **{s['langs_adaptive_beats_waitk_offline_model']['k3']}**, "
           f"k=5: **{s['langs_adaptive_beats_waitk_offline_model']['k5']}**.", "",
           "| lang | best at k=3 AL | best at k=5 AL |", "|---|---|---|"]
    for lang in langs:
        b = s["best_policy_per_lang"][lang]
        md.append(f"| {lang} | {b['k3']} | {b['k5']} |")
    md.append("")
    for model, info in res["models"].items():
        md += [f"## {model} model", "", info.get("description", ""), ""]
        if info.get("updates") is not None:
            md += [f"Checkpoint decoded: {info['updates']} updates.", ""]
        if info.get("offline_bleu"):
            md.append("Offline greedy BLEU (the quality it reached): " + ", ".join(
                f"{lang} {_f(info['offline_bleu'].get(lang))}" for lang in langs) + ".")
            md.append("")
        for metric in ("AL", "AL_CA"):
            eq = res["equal_latency"][model][metric]
            pols = sorted({p for row in eq.values() for lang in row for p in row[lang]["adaptive"]})
            md += [f"### BLEU at wait-k's {metric} (k=3, k=5)", "",
                   "| lang | k | wait-k " + metric + " (ms) | wait-k BLEU | " + " | ".join(pols) + " | best |",
                   "|---|---|---|---|" + "---|" * len(pols) + "---|"]
            for kk, row in eq.items():
                for lang in langs:
                    r = row[lang]
                    cells = [_f(r["adaptive"].get(p)) for p in pols]
                    md.append(f"| {lang} | {kk[1:]} | {_f(r['waitk']['latency'], 0)} | {_f(r['waitk']['BLEU'])} | "
                              + " | ".join(cells) + f" | {r['best']} |")
            md.append("")
        md += ["### Sweeps", "", "| policy | parameter | value | lang | BLEU | AL | AL_CA | RTF |",
               "|---|---|---|---|---|---|---|---|"]
        for pol, sw in res["sweeps"][model].items():
            for p in sw["points"]:
                for lang in langs:
                    d = p["per_lang"].get(lang, {})
                    md.append(f"| {pol} | {sw['param'] or '-'} | {p['value']} | {lang} | {_f(d.get('BLEU'))} | "
                              f"{_f(d.get('AL'), 0)} | {_f(d.get('AL_CA'), 0)} | {_f(p.get('rtf'), 3)} |")
        md.append("")
        if info.get("plot"):
            md += [f"![{model}: BLEU vs AL and AL_CA per policy]({info['plot']})", ""]
    md += ["A dash: wait-k's latency lies outside that policy's measured latency range (no extrapolation).", ""]
    return "\n".join(md)

