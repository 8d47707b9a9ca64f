#!/usr/bin/env python
"""Benchmark fbank extraction speed: seconds of audio per second per core (real-time factor).

Measures :func:`mmst.features.fbank` (kaldi-native-fbank + the frame copy) on synthetic 16 kHz audio,
single process and with ``--jobs N`` worker processes, optionally including decoding the audio from
PCM16 wav files with :func:`mmst.audio.load_audio` (what the prep does). Prints a table and writes
JSON (default ``docs/results/features.json``). Goal: >= 500x real time per core.

The machine may be shared: the best of ``--repeats`` runs is reported, both as wall-clock speed per
core (audio seconds / wall seconds / jobs) and as speed per CPU second actually spent in the workers
(``time.thread_time``), which other processes on the machine disturb much less; the load average is
recorded with the numbers.

Example::

    python bench/bench_features.py --seconds 300 --jobs 2
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from provenance import RESULTS_DIR, finish_record, run_record

from mmst.cli_help import ArgumentParser

#: The paths this benchmark runs without importing them; the repository modules that it and its child processes
#: import are recorded at run time (``provenance.depends_on``, bench/provenance.py).
DEPENDS_ON = ("bench/bench_features.py",)

REPO = Path(__file__).resolve().parents[1]


def _utterances(total_s: float, utt_s: float, seed: int = 0) -> list[np.ndarray]:
    """Speech-like synthetic audio: modulated harmonics + noise, float32 in [-1, 1], 16 kHz."""
    rng = np.random.default_rng(seed)
    n = max(1, int(round(total_s / utt_s)))
    t = np.arange(int(utt_s * 16000)) / 16000.0
    out = []
    for _ in range(n):
        f0 = rng.uniform(100, 250)
        x = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))
        x = 0.2 * x / np.abs(x).max() + 0.01 * rng.standard_normal(t.size)
        out.append(x.astype(np.float32))
    return out


def _fbank_one(x: np.ndarray) -> float:
    """fbank of one utterance; returns the CPU seconds it took (thread CPU time)."""
    from mmst.features import fbank

    t = time.thread_time()
    fbank(x, dither=1.0, dither_mode="silence")
    return time.thread_time() - t


def _load_fbank_one(path: str) -> float:
    """load_audio + fbank of one wav; returns the CPU seconds it took."""
    from mmst.audio import load_audio
    from mmst.features import fbank

    t = time.thread_time()
    fbank(load_audio(path), dither=1.0, dither_mode="silence")
    return time.thread_time() - t


def _time(fn, items, jobs: int, repeats: int) -> tuple[float, float]:
    """Best wall time and best summed CPU time (s) over ``repeats`` of mapping ``fn`` over ``items``."""
    best_wall, best_cpu = float("inf"), float("inf")
    if jobs == 1:
        for _ in range(repeats):
            t = time.perf_counter()
            cpu = sum(fn(it) for it in items)
            best_wall, best_cpu = min(best_wall, time.perf_counter() - t), min(best_cpu, cpu)
        return best_wall, best_cpu
    with mp.get_context("forkserver").Pool(jobs) as pool:
        pool.map(fn, items[:jobs])  # warm-up: import mmst in the workers
        for _ in range(repeats):
            t = time.perf_counter()
            cpu = sum(pool.map(fn, items, chunksize=1))
            best_wall, best_cpu = min(best_wall, time.perf_counter() - t), min(best_cpu, cpu)
    return best_wall, best_cpu



def build_parser() -> ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=300.0, help="total seconds of audio per run")
    p.add_argument("--utt-seconds", type=float, default=10.0, help="length of each synthetic utterance (s)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes of the parallel run (besides 1)")
    p.add_argument("--repeats", type=int, default=3, help="runs per setting; the best is reported")
    p.add_argument("--no-load", action="store_true", help="skip the load_audio(wav) + fbank measurement")
    p.add_argument("--out", default=str(RESULTS_DIR / "features.json"),
                   help="JSON result file (default docs/results/features.json)")
    p.add_argument("--goal", type=float, default=500.0, help="goal, x real time per core")
    p.add_argument("--check", action="store_true", help="exit 1 when the single-process fbank misses --goal")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0 (1 if the goal is missed and --check was given)."""
    args = build_parser().parse_args(argv)
    record = run_record(depends_on=DEPENDS_ON)  # at the start: the code that runs

    import kaldi_native_fbank
    import soundfile as sf

    from mmst.atomic import atomic_write_json

    utts = _utterances(args.seconds, args.utt_seconds)
    audio_s = sum(u.size for u in utts) / 16000.0
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        if not args.no_load:
            for i, u in enumerate(utts):
                paths.append(os.path.join(tmp, f"u{i}.wav"))
                sf.write(paths[-1], u, 16000, subtype="PCM_16")
        settings = [("fbank", _fbank_one, utts)]
        if not args.no_load:
            settings.append(("load_audio(wav)+fbank", _load_fbank_one, paths))
        for name, fn, items in settings:
            for jobs in sorted({1, args.jobs}):
                wall, cpu = _time(fn, items, jobs, args.repeats)
                rtf = audio_s / wall
                results.append({"task": name, "jobs": jobs, "audio_s": round(audio_s, 1), "wall_s": round(wall, 4),
                                "cpu_s": round(cpu, 4), "x_realtime": round(rtf, 1),
                                "x_realtime_per_core_wall": round(rtf / jobs, 1),
                                "x_realtime_per_cpu_second": round(audio_s / cpu, 1)})
    single = next(r for r in results if r["task"] == "fbank" and r["jobs"] == 1)
    info = {
        "provenance": finish_record(record),
        "benchmark": "fbank80 extraction speed (seconds of audio per second per core)",
        "goal_x_realtime_per_core": args.goal,
        "goal_metric": "x_realtime_per_cpu_second of single-process fbank",
        "goal_met_single_process": single["x_realtime_per_cpu_second"] >= args.goal,
        "results": results,
        "machine": {"cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()],
                    "python": sys.version.split()[0], "platform": platform.platform(),
                    "kaldi_native_fbank": getattr(kaldi_native_fbank, "__version__", "?"), "numpy": np.__version__},
        "settings": {"seconds": args.seconds, "utt_seconds": args.utt_seconds, "repeats": args.repeats,
                     "dither": 1.0, "dither_mode": "silence"},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    atomic_write_json(args.out, info)
    print(f"{'task':<24}{'jobs':>5}{'audio s':>9}{'wall s':>9}{'x RT':>9}{'x RT/core':>11}{'x RT/cpu-s':>12}")
    for r in results:
        print(f"{r['task']:<24}{r['jobs']:>5}{r['audio_s']:>9.1f}{r['wall_s']:>9.3f}{r['x_realtime']:>9.1f}"
              f"{r['x_realtime_per_core_wall']:>11.1f}{r['x_realtime_per_cpu_second']:>12.1f}")
    print("x RT/core = audio s / wall s / jobs; x RT/cpu-s = audio s / CPU seconds spent in the workers "
          "(robust to other load on a shared machine)")
    print(f"goal {args.goal:.0f}x RT per core (single-process fbank, per CPU second: "
          f"{single['x_realtime_per_cpu_second']:.0f}x): "
          f"{'met' if info['goal_met_single_process'] else 'MISSED'}; load average {info['machine']['loadavg']}; "
          f"wrote {args.out}")
    return 1 if args.check and not info["goal_met_single_process"] else 0


if __name__ == "__main__":
    sys.exit(main())
