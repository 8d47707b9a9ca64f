"""Benchmark the MuST-C cross-pair alignment index (budget: 300,000 segments in < 60 s on 1 core).

Generates a MuST-C-like yaml/text corpus (no audio) with ``--segments`` segments in total spread over
``--num-langs`` pairs (default 300,000 over 8 pairs = 37,500 per pair, MuST-C v1's order of magnitude),
where non-reference pairs carry realistic disagreements (5 ms and 40 ms shifts, segments split in
two, extra ``rW``/``uW`` keys). Then times, in one process:

1. ``read``: :func:`mmst.corpora.mustc.read_pair_split` for every pair (yaml parse + normalisation);
2. ``align``: :func:`mmst.corpora.mustc.align_segments` (split hygiene + index + interval checks);
3. ``report``: :func:`mmst.corpora.mustc.build_report`.

Prints a table and writes ``docs/results/alignment.json``. Pure Python, single-threaded.

Usage: ``python bench/bench_alignment.py [--segments 300000] [--num-langs 8] [--out docs/results/alignment.json]``
"""

from __future__ import annotations

import os
import platform
import random
import shutil
import tempfile
import time

from provenance import RESULTS_DIR, finish_record, run_record

from mmst.atomic import atomic_write_json
from mmst.cli_help import ArgumentParser
from mmst.corpora.mustc import AlignParams, align_segments, build_report, read_pair_split

#: The paths this benchmark runs without importing them; the repository modules that it and its child processes
#: import are recorded at run time (``provenance.depends_on``, bench/provenance.py).
DEPENDS_ON = ("bench/bench_alignment.py",)

LANGS = ["de", "es", "fr", "it", "nl", "pt", "ro", "ru", "ja", "zh", "ar", "tr"]
WORDS = (
    "the of and to a in that is it you we this so they was for are have but what on with can "
    "about there be not do all very one my people like just think our if at an know going how "
    "your as would really world when time were from more because which these out me up get"
).split()


def generate(root: str, n_segments: int, langs: list[str], seg_per_talk: int = 150, seed: int = 0) -> dict:
    """Write ``ROOT/en-XX/data/train/txt/train.{yaml,en,XX}`` for every language; no wavs.

    Returns counts of generated perturbations. ``n_segments`` counts yaml lines over all pairs.
    """
    rng = random.Random(seed)
    per_pair = n_segments // len(langs)
    n_talks = max(1, per_pair // seg_per_talk)
    base = []  # (talk, offset, duration, english)
    for t in range(n_talks):
        off = round(rng.uniform(0.5, 3.0), 2)
        for _ in range(seg_per_talk):
            dur = round(rng.uniform(1.0, 12.0), 6)
            en = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 25)))
            base.append((f"ted_{t + 1}", off, dur, en))
            off = round(off + dur + rng.uniform(0.1, 1.5), 6)
    base = base[:per_pair]
    stats = {"shift_5ms": 0, "shift_40ms": 0, "split": 0}
    for li, lang in enumerate(langs):
        d = os.path.join(root, f"en-{lang}", "data", "train", "txt")
        os.makedirs(d, exist_ok=True)
        ys, es, ts = [], [], []
        for talk, off, dur, en in base:
            rows = [(off, dur, en)]
            if li > 0:
                r = rng.random()
                if r < 0.05:
                    rows = [(round(off + 0.005, 6), dur, en)]
                    stats["shift_5ms"] += 1
                elif r < 0.10:
                    rows = [(round(off + 0.04, 6), dur, en)]
                    stats["shift_40ms"] += 1
                elif r < 0.12:
                    w = en.split()
                    h = len(w) // 2
                    cut = round(off + dur * h / len(w), 6)
                    rows = [(off, round(cut - off, 6), " ".join(w[:h])), (cut, round(off + dur - cut, 6), " ".join(w[h:]))]
                    stats["split"] += 1
            for o, du, e in rows:
                ys.append(f"- {{duration: {du:.6f}, offset: {o:.6f}, rW: {len(e.split())}, uW: 0, "
                          f"speaker_id: spk.{talk}, wav: {talk}.wav}}")
                es.append(e)
                ts.append(f"{lang}: {e}")
        for ext, lines in (("yaml", ys), ("en", es), (lang, ts)):
            with open(os.path.join(d, f"train.{ext}"), "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
    stats["per_pair"] = len(base)
    return stats


def build_parser() -> ArgumentParser:
    """Command-line options."""
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("--segments", type=int, default=300_000, help="total yaml segments over all pairs (default 300000)")
    ap.add_argument("--num-langs", dest="langs", type=int, default=8, help="number of pairs (default 8: de..ru)")
    ap.add_deprecated_alias("--langs", "--num-langs")
    ap.add_argument("--seed", type=int, default=0, help="generator seed")
    ap.add_argument("--out", default=str(RESULTS_DIR / "alignment.json"),
                    help="JSON output path (default docs/results/alignment.json)")
    ap.add_argument("--budget-s", type=float, default=60.0, help="time goal for read+align, seconds (default 60)")
    return ap


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; returns the result dict (also written as JSON)."""
    args = build_parser().parse_args(argv)
    record = run_record(depends_on=DEPENDS_ON)  # at the start: the code that runs
    langs = LANGS[: args.langs]
    tmp = tempfile.mkdtemp(prefix="bench_align_")
    try:
        t0 = time.perf_counter()
        gen = generate(tmp, args.segments, langs, seed=args.seed)
        t_gen = time.perf_counter() - t0

        t0 = time.perf_counter()
        segs, n_in = [], {}
        for lang in langs:
            s, issues, n = read_pair_split(tmp, lang, "train", check_wavs=False)
            assert not issues, issues[:3]
            segs.extend(s)
            n_in[("train", lang)] = n
        t_read = time.perf_counter() - t0

        params = AlignParams()
        t0 = time.perf_counter()
        res = align_segments(segs, langs, params)
        t_align = time.perf_counter() - t0

        t0 = time.perf_counter()
        build_report(res, n_in, [], params)
        t_report = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    total = t_read + t_align + t_report
    methods: dict[str, int] = {}
    for g in res.kept:
        for m in g.matches.values():
            methods[m.method] = methods.get(m.method, 0) + 1
    result = {
        "provenance": finish_record(record),
        "segments": len(segs),
        "pairs": len(langs),
        "segments_per_pair": gen["per_pair"],
        "perturbations": {k: v for k, v in gen.items() if k != "per_pair"},
        "kept_utterances": len(res.kept),
        "match_methods": dict(sorted(methods.items())),
        "seconds": {"generate": round(t_gen, 2), "read": round(t_read, 2), "align": round(t_align, 2),
                    "report": round(t_report, 2), "read_align_report": round(total, 2)},
        "segments_per_second": round(len(segs) / total),
        "budget_s": args.budget_s,
        "pass": total < args.budget_s,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "threads": 1,
    }
    print(f"{'phase':<10} {'seconds':>8}")
    for k in ("read", "align", "report", "read_align_report"):
        print(f"{k:<10} {result['seconds'][k]:>8.2f}")
    print(f"segments={result['segments']} pairs={len(langs)} kept={result['kept_utterances']} "
          f"methods={result['match_methods']} -> {result['segments_per_second']} seg/s; "
          f"goal < {args.budget_s:.0f} s: {'PASS' if result['pass'] else 'FAIL'}")
    atomic_write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
