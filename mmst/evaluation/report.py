"""Evaluation reports: ``scores.json``, ``scores.md`` (Markdown tables) and the BLEU-vs-AL plot.

``scores.json`` layout (written by :func:`write_scores`)::

    {"per_lang": {"de": {"BLEU": .., "length_ratio": .., "AL": .., "LAAL": .., "AL_CA": .., ...,
                         "info": {...}}, ...},
     "average": {"BLEU": .., "AL": .., ...},        # unweighted mean over languages
     "rtf": 0.12,                                     # compute seconds / audio seconds
     "config": {...}}                                 # the run's options

Latency values are in ms of source audio (the unit of SimulEval for speech input); BLEU is
sacrebleu corpus BLEU (0-100).  Plots use matplotlib's non-interactive ``Agg`` backend.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mmst.atomic import atomic_path, atomic_write_text
from mmst.evaluation.latency import LATENCY_METRICS

#: Column order of the Markdown tables (``length_ratio``: |Y| / |Y*| in latency units; ``chrF`` and ``YAAL``:
#: OmniSTEval's, :mod:`mmst.evaluation.omnisteval_adapter`).
TABLE_METRICS: tuple[str, ...] = ("BLEU", "chrF", "length_ratio", "YAAL") + LATENCY_METRICS
#: The degeneracy diagnostics (OmniSTEval, percent) and their table order.
DEGENERACY_METRICS: tuple[str, ...] = ("SWF", "EFSW", "DSPTV")


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.2f}"
    return str(v)


def format_metrics_table(
    rows: Mapping[str, Mapping[str, Any]],
    metrics: Sequence[str] = TABLE_METRICS,
    *,
    ca: bool = True,
    row_header: str = "lang",
) -> str:
    """Markdown table: one row per key of ``rows``, one column per metric (and ``<metric>_CA`` after
    the plain latency columns when ``ca``).  Missing values print as ``-``; floats with 2 decimals."""
    cols = list(metrics)
    if ca:
        cols += [f"{m}_CA" for m in metrics if m not in ("BLEU", "length_ratio")]
    cols = [c for c in cols if any(c in r for r in rows.values())] or cols
    lines = ["| " + " | ".join([row_header] + cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for name, r in rows.items():
        lines.append("| " + " | ".join([str(name)] + [_fmt(r.get(c)) for c in cols]) + " |")
    return "\n".join(lines)


def write_scores(
    out_dir: str | os.PathLike,
    per_lang: Mapping[str, Mapping[str, Any]],
    average: Mapping[str, float],
    *,
    rtf: float | None = None,
    config: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    title: str = "Simultaneous evaluation",
) -> dict[str, Any]:
    """Write ``out_dir/scores.json`` and ``out_dir/scores.md``.

    Args:
        out_dir: output directory (created).
        per_lang: ``{lang: {metric: value, ..., "info": {...}}}``.
        average: ``{metric: value}`` averaged over languages.
        rtf: real-time factor (compute s / audio s) of the whole run.
        config: run options recorded in the JSON and as a Markdown list.
        extra: more top-level JSON entries (e.g. timing).
        title: Markdown title.

    Returns:
        the JSON object written.
    """
    out = Path(out_dir)
    obj: dict[str, Any] = {"per_lang": {k: dict(v) for k, v in per_lang.items()}, "average": dict(average)}
    if rtf is not None:
        obj["rtf"] = rtf
    if config:
        obj["config"] = dict(config)
    if extra:
        obj.update(extra)
    atomic_write_text(out / "scores.json", json.dumps(obj, indent=2, ensure_ascii=False) + "\n")

    rows: dict[str, Mapping[str, Any]] = {lang: v for lang, v in per_lang.items()}
    if len(per_lang) > 1:
        rows["avg"] = average
    md = [f"# {title}", ""]
    md.append("Latency in ms of source audio (SimulEval 1.1 definitions; YAAL: OmniSTEval's); BLEU and chrF: "
              "sacrebleu corpus scores.")
    md.append("`_CA` = computation-aware (from `elapsed`).")
    md.append("")
    md.append("## Quality and latency")
    md.append("")
    md.append(format_metrics_table(rows, TABLE_METRICS, ca=False))
    md.append("")
    md.append("## Computation-aware latency")
    md.append("")
    md.append(_ca_table(rows))
    md.append("")
    if any(m in r for r in rows.values() for m in DEGENERACY_METRICS):
        md += _degeneracy_section(rows)
    if rtf is not None:
        md.append(f"Real-time factor (compute / audio duration): **{rtf:.3f}**")
        md.append("")
    sigs = {lang: (v.get("info") or {}).get("bleu_signature") for lang, v in per_lang.items()}
    notes = {lang: (v.get("info") or {}).get("bleu_note") for lang, v in per_lang.items()}
    if any(sigs.values()):
        md.append("## BLEU signatures")
        md.append("")
        for lang, s in sigs.items():
            if not s:
                continue
            md.append(f"- {lang}: `{s}`" + (f" (note: {notes[lang]})" if notes.get(lang) else ""))
        md.append("")
    if config:
        md.append("## Configuration")
        md.append("")
        for k, v in config.items():
            md.append(f"- {k}: `{v}`")
        md.append("")
    atomic_write_text(out / "scores.md", "\n".join(md))
    return obj


def _degeneracy_section(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The ``scores.md`` section of the degeneracy diagnostics (SWF, EFSW, DSPTV, likely degenerate)."""
    lines = ["## Degeneracy diagnostics (OmniSTEval)", "",
             "SWF: % of words written before the end of the source; EFSW: the % YAAL predicts; DSPTV = EFSW - SWF. "
             "|DSPTV| > 20: *likely degenerate*, its words and its YAAL disagree on how simultaneous it is (e.g. "
             "a burst of words at the end of each sentence).",
             "", "| lang | SWF | EFSW | DSPTV | likely degenerate |", "|---|---|---|---|---|"]
    for name, r in rows.items():
        flag = r.get("likely_degenerate")
        lines.append("| " + " | ".join([str(name)] + [_fmt(r.get(m)) for m in DEGENERACY_METRICS]
                                        + ["-" if flag is None else "**YES**" if flag else "no"]) + " |")
    return lines + [""]


def _ca_table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    cols = [f"{m}_CA" for m in ("YAAL",) + LATENCY_METRICS]
    lines = ["| lang | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for name, r in rows.items():
        lines.append("| " + " | ".join([str(name)] + [_fmt(r.get(c)) for c in cols]) + " |")
    return "\n".join(lines)


def plot_latency_quality(
    points: Mapping[str, Sequence[tuple[float, float, Any]]],
    path: str | os.PathLike,
    *,
    latency_metric: str = "AL",
    title: str = "BLEU vs AL",
) -> Path:
    """BLEU-vs-latency curve per language (matplotlib, Agg backend), saved as PNG.

    Args:
        points: ``{lang: [(latency_ms, bleu, label), ...]}`` (label, e.g. ``k=3``, annotates the point).
        path: output PNG path (parent created).
        latency_metric: x-axis metric name, for the label.
        title: figure title.

    Returns:
        the PNG path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for lang, pts in points.items():
        pts = sorted(pts, key=lambda p: p[0])
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        ax.plot(xs, ys, marker="o", label=lang)
        for x, y, lab in pts:
            if lab is not None:
                ax.annotate(str(lab), (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
    ax.set_xlabel(f"{latency_metric} (ms)")
    ax.set_ylabel("BLEU")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return path
