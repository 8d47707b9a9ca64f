#!/usr/bin/env python
"""Long-form streaming cost and quality: a 60-minute synthetic talk streamed as one stream.

Reports, and writes to ``docs/results/longform.json`` (the ``summary`` object first):

1. **Bounded cost.** A talk of ``--minutes`` (default 60) built from a DATA split's utterances, cycled,
   with pauses of ``--pause-ms`` (default 300-800 ms), generated chunk by chunk
   (:func:`mmst.corpora.long_talk.iter_long_talk`), streams through
   :class:`mmst.simultaneous.LongFormTranslator` (Silero VAD, joint decoding of every language, wait-k
   by default) in 320 ms pushes. Per bucket of ``--bucket-min`` minutes of stream position: ms per
   320 ms chunk (wall clock and thread CPU time, mean and p90), peak RSS so far (psutil, sampled every
   10 s of stream), VAD segments, the largest per-segment cache size (``SegmentEnd.state_numel``).
   Summary: ``cost_ratio_60min_vs_5min`` = thread-CPU ms per chunk in the last bucket / in the first
   (goal <= 1.2; CPU time, because the machine may be shared: wall-clock ratios are in the buckets),
   ``rss_growth_mib_10_to_60min`` = peak RSS at 60 min - at 10 min (goal <= 50 MiB), ``rtf`` = wall
   compute / audio of the whole talk (``cost.rtf_cpu``: the same with thread CPU time; goal < 1),
   ``vad_share_of_compute`` = the VAD's part of the long-form driver's compute.
2. **Rows** (``rows``, ``--row-minutes`` each, default 10): the same talk with AlignAtt (``--alignatt-policy``),
   and a talk with 100 ms pauses streamed with a segment-ending silence (``--capped-vad-min-silence-ms``,
   1 s) longer than any of its gaps, so that every segment is cut at ``--capped-max-segment-s``: RTF (wall
   and CPU), segments, cuts by the cap, VAD share.
3. **One large push** (``--rss-minutes``, default 5): peak RSS growth of a child process that pushes
   the whole talk at once minus one that pushes it in 320 ms pieces (summary
   ``rss_growth_mib_one_push_5min``, goal <= 30 MiB).
4. **Cross-check** (``--crosscheck-utts`` utterances, default 100): the same utterances evaluated
   one by one (segmented, :func:`mmst.evaluation.streaming.stream_utterance`) and as one talk with
   pauses (long-form, VAD and oracle segmentation, scored by mWER resegmentation): BLEU and LAAL vs
   StreamLAAL per language; and (``crosscheck_capped``) the talk with 100 ms pauses, where the VAD's
   segments are cut by the cap, against the oracle segmentation. Each long-form run is also scored as the
   IWSLT 2026 track scores it, through :mod:`mmst.evaluation.omnisteval_adapter`: LongYAAL (CU and CA),
   LongAL, LongLAAL, BLEU and chrF after SoftSegmenter; then the ``omnisteval`` command scores the same files
   (:mod:`mmst.evaluation.omnisteval_command`) and summary ``omnisteval_cli`` records the largest difference
   per metric over every run (goal: <= 1e-6) and whether it is met.

Needs a trained checkpoint (default: the quickstart's, ``exp/synthetic``) and its DATA. Runtime: about
the talk length times the RTF (~0.2 on one core), plus the cross-check.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from provenance import RESULTS_DIR, run_record, write_results

from mmst.cli_help import ArgumentParser

#: The paths this benchmark runs without importing them; the repository modules that it and its child processes
#: import are recorded at run time (``provenance.depends_on``, bench/provenance.py).
DEPENDS_ON = ("bench/bench_longform.py",)

SR = 16000


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(description=__doc__)
    p.add_argument("--model", dest="checkpoint", default="exp/synthetic/model/checkpoint_best.pt",
                   help="a trained model: an exported model folder or a training checkpoint")
    p.add_deprecated_alias("--checkpoint", "--model")
    p.add_argument("--data", default=None, help="its DATA directory (default: the checkpoint's)")
    p.add_argument("--split", default="tst-COMMON", help="DATA split whose utterances make the talk")
    p.add_argument("--tgt-langs", default=None, help="languages decoded jointly (default: all of the model)")
    p.add_argument("--policy", default="waitk:k=3", help="read/write policy NAME:k=v,... for every language")
    p.add_argument("--minutes", type=float, default=60.0, help="talk length in minutes")
    p.add_argument("--bucket-min", type=float, default=5.0, help="bucket width in minutes of stream position")
    p.add_argument("--pause-ms", default="300,800", help="shortest,longest pause between utterances (ms)")
    p.add_argument("--vad-min-silence-ms", type=float, default=150.0,
                   help="VAD silence that ends a segment (150 ms: below the talk's shortest pause)")
    p.add_argument("--source-segment-size", dest="chunk_ms", type=float, default=320.0,
                   help="processing chunk and push size in ms")
    p.add_deprecated_alias("--chunk-ms", "--source-segment-size")
    p.add_argument("--crosscheck-utts", type=int, default=100, help="utterances of the cross-check (0 = skip)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--seed", type=int, default=0, help="pause lengths")
    p.add_argument("--row-minutes", type=float, default=10.0, help="talk length of the AlignAtt and capped rows")
    p.add_argument("--alignatt-policy", default="alignatt:frames=4", help="policy of the AlignAtt row")
    p.add_argument("--capped-max-segment-s", type=float, default=10.0,
                   help="segment cap of the capped row and cross-check")
    p.add_argument("--capped-vad-min-silence-ms", type=float, default=1000.0,
                   help="VAD silence that ends a segment in the capped row and cross-check: longer than any "
                        "gap of that talk (100 ms pauses plus the clips' own leading and trailing silence), "
                        "so every segment is ended by the cap")
    p.add_argument("--rss-minutes", type=float, default=5.0, help="talk length of the one-push memory check (0 = skip)")
    p.add_argument("--rss-child", type=float, default=None, help=argparse.SUPPRESS)  # push ms, in a child process
    p.add_argument("--note", default="", help="free text recorded in the provenance (e.g. machine shared)")
    p.add_argument("--out", default=str(RESULTS_DIR / "longform.json"), help="output JSON")
    return p


def _load(args):
    from mmst.evaluation.bundle import load_bundle
    from mmst.evaluation.frontend import read_utterance_audio
    from mmst.evaluation.utterances import load_utterances

    langs = args.tgt_langs.split(",") if args.tgt_langs else None
    system = load_bundle(args.checkpoint, data_dir=args.data, tgt_langs=langs)
    utts = load_utterances(system.data_dir, args.split, list(system.tgt_langs))
    audios = [read_utterance_audio(u) for u in utts]
    return system, utts, audios


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def bounded_cost(system, audios, args, policy: str | None = None, minutes: float | None = None,
                 pause_ms: str | None = None, max_segment_s: float = 20.0,
                 min_silence_ms: float | None = None) -> dict[str, Any]:
    """Stream the long talk; per-bucket cost, RSS, segments and cache sizes."""
    from tqdm import tqdm

    from mmst.corpora.long_talk import iter_long_talk
    from mmst.simultaneous.longform import LongFormTranslator, SegmentEnd
    from mmst.simultaneous.vad import StreamingVad

    minutes = args.minutes if minutes is None else minutes
    lo, hi = (float(x) / 1000.0 for x in (pause_ms or args.pause_ms).split(","))
    chunk = int(round(args.chunk_ms * SR / 1000.0))
    silence_ms = args.vad_min_silence_ms if min_silence_ms is None else min_silence_ms
    lf = LongFormTranslator(system.translator(3, policy=policy or args.policy),
                            vad=StreamingVad(min_silence_ms=silence_ms, max_segment_s=max_segment_s),
                            chunk_ms=args.chunk_ms)
    lf.reset()
    bucket_s = min(args.bucket_min, minutes) * 60.0
    n_buckets = int(np.ceil(minutes * 60.0 / bucket_s))
    forced = 0
    wall: list[list[float]] = [[] for _ in range(n_buckets)]
    cpu: list[list[float]] = [[] for _ in range(n_buckets)]
    segs = [0] * n_buckets
    state = [0] * n_buckets
    words = [0] * n_buckets
    rss_peak = [0.0] * n_buckets
    peak = _rss_mib()
    next_sample = 0.0
    pos = 0.0
    compute = 0.0
    total_chunks = int(np.ceil(minutes * 60.0 * SR / chunk))
    for x, _ in tqdm(iter_long_talk(audios, minutes * 60.0, chunk, pause_s=(lo, hi), seed=args.seed),
                     total=total_chunks, desc="stream", mininterval=10):
        b = min(int(pos // bucket_s), n_buckets - 1)
        t0, c0 = time.perf_counter(), time.thread_time()
        evs = lf.push(x)
        dt, dc = time.perf_counter() - t0, time.thread_time() - c0
        compute += dt
        pos += x.size / SR
        wall[b].append(dt * 1000.0)
        cpu[b].append(dc * 1000.0)
        for e in evs:
            if isinstance(e, SegmentEnd):
                segs[b] += 1
                forced += e.forced
                state[b] = max(state[b], e.state_numel)
            else:
                words[b] += 1
        if pos >= next_sample:
            peak = max(peak, _rss_mib())
            next_sample += 10.0
        rss_peak[b] = peak
    t0 = time.perf_counter()
    lf.finish()
    compute += time.perf_counter() - t0
    rss_peak[-1] = max(peak, _rss_mib())

    def stats(v: list[float]) -> dict[str, float | None]:
        if not v:
            return {"mean": None, "p90": None}
        return {"mean": statistics.fmean(v), "p90": float(np.percentile(v, 90))}

    bucket_min = bucket_s / 60.0
    buckets = [{"from_min": i * bucket_min, "to_min": min((i + 1) * bucket_min, minutes),
                "n_chunks": len(wall[i]), "ms_per_chunk_wall": stats(wall[i]), "ms_per_chunk_cpu": stats(cpu[i]),
                "peak_rss_mib": rss_peak[i], "vad_segments": segs[i], "words": words[i],
                "max_state_numel": state[i]} for i in range(n_buckets)]

    def rss_at(minute: float) -> float:
        i = min(max(int(np.ceil(minute / bucket_min)) - 1, 0), n_buckets - 1)
        return rss_peak[i]

    first, last = buckets[0], buckets[-1]
    cpu_s = sum(sum(v) for v in cpu) / 1000.0
    return {"buckets": buckets, "audio_s": pos, "compute_s": compute, "rtf": compute / pos,
            "cpu_s": cpu_s, "rtf_cpu": cpu_s / pos,
            "n_segments": sum(segs), "n_forced_cuts": forced, "n_words": sum(words),
            "vad_compute_s": lf.vad_compute_s, "vad_share_of_compute": lf.vad_compute_s / lf.compute_s,
            "cost_ratio_cpu": last["ms_per_chunk_cpu"]["mean"] / first["ms_per_chunk_cpu"]["mean"],
            "cost_ratio_wall": last["ms_per_chunk_wall"]["mean"] / first["ms_per_chunk_wall"]["mean"],
            "rss_10min_mib": rss_at(10.0), "rss_end_mib": rss_peak[-1],
            "rss_growth_mib_10_to_end": rss_peak[-1] - rss_at(10.0)}


def crosscheck(system, utts, audios, args, pause_ms: str | None = None, max_segment_s: float = 20.0,
               min_silence_ms: float | None = None, work_dir: str | Path | None = None) -> dict[str, Any]:
    """Segmented vs long-form (VAD, oracle) evaluation of the same utterances. Each long-form run is scored
    both ways: StreamLAAL and BLEU after mWER, and (with ``work_dir``, where the files are written)
    LongYAAL, LongAL, LongLAAL (CU and CA), BLEU and chrF after SoftSegmenter through the adapter, then by
    the ``omnisteval`` command on the same files (``omnisteval_cli``: the largest difference per metric)."""
    from mmst.corpora.long_talk import build_long_talk
    from mmst.evaluation import omnisteval_command
    from mmst.evaluation.instances import make_instance
    from mmst.evaluation.omnisteval_adapter import (
        HYPOTHESIS_FILE,
        REFERENCES_FILE,
        SEGMENTS_FILE,
        LongformFiles,
        Recording,
        cli_command,
        score_recordings,
    )
    from mmst.evaluation.quality import latency_units
    from mmst.evaluation.resegment import RefSentence, stream_instances, timed_units
    from mmst.evaluation.scorer import ScoringError, score_instances
    from mmst.evaluation.streaming import stream_utterance
    from mmst.simultaneous.longform import LongFormTranslator, OracleSegmenter
    from mmst.simultaneous.vad import StreamingVad

    n = min(args.crosscheck_utts, len(utts))
    langs = list(system.tgt_langs)
    units = latency_units(langs)
    lo, hi = (float(x) / 1000.0 for x in (pause_ms or args.pause_ms).split(","))
    tr = system.translator(3, policy=args.policy)
    seg: dict[str, list] = {lang: [] for lang in langs}
    t0 = time.perf_counter()
    for i in range(n):
        r = stream_utterance(tr, audios[i], langs, units, args.chunk_ms, utt_id=utts[i]["id"])
        for lang in langs:
            ls = r.per_lang[lang]
            seg[lang].append(make_instance(i, ls.units, ls.delays, ls.elapsed, utts[i]["refs"][lang], "",
                                           r.source_length_ms, units[lang]))
    seg_s = time.perf_counter() - t0
    talk = build_long_talk(audios[:n], {lang: [u["refs"][lang] or "" for u in utts[:n]] for lang in langs},
                           pause_s=(lo, hi), seed=args.seed)
    sents = {lang: [RefSentence(r, o * 1000.0, d * 1000.0) for r, o, d in
                    zip(talk.refs[lang], talk.offsets_s, talk.durations_s)] for lang in langs}
    out: dict[str, Any] = {"n_utterances": n, "audio_s": talk.duration_s, "segmented_compute_s": seg_s,
                           "pause_ms": pause_ms or args.pause_ms, "max_segment_s": max_segment_s,
                           "vad_min_silence_ms": args.vad_min_silence_ms if min_silence_ms is None else min_silence_ms,
                           "per_lang": {lang: {} for lang in langs}}
    seg_scores = {lang: score_instances(seg[lang], lang, units[lang]).metrics for lang in langs}
    cli: list = []
    silence_ms = args.vad_min_silence_ms if min_silence_ms is None else min_silence_ms
    for name, segmenter in (("vad", StreamingVad(min_silence_ms=silence_ms, max_segment_s=max_segment_s)),
                            ("oracle", OracleSegmenter([(o, o + d) for o, d in zip(talk.offsets_s, talk.durations_s)]))):
        lf = LongFormTranslator(tr, vad=segmenter, chunk_ms=args.chunk_ms)
        evs: list = []
        t0 = time.perf_counter()
        for s in range(0, talk.audio.size, 5120):
            evs += lf.push(talk.audio[s:s + 5120])
        evs += lf.finish()
        out[f"{name}_compute_s"] = time.perf_counter() - t0
        out[f"{name}_segments"] = sum(1 for e in evs if not hasattr(e, "lang"))
        out[f"{name}_forced_cuts"] = sum(1 for e in evs if not hasattr(e, "lang") and e.forced)
        for lang in langs:
            ws = [e for e in evs if getattr(e, "lang", None) == lang]
            tu = timed_units(ws, units[lang])
            try:
                m = score_instances(stream_instances(tu, sents[lang], units[lang]), lang, units[lang]).metrics
                row = {"BLEU": m.get("BLEU"), "StreamLAAL": m["LAAL"], "StreamLAAL_CA": m.get("LAAL_CA")}
            except ScoringError as e:  # e.g. an untrained model that writes nothing: recorded, not fatal
                row = {"BLEU": None, "StreamLAAL": None, "StreamLAAL_CA": None, "error": str(e)}
            out["per_lang"][lang][name] = row
            if work_dir is not None:  # SoftSegmenter and LongYAAL, then the omnisteval command on the same files
                d = Path(work_dir) / name / lang
                soft, info = score_recordings(d, [Recording("talk.wav", tu, talk.duration_s * 1000.0, sents[lang])],
                                              lang, units[lang])
                row.update(soft)
                if "omnisteval_error" in info:
                    row["omnisteval_error"] = info["omnisteval_error"]
                elif soft:
                    files = LongformFiles(d / HYPOTHESIS_FILE, d / SEGMENTS_FILE, d / REFERENCES_FILE)
                    cli.append((row, d / "cli", omnisteval_command.start(
                        cli_command(files, lang, units[lang], output_folder=d / "cli"))))
    for row, folder, proc in cli:
        try:
            omnisteval_command.wait(proc)
            c = omnisteval_command.compare(row, folder)
        except (RuntimeError, OSError, ValueError) as e:
            c = {"max_abs_diff": {}, "tsv_max_abs_diff": {}, "missing": [], "equal": False, "error": str(e)}
        row["omnisteval_cli"] = c
    for lang in langs:
        out["per_lang"][lang]["segmented"] = {"BLEU": seg_scores[lang].get("BLEU"), "LAAL": seg_scores[lang]["LAAL"],
                                              "LAAL_CA": seg_scores[lang].get("LAAL_CA")}
    return out


def omnisteval_summary(*crosschecks: dict[str, Any] | None) -> dict[str, Any] | None:
    """The adapter against the ``omnisteval`` command over every cross-check run (segmentation x language):
    the largest absolute difference per metric (unrounded, and against the command's 4-decimal
    ``scores.tsv``), the goal (every difference <= 1e-6) and whether it is met; None without OmniSTEval scores."""
    from mmst.evaluation.omnisteval_adapter import OMNISTEVAL_VERSION
    from mmst.evaluation.omnisteval_command import TOLERANCE

    runs = [(key, lang, name, v) for key, x in zip(("crosscheck", "crosscheck_capped"), crosschecks) if x
            for lang, per in x["per_lang"].items() for name, v in per.items() if name != "segmented"]
    checked = [(f"{key} {name} {lang}", v["omnisteval_cli"]) for key, lang, name, v in runs if "omnisteval_cli" in v]
    if not checked:
        return None
    diff: dict[str, float] = {}
    tsv: dict[str, float] = {}
    for _, c in checked:
        for k, v in c["max_abs_diff"].items():
            diff[k] = max(diff.get(k, 0.0), v)
        for k, v in c["tsv_max_abs_diff"].items():
            tsv[k] = max(tsv.get(k, 0.0), v)
    failed = [what for what, c in checked if not c["equal"]]
    unscored = [f"{key} {name} {lang}" for key, lang, name, v in runs if "omnisteval_cli" not in v]
    return {"goal": f"every metric's |adapter - omnisteval command| <= {TOLERANCE:g}", "met": not failed and not unscored,
            "max_abs_diff": diff, "tsv_max_abs_diff": tsv, "runs": len(checked), "failed": failed,
            "not_scored": unscored, "langs": sorted({lang for _, lang, _, _ in runs}), "omnisteval": OMNISTEVAL_VERSION}


def rss_child(system, audios, args) -> float:
    """In a child process: peak RSS growth (MiB) while streaming ``--rss-minutes`` of talk in pushes of
    ``--rss-child`` ms (one push when it covers the talk)."""
    import resource

    from mmst.corpora.long_talk import iter_long_talk
    from mmst.simultaneous.longform import LongFormTranslator
    from mmst.simultaneous.vad import StreamingVad

    lo, hi = (float(x) / 1000.0 for x in args.pause_ms.split(","))
    audio = np.concatenate([x for x, _ in iter_long_talk(audios, args.rss_minutes * 60.0, SR, pause_s=(lo, hi),
                                                         seed=args.seed)])
    lf = LongFormTranslator(system.translator(3, policy=args.policy),
                            vad=StreamingVad(min_silence_ms=args.vad_min_silence_ms), chunk_ms=args.chunk_ms)
    lf.push(audio[:SR])  # first calls allocate the model's buffers: before the baseline
    lf.reset()
    # Building the talk (its chunks, then one array) peaked above what streaming it needs, so the
    # process's peak is reset first (Linux: "5" to clear_refs resets VmHWM to the current RSS); where
    # that is refused, the peak since the start is the baseline (a growth of 0 then means "below it").
    reset = _reset_peak_rss()
    base = _status_kib("VmRSS") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    push = max(1, int(round(args.rss_child * SR / 1000.0)))
    for s in range(0, audio.size, push):
        lf.push(audio[s:s + push])
    lf.finish()
    peak = _status_kib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (peak - base) / 1024.0


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS; False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_kib("VmHWM") is not None
    except OSError:
        return False


def _status_kib(key: str) -> int | None:
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``), or None."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def one_push_rss(argv: list[str], args) -> dict[str, Any]:
    """Peak RSS growth of one push of the whole ``--rss-minutes`` talk vs ``--chunk-ms`` pushes, each in
    its own process (peak RSS cannot be reset)."""
    import subprocess

    out = {}
    for name, push_ms in (("chunk_pushes", args.chunk_ms), ("one_push", args.rss_minutes * 60_000.0 + 1000.0)):
        r = subprocess.run([sys.executable, __file__, *argv, "--rss-child", str(push_ms)], capture_output=True,
                           text=True, check=True)
        out[f"rss_growth_mib_{name}"] = float(r.stdout.strip().splitlines()[-1])
    out["minutes"] = args.rss_minutes
    out["one_push_minus_chunk_pushes_mib"] = out["rss_growth_mib_one_push"] - out["rss_growth_mib_chunk_pushes"]
    return out


def _f(v, nd: int = 2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the tables and write the JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.rss_child is not None:
        system, _, audios = _load(args)
        print(rss_child(system, audios, args))
        return 0
    prov = run_record(" ".join(["python", "bench/bench_longform.py", *argv]), depends_on=DEPENDS_ON)
    if args.note:
        prov["note"] = args.note
    system, utts, audios = _load(args)
    res: dict[str, Any] = {}
    if args.crosscheck_utts:
        with tempfile.TemporaryDirectory(prefix="bench_longform_") as tmp:
            res["crosscheck"] = crosscheck(system, utts, audios, args, work_dir=Path(tmp) / "crosscheck")
            res["crosscheck_capped"] = crosscheck(system, utts, audios, args, pause_ms="100,100",
                                                  max_segment_s=args.capped_max_segment_s,
                                                  min_silence_ms=args.capped_vad_min_silence_ms,
                                                  work_dir=Path(tmp) / "crosscheck_capped")
        for key in ("crosscheck", "crosscheck_capped"):
            for lang, d in res[key]["per_lang"].items():
                print(f"{key} {lang}: segmented BLEU {_f(d['segmented']['BLEU'])} LAAL {_f(d['segmented']['LAAL'], 0)} | "
                      f"long-form VAD BLEU {_f(d['vad']['BLEU'])} StreamLAAL {_f(d['vad']['StreamLAAL'], 0)} | "
                      f"oracle BLEU {_f(d['oracle']['BLEU'])} StreamLAAL {_f(d['oracle']['StreamLAAL'], 0)}", flush=True)
                for name in ("vad", "oracle"):
                    v = d[name]
                    print(f"  {name}: LongYAAL {_f(v.get('LongYAAL'), 0)} (CA {_f(v.get('LongYAAL_CA'), 0)}) "
                          f"SoftSeg BLEU {_f(v.get('SoftSeg_BLEU'))} chrF {_f(v.get('SoftSeg_chrF'))} | mWER BLEU "
                          f"{_f(v['BLEU'])} StreamLAAL {_f(v['StreamLAAL'], 0)} | omnisteval command equal: "
                          f"{v.get('omnisteval_cli', {}).get('equal', '-')}", flush=True)
    cost = bounded_cost(system, audios, args)
    rows = []
    if args.row_minutes:
        for name, kw in (("alignatt", {"policy": args.alignatt_policy}),
                         ("capped", {"pause_ms": "100,100", "max_segment_s": args.capped_max_segment_s,
                                     "min_silence_ms": args.capped_vad_min_silence_ms})):
            r = bounded_cost(system, audios, args, minutes=args.row_minutes, **kw)
            rows.append({"name": name, "policy": kw.get("policy", args.policy), "minutes": args.row_minutes,
                         "pause_ms": kw.get("pause_ms", args.pause_ms), "max_segment_s": kw.get("max_segment_s", 20.0),
                         "vad_min_silence_ms": kw.get("min_silence_ms", args.vad_min_silence_ms),
                         **{k: r[k] for k in ("rtf", "rtf_cpu", "n_segments", "n_forced_cuts", "n_words",
                                              "vad_share_of_compute", "cost_ratio_cpu", "rss_growth_mib_10_to_end")}})
    memory = one_push_rss(argv, args) if args.rss_minutes else None
    summary = {"cost_ratio_60min_vs_5min": cost["cost_ratio_cpu"],
               "rss_growth_mib_10_to_60min": cost["rss_growth_mib_10_to_end"], "rtf": cost["rtf"],
               "vad_share_of_compute": cost["vad_share_of_compute"],
               "rss_growth_mib_one_push_5min": memory["one_push_minus_chunk_pushes_mib"] if memory else None,
               "omnisteval_cli": omnisteval_summary(res.get("crosscheck"), res.get("crosscheck_capped"))}
    obj = {"summary": summary, "provenance": prov,
           "config": {"checkpoint": str(args.checkpoint), "data": str(system.data_dir), "split": args.split,
                      "tgt_langs": list(system.tgt_langs), "policy": args.policy, "minutes": args.minutes,
                      "bucket_min": args.bucket_min, "pause_ms": args.pause_ms, "chunk_ms": args.chunk_ms,
                      "vad_min_silence_ms": args.vad_min_silence_ms, "threads": args.threads,
                      "row_minutes": args.row_minutes, "alignatt_policy": args.alignatt_policy,
                      "capped_max_segment_s": args.capped_max_segment_s,
                      "capped_vad_min_silence_ms": args.capped_vad_min_silence_ms, "rss_minutes": args.rss_minutes,
                      "params": sum(p.numel() for p in system.model.parameters()),
                      "cost_measure": "thread CPU ms per chunk (wall clock in the buckets)"},
           "cost": cost, "rows": rows, "memory_one_push": memory, **res}
    print(f"{'minutes':>10} {'ms/chunk wall':>14} {'ms/chunk cpu':>13} {'peak RSS MiB':>13} {'segments':>9}")
    for b in cost["buckets"]:
        print(f"{b['from_min']:4.0f}-{b['to_min']:<5.0f} {b['ms_per_chunk_wall']['mean'] or 0:14.1f} "
              f"{b['ms_per_chunk_cpu']['mean'] or 0:13.1f} {b['peak_rss_mib']:13.1f} {b['vad_segments']:9d}")
    for r in rows:
        print(f"{r['name']}: RTF {r['rtf']:.3f} (CPU {r['rtf_cpu']:.3f}), {r['n_segments']} segments, "
              f"{r['n_forced_cuts']} cut by the cap, VAD {100 * r['vad_share_of_compute']:.1f}% of compute")
    print(json.dumps(summary))
    write_results(args.out, obj, indent=1, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
