"""The per-utterance evaluation runner and policy sweeps.

:func:`evaluate_setting` streams every utterance through one translator (one policy setting, or offline),
times it as SimulEval 1.1 times an agent (:func:`mmst.evaluation.streaming.stream_utterance`) and
writes, under its output directory:

- ``<lang>/instances.log``: SimulEval-1.1 instances;
- ``<lang>/references.txt``: the references, one a line in instance order (an empty line where there is
  none): with ``instances.log`` the two files ``omnisteval shortform`` reads;
- ``scores.json`` / ``scores.md``: per-language and averaged BLEU, chrF, YAAL, AL, LAAL, AP, DAL, ATD,
  StartOffset, EndOffset (each latency also computation-aware, ``_CA``), OmniSTEval's degeneracy
  diagnostics (SWF, EFSW, DSPTV, ``likely_degenerate``: :mod:`mmst.evaluation.omnisteval_adapter`) and the
  real-time factor.

:func:`run_sweep` runs several settings (wait-k values, or policies as
:class:`mmst.simultaneous.PolicySpec`; ``OUT/<label>/`` each when there is more than one: ``k<k>`` for
wait-k, else the policy label such as ``alignatt-frames4``) and writes the sweep summary
(``OUT/scores.json`` and ``OUT/scores.md``, naming the policy and its parameters;
``OUT/latency_quality.png``, ``OUT/latency_quality_ca.png``, ``OUT/latency_quality_laal.png``: BLEU vs AL,
AL_CA and LAAL per language, a point labelled with its length ratio when outside [0.7, 1.4]).
``eval/simultaneous_eval.py`` is the command line over these.
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

from mmst.atomic import atomic_write_lines, atomic_write_text

logger = logging.getLogger("mmst.evaluation.runner")

#: Columns of the sweep summary's tables (each latency one also ``_CA``; DSPTV: OmniSTEval's degeneracy test value).
SWEEP_TABLE_METRICS = ("BLEU", "chrF", "length_ratio", "YAAL", "LAAL", "AL", "AP", "DAL", "ATD", "DSPTV")


def setting_label(setting: Any) -> str:
    """``3 -> "k3"``, ``None -> "offline"``, a wait-k ``PolicySpec`` -> ``"k<k>"``, another policy -> its
    label (``"alignatt-frames4"``): the sub-directory and summary key of a setting."""
    if setting is None:
        return "offline"
    if isinstance(setting, int):
        return f"k{setting}"
    if setting.name == "waitk":
        k = setting.kwargs.get("k", 3)
        return "offline" if k is None else f"k{k}"
    return setting.label()


def policy_config(setting: Any, per_lang: dict[str, Any], langs: list[str]) -> dict[str, Any]:
    """``scores.json`` config entries naming the policy of a setting and the per-language ones."""
    from mmst.simultaneous.policy_spec import make_spec

    if setting is None:
        return {"waitk": None, "policy": None}
    spec = make_spec("waitk", {"k": setting}) if isinstance(setting, int) else setting
    pols = {lang: per_lang.get(lang, spec) for lang in langs}
    title = spec.describe() + "".join(f"; {lang}: {p.describe()}" for lang, p in per_lang.items())
    return {"policy": spec.name, "policy_params": spec.kwargs, "policy_label": spec.label(), "policy_title": title,
            "policy_per_lang": {lang: {"policy": p.name, "params": p.kwargs} for lang, p in pols.items()},
            "waitk": spec.kwargs.get("k", 3) if spec.name == "waitk" else None}


#: What the forked workers of :func:`_stream_all` read (set in the parent just before the fork).
_FORK_STATE: dict[str, Any] = {}


def _stream_one(i: int) -> Any:
    from mmst.evaluation.streaming import stream_utterance

    st = _FORK_STATE
    return stream_utterance(st["translator"], st["audios"][i], st["langs"], st["units"], st["segment_ms"],
                            whole=st["offline"], utt_id=st["utts"][i]["id"])


def _stream_all(translator: Any, utts: Sequence[dict[str, Any]], audios: Sequence[np.ndarray], langs: list[str],
                units: dict[str, str], segment_ms: float, offline: bool, desc: str, progress: bool,
                jobs: int) -> list[Any]:
    """:func:`mmst.evaluation.streaming.stream_utterance` over every utterance, in order.

    ``jobs > 1``: the utterances are shared out to that many forked processes (one utterance at a time, so
    long and short ones balance), each with its own copy of ``translator``; an utterance's result does not
    depend on which process decoded it, and each process times its own compute, as one process does."""
    from mmst.evaluation.streaming import stream_utterance

    n = len(utts)
    if jobs <= 1 or n <= 1:
        return [stream_utterance(translator, audio, langs, units, segment_ms, whole=offline, utt_id=u["id"])
                for u, audio in tqdm(list(zip(utts, audios)), desc=desc, disable=not progress)]
    import multiprocessing

    _FORK_STATE.update(translator=translator, utts=utts, audios=audios, langs=langs, units=units,
                       segment_ms=segment_ms, offline=offline)
    try:
        with multiprocessing.get_context("fork").Pool(min(jobs, n)) as pool:
            return list(tqdm(pool.imap(_stream_one, range(n), chunksize=1), total=n, desc=desc,
                             disable=not progress))
    finally:
        _FORK_STATE.clear()


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
    jobs: int = 1,
) -> dict[str, Any]:
    """Evaluate one setting (one k, or offline) and write its instances and scores under ``out_dir``.

    Args:
        translator: streaming translator (``reset``, ``accept_audio``), e.g. ``ModelBundle.translator(k)``.
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
        jobs: processes decoding utterances side by side (forked, one torch thread each is what the
            command line sets); 1 = this process. The hypotheses are the same for any ``jobs``.

    Returns:
        The ``scores.json`` object (``per_lang``, ``average``, ``rtf``, ``config``, ``timing``).
    """
    from mmst.evaluation.instances import make_instance, write_instances
    from mmst.evaluation.report import write_scores
    from mmst.evaluation.scorer import ScoringError, average_scores, score_instances
    out_dir = Path(out_dir)
    instances: dict[str, list[dict[str, Any]]] = {lang: [] for lang in langs}
    total_compute = 0.0
    total_audio_s = 0.0
    seg_ms: list[float] = []
    desc = "offline" if offline else str(config.get("policy_label", f"k={config.get('waitk')}"))
    results = _stream_all(translator, utts, audios, langs, units, segment_ms, offline, desc, progress, jobs)
    for i, (u, audio, res) in enumerate(zip(utts, audios, results)):
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
        atomic_write_lines(out_dir / lang / "references.txt", [(ins["reference"] or "").replace("\n", " ").strip()
                                                              for ins in instances[lang]])
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
    title = "Offline evaluation" if offline else (
        f"Simultaneous evaluation ({config['policy_title']})" if config.get("policy_title")
        else f"Simultaneous evaluation (wait-{config.get('waitk')})")
    return write_scores(out_dir, per_lang, avg, rtf=rtf, config=config, extra=extra, title=title)


def run_sweep(
    system: Any,
    utts: Sequence[dict[str, Any]],
    audios: Sequence[np.ndarray],
    ks: Sequence[Any],
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
    swept: str | None = None,
    per_lang: dict[str, Any] | None = None,
    jobs: int = 1,
) -> dict[str, dict[str, Any]]:
    """Evaluate every setting of ``ks`` with one system.

    One setting writes into ``out_dir``; several write into ``out_dir/<label>/``
    (:func:`setting_label`) and add the sweep summary (:func:`write_sweep_summary`) and the BLEU-vs-AL
    and BLEU-vs-AL_CA plots.

    Args:
        system: the loaded model, a :class:`mmst.evaluation.bundle.ModelBundle`.
        utts, audios: see :func:`evaluate_setting`.
        ks: settings: wait-k values (``int``, ``None`` = offline;
            :func:`mmst.simultaneous.waitk.parse_waitk_list`) or policies
            (:class:`mmst.simultaneous.PolicySpec`, e.g. from :func:`mmst.simultaneous.policy_sweep`).
        out_dir: output directory.
        units, segment_ms: see :func:`evaluate_setting`.
        base_config: recorded in every ``scores.json`` (policy, parameters and ``beam`` added per setting).
        max_len_a, max_len_b, min_len: decoding length limits (tokens = a * encoder states + b).
        beam: beam size: offline settings, and beam search while streaming for alignatt, edatt, la and
            holdn (other policies need 1; plain wait-k values decode greedily).
        progress: tqdm bars.
        swept: the parameter the settings sweep (for the summary; default ``k`` for wait-k values).
        per_lang: ``{lang: PolicySpec}`` overriding the setting's policy for those languages.
        jobs: processes per setting (:func:`evaluate_setting`).

    Returns:
        ``{setting label: scores.json object}``.

    Raises:
        mmst.evaluation.bundle.LoadError: a setting the system cannot decode (e.g. invalid k).
    """
    from mmst.simultaneous.policy_spec import make_spec

    out = Path(out_dir)
    langs = list(system.tgt_langs)
    per_lang = dict(per_lang or {})
    results: dict[str, dict[str, Any]] = {}
    for k in ks:
        offline = k is None or (not isinstance(k, int) and k.name == "waitk" and k.kwargs.get("k", 3) is None)
        if offline:
            b = beam
            translator = system.translator(None, max_len_a=max_len_a, max_len_b=max_len_b, beam=b, min_len=min_len)
            cfg = dict(base_config, waitk=None, beam=b)
        else:
            spec = make_spec("waitk", {"k": k}) if isinstance(k, int) else k
            b = 1 if isinstance(k, int) and not per_lang else beam
            policy = None if isinstance(k, int) and not per_lang else {lang: per_lang.get(lang, spec) for lang in langs}
            translator = system.translator(k if isinstance(k, int) else 3, max_len_a=max_len_a, max_len_b=max_len_b,
                                           beam=b, min_len=min_len, policy=policy)
            cfg = dict(base_config, beam=b, **policy_config(spec, per_lang, langs))
        label = setting_label(k)
        sub = out if len(ks) == 1 else out / label
        t0 = time.perf_counter()
        obj = evaluate_setting(translator, utts, audios, langs, units, segment_ms, offline, sub, cfg, progress,
                               jobs=jobs)
        results[label] = obj
        avg = obj.get("average", {})
        logger.info("%s: BLEU %.2f AL %.1f ms AL_CA %.1f ms RTF %.3f (%.1fs) -> %s",
                    "offline" if offline else cfg.get("policy_title", label), avg.get("BLEU", float("nan")),
                    avg.get("AL", float("nan")), avg.get("AL_CA", float("nan")), obj.get("rtf") or float("nan"),
                    time.perf_counter() - t0, sub / "scores.md")
    if len(ks) > 1:
        from mmst.evaluation.report import plot_latency_quality

        swept = swept or "k"
        name = next((k.name for k in ks if k is not None and not isinstance(k, int)), "wait-k")
        for metric, png in (("AL", "latency_quality.png"), ("AL_CA", "latency_quality_ca.png"),
                            ("LAAL", "latency_quality_laal.png")):
            points: dict[str, list[tuple[float, float, str]]] = {lang: [] for lang in langs}
            for k in ks:
                pl = results[setting_label(k)]["per_lang"]
                for lang in langs:
                    if metric in pl[lang] and "BLEU" in pl[lang]:
                        lr = pl[lang].get("length_ratio")
                        flag = f" |Y|/|Y*|={lr:.2f}" if lr is not None and not 0.7 <= lr <= 1.4 else ""
                        flag += " degenerate" if pl[lang].get("likely_degenerate") else ""
                        points[lang].append((pl[lang][metric], pl[lang]["BLEU"], _row_label(k, swept) + flag))
            plot_latency_quality(points, out / png, latency_metric=metric,
                                 title=f"BLEU vs {metric} ({name} sweep over {swept})")
        write_sweep_summary(out, ks, results, langs, swept=swept, per_lang=per_lang)
    return results


def _row_label(setting: Any, swept: str | None) -> str:
    """``k=3`` for a wait-k value, ``frames=4`` for a policy swept over ``frames``."""
    if setting is None or isinstance(setting, int):
        return f"k={setting}"
    v = setting.kwargs.get(swept) if swept else None
    return f"{swept}={'+'.join(map(str, v)) if isinstance(v, tuple) else v}" if swept else setting.label()


def write_sweep_summary(out: str | Path, ks: Sequence[Any], results: dict[str, dict[str, Any]],
                        langs: list[str], swept: str | None = None, per_lang: dict[str, Any] | None = None) -> None:
    """``OUT/scores.json`` (``{"policy", "swept_param", "values", "policy_per_lang", "sweep": {label:
    {per_lang, average, rtf, policy, params}}, "langs"}``, plus ``"ks"`` for a wait-k sweep) and
    ``OUT/scores.md`` (one table per language and the average, one row per setting)."""
    from mmst.evaluation.report import format_metrics_table

    out = Path(out)
    per_lang = per_lang or {}
    swept = swept or "k"
    labels = [setting_label(k) for k in ks]
    specs = [k for k in ks if k is not None and not isinstance(k, int)]
    name = specs[0].name if specs else "waitk"

    def params(k: Any) -> dict[str, Any]:
        return {"k": k} if k is None or isinstance(k, int) else k.kwargs

    sweep = {lab: {"per_lang": {lang: {m: v for m, v in results[lab]["per_lang"][lang].items() if m != "info"}
                                for lang in langs},
                   "average": results[lab]["average"], "rtf": results[lab].get("rtf"),
                   "policy": name, "params": params(k)} for k, lab in zip(ks, labels)}
    obj: dict[str, Any] = {"policy": name, "swept_param": swept, "values": [params(k).get(swept) for k in ks],
                           "policy_per_lang": {lang: p.describe() for lang, p in per_lang.items()},
                           "sweep": sweep, "langs": langs}
    if name == "waitk":
        obj["ks"] = [params(k).get("k") for k in ks]
    atomic_write_text(out / "scores.json", json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    extra = "".join(f" ({lang}: {p.describe()})" for lang, p in per_lang.items())
    title = "wait-k sweep" if name == "waitk" and swept == "k" else f"{name} sweep over {swept}"
    md = [f"# {title}{extra}", "", "Latency in ms (SimulEval 1.1 definitions, `_CA` = computation-aware); "
          "BLEU: sacrebleu. Per-setting details: `<label>/scores.md`.", ""]
    for lang in langs + ["avg"]:
        rows = {}
        for k, lab in zip(ks, labels):
            rows[_row_label(k, swept)] = results[lab]["average"] if lang == "avg" else results[lab]["per_lang"][lang]
        md += [f"## {lang}", "", format_metrics_table(rows, SWEEP_TABLE_METRICS, ca=True, row_header=swept), ""]
    rtfs = ", ".join(f"{_row_label(k, swept)}: {results[lab].get('rtf') or float('nan'):.3f}"
                     for k, lab in zip(ks, labels))
    md += [f"Real-time factor: {rtfs}", "", "![BLEU vs LAAL](latency_quality_laal.png)",
           "![BLEU vs AL](latency_quality.png)", "![BLEU vs AL_CA](latency_quality_ca.png)", ""]
    atomic_write_text(out / "scores.md", "\n".join(md))
