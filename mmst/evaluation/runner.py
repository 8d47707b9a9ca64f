"""The per-utterance evaluation runner and wait-k sweeps.

:func:`evaluate_setting` streams every utterance through one translator (one wait-k, or offline),
times it as SimulEval 1.1 times an agent (:func:`mmst.evaluation.streaming.stream_utterance`) and
writes, under its output directory:

- ``<lang>/instances.log``: SimulEval-1.1 instances;
- ``scores.json`` / ``scores.md``: per-language and averaged BLEU, AL, LAAL, AP, DAL, ATD,
  StartOffset, EndOffset (each also computation-aware, ``_CA``) and the real-time factor.

:func:`run_sweep` runs several settings (``OUT/k<k>/`` each when there is more than one) and writes
the sweep summary (``OUT/scores.json``, ``OUT/scores.md``, ``OUT/latency_quality.png``: BLEU vs AL per
language). ``eval/simultaneous_eval.py`` is the command line over these.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from mmst.atomic import atomic_write_text

logger = logging.getLogger("mmst.evaluation.runner")


def setting_label(waitk: int | None) -> str:
    """``3 -> "k3"``, ``None -> "offline"`` (sub-directory and summary key of a setting)."""
    return "offline" if waitk is None else f"k{waitk}"


def evaluate_setting(
    translator: Any,
    utts: Sequence[dict[str, Any]],
    audios: Sequence[np.ndarray],
    langs: list[str],
    units: dict[str, str],
    segment_ms: float,
    offline: bool,
    out_dir: str | Path,
    config: dict[str, Any],
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate one setting (one k, or offline) and write its instances and scores under ``out_dir``.

    Args:
        translator: streaming translator (``reset``, ``accept_audio``), e.g. ``EvalSystem.translator(k)``.
        utts: utterances of :func:`mmst.evaluation.utterances.load_utterances`.
        audios: their 16 kHz float32 samples (same order; empty = empty hypothesis).
        langs: target languages decoded jointly.
        units: latency unit per language (``word`` or ``char``).
        segment_ms: source segment size in ms.
        offline: decode each whole utterance at once (every delay = source length).
        out_dir: output directory.
        config: recorded in ``scores.json`` (``waitk`` is used in titles; ``simuleval_compat``: count
            reference words as SimulEval 1.1.4, see :func:`mmst.evaluation.scorer.score_instances`).
        progress: tqdm bar over utterances.

    Returns:
        The ``scores.json`` object (``per_lang``, ``average``, ``rtf``, ``config``, ``timing``).
    """
    from mmst.evaluation.instances import make_instance, write_instances
    from mmst.evaluation.report import write_scores
    from mmst.evaluation.scorer import ScoringError, average_scores, score_instances
    from mmst.evaluation.streaming import stream_utterance

    out_dir = Path(out_dir)
    instances: dict[str, list[dict[str, Any]]] = {lang: [] for lang in langs}
    total_compute = 0.0
    total_audio_s = 0.0
    seg_ms: list[float] = []
    desc = "offline" if offline else f"k={config.get('waitk')}"
    for i, (u, audio) in enumerate(tqdm(list(zip(utts, audios)), desc=desc, disable=not progress)):
        res = stream_utterance(translator, audio, langs, units, segment_ms, whole=offline, utt_id=u["id"])
        total_compute += res.compute_s
        total_audio_s += audio.size / 16000.0
        seg_ms += res.segment_compute_ms
        for lang in langs:
            ls = res.per_lang[lang]
            instances[lang].append(
                make_instance(
                    i, ls.units, ls.delays, ls.elapsed, u["refs"][lang],
                    [u["wav"], f"offset={u['offset']}", f"duration={u['duration']}", f"id={u['id']}"],
                    res.source_length_ms, units[lang],
                )
            )
    per_lang: dict[str, dict[str, Any]] = {}
    for lang in langs:
        write_instances(out_dir / lang / "instances.log", instances[lang])
        try:
            sr = score_instances(instances[lang], lang, units[lang], computation_aware=True,
                                 simuleval_compat=bool(config.get("simuleval_compat", False)))
        except ScoringError as e:
            logger.warning("%s: %s", lang, e)
            per_lang[lang] = {"info": {"error": str(e)}}
            continue
        per_lang[lang] = sr.to_dict()
    scored = {lang: {k: v for k, v in d.items() if k != "info"} for lang, d in per_lang.items()
              if any(k != "info" for k in d)}
    avg = average_scores(scored) if scored else {}
    rtf = total_compute / total_audio_s if total_audio_s > 0 else None
    extra = {
        "timing": {
            "compute_s": total_compute,
            "audio_s": total_audio_s,
            "ms_per_segment_mean": float(np.mean(seg_ms)) if seg_ms else None,
            "n_utterances": len(utts),
        }
    }
    title = "Offline evaluation" if offline else f"Simultaneous evaluation (wait-{config.get('waitk')})"
    return write_scores(out_dir, per_lang, avg, rtf=rtf, config=config, extra=extra, title=title)


