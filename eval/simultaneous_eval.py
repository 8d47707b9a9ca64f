#!/usr/bin/env python
"""Simultaneous (wait-k) evaluation of an mmst checkpoint with joint multilingual decoding.

Usage::

    python eval/simultaneous_eval.py --checkpoint CKPT --data DATA --split tst-COMMON \\
        --tgt-langs de,es --waitk-lagging 3 --source-segment-size 320 --out OUT

Each utterance's audio is re-read from the manifest's ``wav``/``offset``/``duration`` columns
(``mmst.audio.load_audio``: any rate, mono or stereo -> 16 kHz mono), streamed in segments of
``--source-segment-size`` ms through ONE streaming translator that decodes every requested language
in lockstep (joint decoding), and timed exactly as SimulEval 1.1 times an agent.  Outputs:

- ``OUT/<lang>/instances.log``: SimulEval-1.1 instances (index, prediction, delays, elapsed,
  prediction_length, reference, source, source_length);
- ``OUT/scores.json`` and ``OUT/scores.md``: per-language and averaged BLEU, AL, LAAL, AP, DAL, ATD,
  StartOffset, EndOffset, each also computation-aware (``_CA``), and the real-time factor;
- with several k (``--waitk-lagging 1,3,5,7,9``): ``OUT/k<k>/...`` per k, plus the sweep summary
  ``OUT/scores.json`` / ``OUT/scores.md`` (one row per k) and ``OUT/latency_quality.png`` (BLEU vs
  AL per language).

``--offline`` decodes each full utterance with beam search (the quality upper bound; every word has
delay = source length).  Errors (unknown language, vocab mismatch, missing files) print one line and
exit with status 1; unreadable, empty or silent audio and missing references give warnings.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

logger = logging.getLogger("simultaneous_eval")


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="mmst checkpoint (.pt)")
    p.add_argument("--data", default=None, help="DATA directory (default: the data_dir stored in the checkpoint)")
    p.add_argument("--split", default="tst-COMMON", help="manifest split to evaluate (DATA/<split>.tsv)")
    p.add_argument("--tgt-langs", default=None, help="comma-separated target languages (default: all of the model)")
    p.add_argument(
        "--waitk-lagging",
        default="3",
        help="wait-k lagging in pre-decision chunks; a comma list (1,3,5,7,9) sweeps k into OUT/k<k>/",
    )
    p.add_argument("--source-segment-size", type=float, default=320.0, help="source segment size in ms")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--offline", action="store_true", help="full-sentence beam search (quality upper bound)")
    p.add_argument("--beam", type=int, default=5, help="beam size for --offline")
    p.add_argument("--max-len-a", type=float, default=0.0, help="max target tokens = a * encoder_states + b")
    p.add_argument("--max-len-b", type=int, default=200, help="max target tokens = a * encoder_states + b")
    p.add_argument(
        "--min-len",
        type=int,
        default=0,
        help="suppress EOS before this many tokens (only for cost/agreement checks with untrained models)",
    )
    p.add_argument(
        "--eval-latency-unit",
        choices=["auto", "word", "char"],
        default="auto",
        help="latency unit: auto = char for zh/ja, word otherwise",
    )
    p.add_argument("--max-utterances", type=int, default=None, help="evaluate only the first N utterances")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: streaming decoding is a chain of small matrix products; "
                        "more threads add synchronisation and, on a busy machine, can be 100x slower; 0 = torch's "
                        "choice)")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--simuleval-compat", action="store_true",
                   help="count reference words as SimulEval 1.1.4 does (split on single spaces, so repeated or "
                        "trailing spaces add words) to reproduce its AL/LAAL/AP; default: whitespace-separated words")
    p.add_argument("--no-progress", action="store_true", help="disable the tqdm progress bar")
    return p


def parse_ks(value: str) -> list[int]:
    """``"1,3,5"`` -> ``[1, 3, 5]``; raises ValueError for non-positive or non-integer values."""
    ks = []
    for part in str(value).split(","):
        part = part.strip()
        if not part:
            continue
        k = int(part)
        if k < 1:
            raise ValueError(f"--waitk-lagging values must be >= 1, got {k}")
        ks.append(k)
    if not ks:
        raise ValueError("--waitk-lagging is empty")
    return ks


class EvalError(RuntimeError):
    """A configuration or input error reported as one line (exit status 1)."""


def load_utterances(data_dir: Path, split: str, langs: list[str], limit: int | None) -> list[dict[str, Any]]:
    """Rows of ``DATA/<split>.tsv`` with ``id``, ``wav``, ``offset``, ``duration`` and ``refs`` ``{lang: str | None}``.

    Raises:
        EvalError: missing manifest or columns, or a requested language without a reference column.
    """
    from mmst.data.manifest import read_manifest

    path = data_dir / f"{split}.tsv"
    if not path.is_file():
        raise EvalError(f"manifest not found: {path} (is --data/--split right?)")
    rows = read_manifest(path)
    if not rows:
        raise EvalError(f"{path}: no utterances")
    cols = set(rows[0])
    missing = [c for c in ("id", "wav", "offset", "duration") if c not in cols]
    if missing:
        raise EvalError(f"{path}: missing column(s) {', '.join(missing)} (needed to re-read the audio)")
    no_ref = [lang for lang in langs if f"tgt_text_{lang}" not in cols]
    if len(no_ref) == len(langs):
        raise EvalError(f"{path}: no reference column for {', '.join(no_ref)}")
    if no_ref:
        logger.warning("%s: no reference column for %s: BLEU not computed for them", path, ", ".join(no_ref))
    out = []
    for r in rows[:limit] if limit else rows:
        refs = {}
        for lang in langs:
            v = r.get(f"tgt_text_{lang}")
            refs[lang] = v if v else None
        out.append({"id": r["id"], "wav": r["wav"], "offset": r["offset"], "duration": r["duration"], "refs": refs})
    for lang in langs:
        n_missing = sum(1 for u in out if u["refs"][lang] is None)
        if n_missing:
            logger.warning("%s: %d of %d utterances have no %s reference (left out of BLEU)", split, n_missing,
                           len(out), lang)
    return out


def read_audio(u: dict[str, Any]) -> np.ndarray:
    """Audio of one utterance (16 kHz mono float32); unreadable/empty audio -> warning + empty array.

    No gain here: the DATA's ``fbank.peak_normalize`` is applied causally, chunk by chunk, by the
    translator (``mmst.evaluation.loading.PeakGainTranslator``), exactly as in the SimulEval agent.
    """
    from mmst.audio import AudioError, load_audio

    try:
        offset = float(u["offset"] or 0.0)
        duration = float(u["duration"]) if u["duration"] not in ("", None) else None
        x = load_audio(u["wav"], offset_s=offset, duration_s=duration, end_tolerance_s=0.05)
    except (AudioError, ValueError) as e:
        logger.warning("utterance %s: %s: empty hypothesis", u["id"], e)
        return np.zeros(0, dtype=np.float32)
    peak = float(np.abs(x).max()) if x.size else 0.0
    if x.size and peak < 1e-4:
        logger.warning("utterance %s: silent audio (peak %.1e); translating it anyway", u["id"], peak)
    return x


def run_one(
    translator: Any,
    utts: list[dict[str, Any]],
    audios: list[np.ndarray],
    langs: list[str],
    units: dict[str, str],
    segment_ms: float,
    offline: bool,
    out_dir: Path,
    config: dict[str, Any],
    progress: bool,
) -> dict[str, Any]:
    """Evaluate one setting (one k, or offline); write instances, scores.json and scores.md under ``out_dir``."""
    from mmst.evaluation.instances import make_instance, write_instances
    from mmst.evaluation.report import write_scores
    from mmst.evaluation.scorer import ScoringError, average_scores, score_instances
    from mmst.evaluation.streaming import stream_utterance

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


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)
    try:
        return _main(args)
    except EvalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def _main(args: argparse.Namespace) -> int:
    import torch

    from mmst.evaluation.loading import LoadError, load_system
    from mmst.evaluation.quality import latency_unit_for
    from mmst.evaluation.report import plot_latency_quality

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        ks = [None] if args.offline else parse_ks(args.waitk_lagging)
    except ValueError as e:
        raise EvalError(str(e)) from None
    if args.source_segment_size <= 0:
        raise EvalError("--source-segment-size must be > 0")
    langs = [x.strip() for x in args.tgt_langs.split(",") if x.strip()] if args.tgt_langs else None
    out = Path(args.out)
    try:
        system = load_system(args.checkpoint, data_dir=args.data, tgt_langs=langs, device=args.device)
    except LoadError as e:
        raise EvalError(str(e)) from None
    langs = list(system.tgt_langs)
    data_dir = system.data_dir
    units = {lang: (latency_unit_for(lang) if args.eval_latency_unit == "auto" else args.eval_latency_unit)
             for lang in langs}
    utts = load_utterances(data_dir, args.split, langs, args.max_utterances)
    audios = [read_audio(u) for u in tqdm(utts, desc="audio", disable=args.no_progress)]
    if all(a.size == 0 for a in audios):
        raise EvalError(f"no readable audio in {args.split} ({len(utts)} utterances)")
    base_cfg = {
        "checkpoint": str(args.checkpoint), "data": str(data_dir), "split": args.split, "tgt_langs": langs,
        "source_segment_size_ms": args.source_segment_size, "max_len_a": args.max_len_a,
        "max_len_b": args.max_len_b, "min_len": args.min_len, "latency_units": units,
        "offline": bool(args.offline), "joint_decoding": True, "fbank": system.fbank_kwargs,
        "peak_normalize": system.peak_normalize, "simuleval_compat": bool(args.simuleval_compat),
    }
    results: dict[str, Any] = {}
    for k in ks:
        try:
            translator = system.translator(k, max_len_a=args.max_len_a, max_len_b=args.max_len_b,
                                           beam=args.beam if args.offline else 1, min_len=args.min_len)
        except LoadError as e:
            raise EvalError(str(e)) from None
        cfg = dict(base_cfg, waitk=k, beam=args.beam if args.offline else 1)
        sub = out if len(ks) == 1 else out / f"k{k}"
        t0 = time.perf_counter()
        obj = run_one(translator, utts, audios, langs, units, args.source_segment_size, args.offline, sub, cfg,
                      not args.no_progress)
        results["offline" if k is None else f"k{k}"] = obj
        avg = obj.get("average", {})
        logger.info("%s: BLEU %.2f AL %.1f ms AL_CA %.1f ms RTF %.3f (%.1fs) -> %s",
                    "offline" if k is None else f"k={k}", avg.get("BLEU", float("nan")),
                    avg.get("AL", float("nan")), avg.get("AL_CA", float("nan")), obj.get("rtf") or float("nan"),
                    time.perf_counter() - t0, sub / "scores.md")
    if len(ks) > 1:
        points = {lang: [] for lang in langs}
        for k in ks:
            pl = results[f"k{k}"]["per_lang"]
            for lang in langs:
                if "AL" in pl[lang] and "BLEU" in pl[lang]:
                    points[lang].append((pl[lang]["AL"], pl[lang]["BLEU"], f"k={k}"))
        plot_latency_quality(points, out / "latency_quality.png", title="BLEU vs AL (wait-k sweep)")
        _write_sweep(out, ks, results, langs)
    return 0


def _write_sweep(out: Path, ks: list[int], results: dict[str, Any], langs: list[str]) -> None:
    from mmst.evaluation.report import format_metrics_table

    sweep = {f"k{k}": {"per_lang": {lang: {m: v for m, v in results[f"k{k}"]["per_lang"][lang].items()
                                           if m != "info"} for lang in langs},
                       "average": results[f"k{k}"]["average"], "rtf": results[f"k{k}"].get("rtf")} for k in ks}
    (out / "scores.json").write_text(json.dumps({"sweep": sweep, "ks": ks, "langs": langs}, indent=2,
                                                ensure_ascii=False) + "\n")
    md = ["# wait-k sweep", "", "Latency in ms (SimulEval 1.1 definitions, `_CA` = computation-aware); "
          "BLEU: sacrebleu. Per-k details: `k<k>/scores.md`.", ""]
    for lang in langs + ["avg"]:
        rows = {}
        for k in ks:
            r = results[f"k{k}"]["average"] if lang == "avg" else results[f"k{k}"]["per_lang"][lang]
            rows[f"k={k}"] = r
        md += [f"## {lang}", "", format_metrics_table(rows, ("BLEU", "AL", "LAAL", "AP", "DAL", "ATD"),
                                                     ca=True, row_header="k"), ""]
    rtfs = ", ".join(f"k={k}: {results[f'k{k}'].get('rtf') or float('nan'):.3f}" for k in ks)
    md += [f"Real-time factor: {rtfs}", "", "![BLEU vs AL](latency_quality.png)", ""]
    (out / "scores.md").write_text("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
