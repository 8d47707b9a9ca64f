"""Compare systems across a wait-k sweep: BLEU and latency per language, seeds aggregated.

Input: for every system, one or more evaluation directories written by ``eval/simultaneous_eval.py``:

* a k sweep (``--waitk-lagging 1,3,5``): ``DIR/scores.json`` = ``{"sweep": {"k1": {"per_lang": {lang:
  {metric: value}}, "average": ..}, ..}, "ks": [..], "langs": [..]}`` and per-k ``DIR/k<k>/scores.json``
  (whose ``config.checkpoint`` names the evaluated checkpoint);
* a single setting: ``DIR/scores.json`` = ``{"per_lang": .., "average": .., "config": {"waitk": k|null, ..}}``
  (``waitk: null`` = offline, column ``offline``);
* or only ``DIR/k<k>/scores.json`` files;
* plus, in any layout, ``DIR/offline/scores.json`` (an ``--offline`` evaluation next to a sweep; column
  ``offline``).

Seeds: a system given as ``NAME=DIR1,DIR2,DIR3`` has one directory per seed; every number is reported as
the mean and the SAMPLE standard deviation over seeds (``ddof=1``; ``std`` is ``None`` for one seed).
Language groups: the same NAME given several times (e.g. bilingual baselines, one model per language:
``bilingual=de_s1,de_s2`` and ``bilingual=es_s1,es_s2``) merges the groups' languages (a language in two
groups of one system is an error); the i-th directory of every group is seed i.

Average over languages (row ``avg``): per seed, the unweighted mean over the system's languages (only
seeds where every language has a value), then mean/std over seeds — the same "average" as
``scores.json``.

Parameter counts (``params``): in order of precedence, an explicit number, the sum over the given
checkpoints, or the sum over groups of the checkpoint recorded in the evaluation output
(``config.checkpoint``, first seed), counted with ``model.num_parameters()`` (trainable, tied weights
once). A bilingual system's count is the SUM of its per-language models.

Units: latency metrics (AL, LAAL, ...) in ms of source audio; BLEU 0-100 (sacrebleu).
Outputs (:func:`write_comparison`): ``comparison.json``, ``comparison.md`` and one BLEU-vs-AL plot per
language ``bleu_al_<lang>.png`` (plus ``bleu_al_avg.png``), one curve per system with seed std error bars.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmst.atomic import atomic_path, atomic_write_text

logger = logging.getLogger("mmst.evaluation.compare")

#: Metrics that are latencies (ms); others (BLEU) are quality.
DEFAULT_METRICS: tuple[str, ...] = ("BLEU", "AL")
_KDIR = re.compile(r"^k(\d+)$")


class CompareError(ValueError):
    """Bad comparison input (message names the system, directory or file)."""


@dataclass
class SystemRuns:
    """One system: language groups, each a list of evaluation directories (one per seed)."""

    name: str
    groups: list[list[Path]] = field(default_factory=list)
    description: str | None = None


def parse_assignment(text: str, what: str = "--system") -> tuple[str, str]:
    """``"NAME=VALUE"`` -> ``(NAME, VALUE)``; raises :class:`CompareError` naming ``what`` otherwise."""
    if "=" not in text:
        raise CompareError(f"{what} {text!r}: expected NAME=VALUE")
    name, value = text.split("=", 1)
    name, value = name.strip(), value.strip()
    if not name or not value:
        raise CompareError(f"{what} {text!r}: empty name or value")
    return name, value


def parse_systems(args: Iterable[str]) -> list[SystemRuns]:
    """Parse ``NAME=DIR1,DIR2,...`` strings (repeatable; a repeated NAME adds a language group).

    Returns systems in first-appearance order.
    """
    out: dict[str, SystemRuns] = {}
    for a in args:
        name, value = parse_assignment(a)
        dirs = [Path(d.strip()) for d in value.split(",") if d.strip()]
        out.setdefault(name, SystemRuns(name)).groups.append(dirs)
    return list(out.values())


def _load_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise CompareError(f"cannot read {path}: {e}") from None


def _clean(per_lang: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for lang, d in per_lang.items():
        vals = {m: float(v) for m, v in (d or {}).items()
                if m != "info" and isinstance(v, (int, float)) and not isinstance(v, bool)}
        out[lang] = vals  # {} = evaluated but nothing to score (e.g. every hypothesis empty)
    return out


def k_label(waitk: Any) -> str:
    """Column key of a setting: ``3 -> "k3"``, ``None -> "offline"``."""
    return "offline" if waitk is None else f"k{int(waitk)}"


def k_sort_key(label: str) -> tuple[int, int]:
    """Sort ``k1 < k3 < k10 < offline``."""
    m = re.match(r"^k(\d+)$", label)
    return (0, int(m.group(1))) if m else (1, 0)


def read_eval_dir(path: str | os.PathLike[str]) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, Any]]:
    """Read one evaluation directory (layouts in the module docstring).

    Returns:
        ``({k_label: {lang: {metric: value}}}, {"checkpoint": path | None, "num_parameters": int | None})``;
        ``num_parameters`` when the evaluation recorded it (``config.num_parameters`` or top level).

    Raises:
        CompareError: the directory or its ``scores.json`` files are missing or unreadable.
    """
    d = Path(path)
    if not d.is_dir():
        raise CompareError(f"evaluation directory not found: {d}")
    res: dict[str, dict[str, dict[str, float]]] = {}
    info: dict[str, Any] = {"checkpoint": None, "num_parameters": None}

    def note(obj: Mapping[str, Any]) -> None:
        cfg = obj.get("config") or {}
        for key in ("checkpoint", "num_parameters"):
            if info[key] is None:
                info[key] = cfg.get(key, obj.get(key))

    top = d / "scores.json"
    if top.is_file():
        obj = _load_json(top)
        note(obj)
        if "sweep" in obj:
            for key, entry in obj["sweep"].items():
                res[key] = _clean(entry.get("per_lang", {}))
        elif "per_lang" in obj:
            cfg = obj.get("config") or {}
            res[k_label(cfg.get("waitk"))] = _clean(obj["per_lang"])
        else:
            raise CompareError(f"{top}: neither a sweep ('sweep') nor a single evaluation ('per_lang')")
    for sub in sorted(d.iterdir()):
        m = _KDIR.match(sub.name) or sub.name == "offline"
        if not (m and sub.is_dir() and (sub / "scores.json").is_file()):
            continue
        obj = _load_json(sub / "scores.json")
        note(obj)
        if sub.name not in res and "per_lang" in obj:
            res[sub.name] = _clean(obj["per_lang"])
    if not res:
        raise CompareError(f"{d}: no scores.json (expected the output of eval/simultaneous_eval.py)")
    return res, info


def mean_std(values: Sequence[float]) -> dict[str, Any]:
    """``{"mean", "std", "n", "values"}``: arithmetic mean and SAMPLE standard deviation (ddof=1;
    ``None`` for fewer than 2 values). Non-finite values are kept (they make the mean non-finite)."""
    v = [float(x) for x in values]
    n = len(v)
    if n == 0:
        return {"mean": None, "std": None, "n": 0, "values": []}
    mu = sum(v) / n
    sd = math.sqrt(sum((x - mu) ** 2 for x in v) / (n - 1)) if n > 1 else None
    return {"mean": mu, "std": sd, "n": n, "values": v}


_PARAM_CACHE: dict[str, int] = {}


def count_parameters(checkpoint: str | os.PathLike[str]) -> int:
    """Trainable parameters of the model in an mmst checkpoint or model folder (``model.num_parameters()``; tied
    embeddings once). Raises :class:`CompareError` when it cannot be loaded."""
    key = str(Path(checkpoint).resolve())
    if key not in _PARAM_CACHE:
        from mmst.models.checkpoint import load_model

        try:
            model, _ = load_model(checkpoint)
        except Exception as e:  # noqa: BLE001 - any load failure becomes one message
            raise CompareError(f"cannot count parameters of {checkpoint}: {e}") from None
        n = model.num_parameters() if hasattr(model, "num_parameters") else sum(
            p.numel() for p in model.parameters() if p.requires_grad)
        _PARAM_CACHE[key] = int(n)
    return _PARAM_CACHE[key]


def compare_systems(systems: Sequence[SystemRuns], *, metrics: Sequence[str] = DEFAULT_METRICS,
                    params: Mapping[str, int] | None = None,
                    checkpoints: Mapping[str, Sequence[str | os.PathLike[str]]] | None = None,
                    count_from_eval: bool = True) -> dict[str, Any]:
    """Aggregate the systems' sweeps (see module docstring).

    Args:
        systems: from :func:`parse_systems` (or built by hand).
        metrics: metrics to aggregate (``BLEU``, ``AL``, ``LAAL``, ... as in ``scores.json``).
        params: explicit parameter counts per system name (win over everything else).
        checkpoints: checkpoints per system name whose parameter counts are summed.
        count_from_eval: else, count the parameters of the checkpoint recorded in each group's first
            evaluation directory (loads the model; skipped with a warning when the file is gone).

    Returns:
        ``{"systems", "langs", "ks", "metrics", "params": {name: int|None}, "n_seeds": {name: int},
        "descriptions", "sources": {name: [[dir, ...], ...]},
        "results": {name: {lang|"avg": {k: {metric: {"mean", "std", "n", "values"}}}}}}``.

    Raises:
        CompareError: a language in two groups of a system, groups with different seed counts, or
            unreadable evaluation output.
    """
    params, checkpoints = dict(params or {}), dict(checkpoints or {})
    known = {s.name for s in systems}
    for what, d in (("--params", params), ("--checkpoint-of", checkpoints)):
        extra = [n for n in d if n not in known]
        if extra:
            raise CompareError(f"{what} names unknown system(s) {extra} (systems: {sorted(known)})")
    results: dict[str, Any] = {}
    out_params: dict[str, int | None] = {}
    n_seeds: dict[str, int] = {}
    all_langs: list[str] = []
    all_ks: set[str] = set()
    for s in systems:
        counts = {len(g) for g in s.groups}
        if len(counts) != 1:
            raise CompareError(f"system {s.name!r}: its groups have different numbers of seed directories "
                               f"{[len(g) for g in s.groups]}")
        n = counts.pop()
        n_seeds[s.name] = n
        # per_seed[i] = {k: {lang: {metric: value}}} merged over groups
        per_seed: list[dict[str, dict[str, dict[str, float]]]] = [{} for _ in range(n)]
        lang_owner: dict[str, int] = {}
        group_info: list[dict[str, Any]] = []
        for gi, group in enumerate(s.groups):
            group_langs: set[str] = set()
            first_info: dict[str, Any] = {}
            for i, d in enumerate(group):
                sweep, info = read_eval_dir(d)
                if i == 0:
                    first_info = info
                for k, per_lang in sweep.items():
                    for lang, vals in per_lang.items():
                        group_langs.add(lang)
                        per_seed[i].setdefault(k, {})[lang] = vals
            for lang in group_langs:
                if lang in lang_owner and lang_owner[lang] != gi:
                    raise CompareError(f"system {s.name!r}: language {lang!r} appears in two groups "
                                       f"({s.groups[lang_owner[lang]][0]} and {group[0]})")
                lang_owner[lang] = gi
            group_info.append(first_info)
        langs = sorted(lang_owner, key=lambda x: (lang_owner[x], x))
        if not any(vals for seed in per_seed for pl in seed.values() for vals in pl.values()):
            logger.warning("system %s: no language has scores in %s (every hypothesis empty?)", s.name,
                           [str(d) for g in s.groups for d in g])
        for lang in langs:
            if lang not in all_langs:
                all_langs.append(lang)
        ks = sorted({k for seed in per_seed for k in seed}, key=k_sort_key)
        res: dict[str, Any] = {}
        for lang in [*langs, "avg"]:
            res[lang] = {}
            for k in ks:
                cell: dict[str, Any] = {}
                for m in metrics:
                    vals = []
                    for seed in per_seed:
                        pl = seed.get(k, {})
                        if lang == "avg":
                            if langs and all(m in pl.get(x, {}) for x in langs):
                                vals.append(sum(pl[x][m] for x in langs) / len(langs))
                        elif m in pl.get(lang, {}):
                            vals.append(pl[lang][m])
                    if vals:
                        cell[m] = mean_std(vals)
                if cell:
                    res[lang][k] = cell
                    all_ks.add(k)
        results[s.name] = res
        # parameters
        if s.name in params:
            out_params[s.name] = int(params[s.name])
        elif s.name in checkpoints:
            out_params[s.name] = sum(count_parameters(c) for c in checkpoints[s.name])
        elif count_from_eval:
            total: int | None = 0
            for gi_info in group_info:
                c = gi_info.get("checkpoint")
                if gi_info.get("num_parameters") is not None:
                    total += int(gi_info["num_parameters"])
                elif c is not None and Path(c).exists():
                    total += count_parameters(c)
                else:
                    logger.warning("system %s: no checkpoint recorded/found (%s): parameter count unknown", s.name, c)
                    total = None
                    break
            out_params[s.name] = total
        else:
            out_params[s.name] = None
    if not all_ks:
        raise CompareError("no system has any score (every evaluation failed or produced only empty hypotheses): "
                           + ", ".join(str(d) for s in systems for g in s.groups for d in g))
    return {"systems": [s.name for s in systems], "langs": all_langs, "ks": sorted(all_ks, key=k_sort_key),
            "metrics": list(metrics), "params": out_params, "n_seeds": n_seeds,
            "descriptions": {s.name: s.description for s in systems if s.description},
            "sources": {s.name: [[str(d) for d in g] for g in s.groups] for s in systems}, "results": results}


# --------------------------------------------------------------------------------------- reporting


def format_params(n: int | None) -> str:
    """``27230000 -> "27.23M"``, ``None -> "-"``."""
    if n is None:
        return "-"
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e3:
        return f"{n / 1e3:.1f}k"
    return str(n)


def format_cell(stat: Mapping[str, Any] | None, metric: str) -> str:
    """``"mean ± std"`` (BLEU 2 decimals, latencies 0 decimals); ``mean`` alone for one seed; ``-`` if absent."""
    if not stat or stat.get("mean") is None:
        return "-"
    nd = 2 if metric.upper().startswith("BLEU") else 0
    mu = stat["mean"]
    if not math.isfinite(mu):
        return "nan"
    s = f"{mu:.{nd}f}"
    if stat.get("std") is not None:
        s += f" ± {stat['std']:.{nd}f}"
    return s


def _k_title(k: str) -> str:
    return k.replace("k", "k=", 1) if k.startswith("k") else k


def comparison_markdown(cmp: Mapping[str, Any], title: str = "System comparison") -> str:
    """Markdown: a system list (parameters, seeds, description), then one table per language (and
    ``avg``): rows = systems, columns = ``<metric> k=<k>`` for every k."""
    systems, ks, metrics = cmp["systems"], cmp["ks"], cmp["metrics"]
    seeds = sorted(set(cmp["n_seeds"].values()))
    lines = [f"# {title}", ""]
    lines.append("BLEU: sacrebleu corpus BLEU; latencies (AL, ...) in ms of source audio (SimulEval 1.1 "
                 "definitions). Cells: mean ± sample standard deviation over seeds "
                 f"(seeds per system: {', '.join(map(str, seeds))}); `-` = not evaluated, or nothing to score "
                 "(every hypothesis empty; an `avg` needs every language). "
                 "Parameters: trainable, tied embeddings counted once; a system of several models "
                 "(e.g. bilingual) counts all of them.")
    lines.append("")
    lines += ["| system | parameters | seeds | languages | description |", "|---|---|---|---|---|"]
    for s in systems:
        res = cmp["results"][s]
        langs = [x if res[x] else f"{x} (no score)" for x in res if x != "avg"]
        lines.append(f"| {s} | {format_params(cmp['params'].get(s))} | {cmp['n_seeds'][s]} | "
                     f"{', '.join(langs) or 'none'} | "
                     f"{cmp.get('descriptions', {}).get(s, '')} |")
    lines.append("")
    for lang in [*cmp["langs"], "avg"]:
        lines += [f"## {lang}" if lang != "avg" else "## avg (unweighted mean over each system's languages)", ""]
        cols = [f"{m} {_k_title(k)}" for k in ks for m in metrics]
        lines.append("| system | params | " + " | ".join(cols) + " |")
        lines.append("|" + "---|" * (len(cols) + 2))
        for s in systems:
            r = cmp["results"][s].get(lang)
            if r is None:
                continue
            cells = [format_cell(r.get(k, {}).get(m), m) for k in ks for m in metrics]
            lines.append(f"| {s} | {format_params(cmp['params'].get(s))} | " + " | ".join(cells) + " |")
        lines.append("")
        if (cmp.get("plots") or {}).get(lang):
            lines += [f"![BLEU vs AL, {lang}]({cmp['plots'][lang]})", ""]
    return "\n".join(lines)


def plot_comparison(cmp: Mapping[str, Any], lang: str, path: str | os.PathLike[str], *,
                    quality: str = "BLEU", latency: str = "AL") -> Path | None:
    """BLEU-vs-latency plot of one language (or ``avg``): one curve per system over k, error bars =
    seed std, points labelled with k. matplotlib Agg backend. Returns the path, or None without data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = []
    for s in cmp["systems"]:
        r = cmp["results"][s].get(lang) or {}
        pts = []
        for k in cmp["ks"]:
            c = r.get(k, {})
            if quality in c and latency in c and c[quality]["mean"] is not None and c[latency]["mean"] is not None:
                pts.append((c[latency]["mean"], c[quality]["mean"], c[latency]["std"] or 0.0,
                            c[quality]["std"] or 0.0, _k_title(k)))
        if pts:
            curves.append((s, sorted(pts)))
    if not curves:
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for s, pts in curves:
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], xerr=[p[2] for p in pts], yerr=[p[3] for p in pts],
                    marker="o", capsize=2, label=s)
        for x, y, _, _, lab in pts:
            ax.annotate(lab, (x, y), textcoords="offset points", xytext=(3, 3), fontsize=6)
    ax.set_xlabel(f"{latency} (ms)")
    ax.set_ylabel(quality)
    ax.set_title(f"{quality} vs {latency}: {lang}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return path


def write_comparison(cmp: dict[str, Any], out_dir: str | os.PathLike[str], *, title: str = "System comparison",
                     plots: bool = True, latency: str = "AL") -> dict[str, Any]:
    """Write ``OUT/comparison.json``, ``OUT/comparison.md`` and ``OUT/bleu_al_<lang>.png`` (+ ``avg``).

    Returns ``cmp`` with ``plots`` ``{lang: file name}`` added.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cmp["plots"] = {}
    if plots and "BLEU" in cmp["metrics"] and latency in cmp["metrics"]:
        for lang in [*cmp["langs"], "avg"]:
            p = plot_comparison(cmp, lang, out / f"bleu_{latency.lower()}_{lang}.png", latency=latency)
            if p is not None:
                cmp["plots"][lang] = p.name
    atomic_write_text(out / "comparison.json", json.dumps(cmp, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(out / "comparison.md", comparison_markdown(cmp, title))
    return cmp