def run_sweep(
    system: Any,
    utts: Sequence[dict[str, Any]],
    audios: Sequence[np.ndarray],
    ks: Sequence[int | None],
    out_dir: str | Path,
    *,
    units: dict[str, str],
    segment_ms: float,
    base_config: dict[str, Any],
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    min_len: int = 0,
    beam: int = 1,
    progress: bool = True,
) -> dict[str, dict[str, Any]]:
    """Evaluate every setting of ``ks`` (``None`` = offline) with one system.

    One setting writes into ``out_dir``; several write into ``out_dir/k<k>/`` and add the sweep
    summary (:func:`write_sweep_summary`) and the BLEU-vs-AL plot.

    Args:
        system: :class:`mmst.evaluation.loading.EvalSystem`.
        utts, audios: see :func:`evaluate_setting`.
        ks: wait-k values (``list[int | None]``, :func:`mmst.simultaneous.waitk.parse_waitk_list`).
        out_dir: output directory.
        units, segment_ms: see :func:`evaluate_setting`.
        base_config: recorded in every ``scores.json`` (``waitk`` and ``beam`` added per setting).
        max_len_a, max_len_b, min_len: decoding length limits (tokens = a * encoder states + b).
        beam: beam size of offline settings (wait-k settings decode greedily).
        progress: tqdm bars.

    Returns:
        ``{setting label: scores.json object}``.

    Raises:
        mmst.evaluation.loading.LoadError: a setting the system cannot decode (e.g. invalid k).
    """
    out = Path(out_dir)
    langs = list(system.tgt_langs)
    results: dict[str, dict[str, Any]] = {}
    for k in ks:
        b = beam if k is None else 1
        translator = system.translator(k, max_len_a=max_len_a, max_len_b=max_len_b, beam=b, min_len=min_len)
        cfg = dict(base_config, waitk=k, beam=b)
        sub = out if len(ks) == 1 else out / f"k{k}"
        t0 = time.perf_counter()
        obj = evaluate_setting(translator, utts, audios, langs, units, segment_ms, k is None, sub, cfg, progress)
        results[setting_label(k)] = obj
        avg = obj.get("average", {})
        logger.info("%s: BLEU %.2f AL %.1f ms AL_CA %.1f ms RTF %.3f (%.1fs) -> %s",
                    "offline" if k is None else f"k={k}", avg.get("BLEU", float("nan")),
                    avg.get("AL", float("nan")), avg.get("AL_CA", float("nan")), obj.get("rtf") or float("nan"),
                    time.perf_counter() - t0, sub / "scores.md")
    if len(ks) > 1:
        from mmst.evaluation.report import plot_latency_quality

        points: dict[str, list[tuple[float, float, str]]] = {lang: [] for lang in langs}
        for k in ks:
            pl = results[setting_label(k)]["per_lang"]
            for lang in langs:
                if "AL" in pl[lang] and "BLEU" in pl[lang]:
                    points[lang].append((pl[lang]["AL"], pl[lang]["BLEU"], f"k={k}"))
        plot_latency_quality(points, out / "latency_quality.png", title="BLEU vs AL (wait-k sweep)")
        write_sweep_summary(out, ks, results, langs)
    return results


def write_sweep_summary(out: str | Path, ks: Sequence[int | None], results: dict[str, dict[str, Any]],
                        langs: list[str]) -> None:
    """``OUT/scores.json`` (``{"sweep": {k<k>: {per_lang, average, rtf}}, "ks", "langs"}``) and
    ``OUT/scores.md`` (one table per language and the average, one row per k)."""
    from mmst.evaluation.report import format_metrics_table

    out = Path(out)
    labels = [setting_label(k) for k in ks]
    sweep = {lab: {"per_lang": {lang: {m: v for m, v in results[lab]["per_lang"][lang].items() if m != "info"}
                                for lang in langs},
                   "average": results[lab]["average"], "rtf": results[lab].get("rtf")} for lab in labels}
    atomic_write_text(out / "scores.json", json.dumps({"sweep": sweep, "ks": list(ks), "langs": langs}, indent=2,
                                                      ensure_ascii=False) + "\n")
    md = ["# wait-k sweep", "", "Latency in ms (SimulEval 1.1 definitions, `_CA` = computation-aware); "
          "BLEU: sacrebleu. Per-k details: `k<k>/scores.md`.", ""]
    for lang in langs + ["avg"]:
        rows = {}
        for k, lab in zip(ks, labels):
            rows[f"k={k}"] = results[lab]["average"] if lang == "avg" else results[lab]["per_lang"][lang]
        md += [f"## {lang}", "", format_metrics_table(rows, ("BLEU", "AL", "LAAL", "AP", "DAL", "ATD"),
                                                     ca=True, row_header="k"), ""]
    rtfs = ", ".join(f"k={k}: {results[lab].get('rtf') or float('nan'):.3f}" for k, lab in zip(ks, labels))
    md += [f"Real-time factor: {rtfs}", "", "![BLEU vs AL](latency_quality.png)", ""]
    atomic_write_text(out / "scores.md", "\n".join(md))
