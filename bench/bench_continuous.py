#!/usr/bin/env python
"""Continuous speech: sentences that follow each other with short pauses, streamed as one talk; three systems at
two policies, VAD against the oracle segmentation of the same stream.

Talks: for each split of ``--splits`` (default tst-COMMON and tst-unseen) and each pause range of
``--pause-ranges`` (default 0-100, 100-250 and 250-600 ms), ``--utterances`` utterances of the split joined into
one talk (:func:`mmst.corpora.long_talk.build_long_talk`, pauses drawn uniformly from the range).

Systems (``SYSTEMS``), each at every policy of ``--policies`` (default wait-3 and AlignAtt), each talk streamed
through :class:`mmst.simultaneous.LongFormTranslator` with Silero VAD segmentation:

- ``quickstart``: the ``--model`` (trained on single sentences) without sentence restarts;
- ``quickstart+restart``: the same model with sentence restarts (the driver's default);
- ``multisent`` / ``multisent+restart``: the ``--multisent-model`` (trained on spans of consecutive utterances,
  ``data.concat_utterances``), without and with restarts; left out without ``--multisent-model``.

Each model also streams each talk with the oracle segmentation (the sentences' own boundaries, restarts off:
one sentence per segment), the reference its VAD runs are compared with, and (``--oracle-edge-ms``, default 100)
with those segments widened by that much silence on both sides (``oracle_edge``; at most half the pause to a
neighbour): a model whose BLEU drops there depends on where a segment's edges fall, as the VAD's padding moves
them (``oracle_edge_bleu_ratio_min`` per model and policy in the summary). Per run and language: BLEU and
StreamLAAL (mWER resegmentation, :func:`mmst.evaluation.longform.evaluate_talks`), the untranslated speech share,
the VAD segments and the restarts; per restart, its error: the distance from its restart point to the nearest
pause between two reference sentences (0 inside one). With ``--merged-vad-min-silence-ms`` > 0 the VAD also runs
with that segment-ending silence (segments of several sentences each; ``vad_merged``).

Tuning (``--tune-split``, default dev): before the test talks, every system streams the tuning split's talks
(``--tune-utterances`` utterances each, default 100; the same pause ranges and policies) with every VAD segment
cap of ``--max-segment-grid`` (default 20, 8 and 5 s), and the configuration (system, policy, cap) with the highest ``bleu_ratio_vs_oracle_min`` there is the one the summary
reports (:func:`choose`; ties: the higher mean BLEU, then the longer cap). The test talks run every system at
``--max-segment-s`` (the table) and the chosen one at its cap (``<system>@<cap>s``), so the reported numbers come
from talks nothing was chosen on. The cap matters because a model's segments should hold no more speech than its
training spans did: with sentences of about 2 s and pauses under 100 ms, a 20 s segment holds several sentences.
The tuning runs are in the JSON (``tuning``). With ``--tune-split ''`` the best system on the test talks is reported
(``chosen_on``: ``test``).

Summary, per system and policy (``systems``) and for the reported one:

- ``bleu_ratio_vs_oracle_min``: min over languages, splits and pause ranges of VAD BLEU / oracle BLEU (the same
  model's); goal >= 0.95;
- ``streamlaal_excess_ms_max``: max of VAD StreamLAAL - oracle StreamLAAL; goal <= 500;
- ``untranslated_share_max``: max untranslated speech share with the VAD; goal <= 0.02;
- ``restart_error_ms_median``: median restart error over every restart (``restart_error_n``) on the test talks of
  every system with restarts at every policy: the accuracy of the restart point, which one system that rarely
  needs a restart cannot measure; goal <= 200. ``restart_error_ms_median_system`` (``restart_error_n_system``):
  the median of the reported system alone, or of the best one with restarts when it has none
  (``restart_error_system``);
- ``rss_growth_mib_30min_no_pause``: with ``--rss-model`` (a bounded-left-context model), the RSS growth (MiB)
  from minute 2 to the end of a ``--rss-minutes`` stream without a segment-ending pause, in a child process
  (:func:`rss_no_pause`; ``--rss-only`` adds it to an existing result); goal <= 50.

Needs the quickstart model, its DATA and (optionally) a multi-sentence model. Runtime: talks x policies x (4
oracle + 4 VAD runs), each at the real-time factor plus its scoring: about 15 minutes for 25 utterances per talk on one
core (96 runs of 5-15 s); the tuning runs every system at three caps on talks four times as long (about 45 minutes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from provenance import RESULTS_DIR, run_record, write_results

from mmst.cli_help import ArgumentParser
from mmst.simultaneous.longform import RESTART_EOS_CHUNKS, RESTART_MIN_SPEECH_MS

#: The paths this benchmark runs without importing them (the modules it imports are recorded at run time).
DEPENDS_ON = ("bench/bench_continuous.py",)

GOALS = {"bleu_ratio_vs_oracle_min": (">=", 0.95), "streamlaal_excess_ms_max": ("<=", 500.0),
         "untranslated_share_max": ("<=", 0.02), "restart_error_ms_median": ("<=", 200.0),
         "rss_growth_mib_30min_no_pause": ("<=", 50.0)}


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(description=__doc__)
    p.add_argument("--model", default="exp/synthetic/model_export",
                   help="the quickstart model: a model folder (mmst-export) or checkpoint trained on single sentences")
    p.add_argument("--multisent-model", default=None,
                   help="a multi-sentence model (data.concat_utterances > 1; same DATA and vocabularies); "
                        "default: none (its systems are left out)")
    p.add_argument("--data", default="exp/synthetic/data", help="DATA directory of the utterances")
    p.add_argument("--splits", default="tst-COMMON,tst-unseen",
                   help="comma-separated splits whose utterances make the talks (one talk per split and pause range)")
    p.add_argument("--tgt-langs", default=None, help="comma-separated languages (default: the model's)")
    p.add_argument("--utterances", type=int, default=25, help="utterances per talk")
    p.add_argument("--pause-ranges", default="0,100;100,250;250,600",
                   help="pause ranges in ms between utterances, LO,HI;LO,HI;...")
    p.add_argument("--policies", default="waitk:k=3;alignatt:frames=4",
                   help="streaming policies (name:k=v), ';'-separated: every system runs each, for every language")
    p.add_argument("--systems", default=",".join(s[0] for s in SYSTEMS),
                   help="comma-separated systems to run (module docstring); the multisent ones need --multisent-model")
    p.add_argument("--restart-min-speech-ms", type=float, default=RESTART_MIN_SPEECH_MS,
                   help="the systems with restarts: speech (ms, VAD) needed after the restart point")
    p.add_argument("--restart-eos-chunks", type=int, default=RESTART_EOS_CHUNKS,
                   help="the systems with restarts: chunks of EOS predicted on partial input that end a sentence "
                        "(adaptive policies)")
    p.add_argument("--vad-min-silence-ms", type=float, default=250.0, help="silence (ms) that ends a VAD segment")
    p.add_argument("--max-segment-s", type=float, default=20.0,
                   help="longest VAD segment in seconds, for every system of the test table")
    p.add_argument("--tune-split", default="dev",
                   help="split whose talks choose the reported configuration (system, policy and --max-segment-grid "
                        "cap; its talks are built as the test splits' are); '' chooses on the test talks themselves "
                        "(the summary then says so)")
    p.add_argument("--tune-utterances", type=int, default=100,
                   help="utterances per --tune-split talk (more than --utterances: a short talk holds too few "
                        "segments of several sentences to tell the caps apart)")
    p.add_argument("--max-segment-grid", default="20,8,5",
                   help="VAD segment caps (s, comma list) tried on --tune-split for every system and policy")
    p.add_argument("--merged-vad-min-silence-ms", type=float, default=0.0,
                   help="also run the VAD with this segment-ending silence (segments of several sentences); 0 = not")
    p.add_argument("--oracle-edge-ms", type=float, default=100.0,
                   help="also run each model with the oracle segments widened by this much silence on both sides "
                        "(at most half the pause to a neighbour): how much a model's BLEU depends on where a segment's "
                        "edges fall (VAD padding); 0 = not")
    p.add_argument("--source-segment-size", type=float, default=320.0, help="processing chunk in ms")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0, help="seed of the pause lengths")
    p.add_argument("--note", default="", help="a note recorded in the provenance (e.g. machine load)")
    p.add_argument("--out", default=str(RESULTS_DIR / "continuous.json"), help="results JSON")
    p.add_argument("--rss-model", default=None,
                   help="also measure the RSS growth (rss_growth_mib_30min_no_pause) of this bounded-left-context model "
                        "(model folder or checkpoint) on an --rss-minutes stream with no segment-ending pause, in a "
                        "child process; default: not measured")
    p.add_argument("--rss-minutes", type=float, default=30.0, help="length of the RSS measurement's stream, minutes")
    p.add_argument("--rss-only", action="store_true",
                   help="measure only the RSS growth (--rss-model) and put it into the existing --out JSON")
    return p


#: ``(name, model, sentence restarts)``: model ``quickstart`` is ``--model``, ``multisent`` ``--multisent-model``
SYSTEMS = (("quickstart", "quickstart", False), ("quickstart+restart", "quickstart", True),
           ("multisent", "multisent", False), ("multisent+restart", "multisent", True))


class _Recorder:
    """A long-form translator that keeps the segment ends it returns (for the restarts' points)."""

    def __init__(self, lf: Any) -> None:
        self.lf, self.ends = lf, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lf, name)

    def _keep(self, evs):
        from mmst.simultaneous.longform import SegmentEnd

        self.ends += [e for e in evs if isinstance(e, SegmentEnd)]
        return evs

    def push(self, samples):
        return self._keep(self.lf.push(samples))

    def finish(self):
        return self._keep(self.lf.finish())


def restart_errors_ms(ends: list[Any], gaps_ms: list[tuple[float, float]]) -> list[float]:
    """Per restart: 0 when its point lies in a pause between two reference sentences ``[end_j, start_j+1]``,
    else the distance to the nearest such pause, ms."""
    out = []
    for e in ends:
        for r in e.restarts:
            t = r.restart_ms
            out.append(min((0.0 if a <= t <= b else min(abs(t - a), abs(t - b))) for a, b in gaps_ms)
                       if gaps_ms else float("nan"))
    return out


def widened(spans_s: list[tuple[float, float]], edge_s: float) -> list[tuple[float, float]]:
    """Oracle segments ``[(start, end)]`` (s) each widened by ``edge_s`` on both sides, but never past the middle of
    the pause to a neighbour (so a segment gains silence, not a neighbour's speech) nor before 0."""
    out = []
    for i, (a, b) in enumerate(spans_s):
        lo = a - edge_s if i == 0 else max(a - edge_s, (spans_s[i - 1][1] + a) / 2)
        hi = b + edge_s if i == len(spans_s) - 1 else min(b + edge_s, (b + spans_s[i + 1][0]) / 2)
        out.append((max(0.0, min(lo, a)), max(hi, b)))
    return out


def run_talk(system, talk_dir: Path, langs: list[str], args, oracle: bool, restart: bool, policy: str,
             min_silence_ms: float | None = None, edge_ms: float = 0.0,
             max_segment_s: float | None = None) -> dict[str, Any]:
    """One talk, one model, one segmentation, restarts on or off: per language BLEU, StreamLAAL and the share.
    ``edge_ms`` > 0 (with ``oracle``): every oracle segment widened by that much silence on both sides
    (:func:`widened`); ``max_segment_s``: the VAD's segment cap (s; default ``args.max_segment_s``)."""
    from mmst.evaluation.longform import evaluate_talks, talks_from_files
    from mmst.evaluation.quality import latency_units
    from mmst.simultaneous.longform import LongFormTranslator, OracleSegmenter
    from mmst.simultaneous.vad import StreamingVad

    talks = talks_from_files([talk_dir / "talk.wav"], {lang: talk_dir / f"talk.{lang}" for lang in langs},
                             talk_dir / "talk.yaml")
    sents = talks[0].refs[langs[0]]
    vad = StreamingVad(min_silence_ms=min_silence_ms or args.vad_min_silence_ms,
                       max_segment_s=max_segment_s or args.max_segment_s)
    if oracle:
        segs = [(s.offset_ms / 1000.0, (s.offset_ms + s.duration_ms) / 1000.0) for s in sents]
        vad = OracleSegmenter(widened(segs, edge_ms / 1000.0) if edge_ms else segs, speech=vad)
    tr = system.translator(policy={lang: policy for lang in langs}, tgt_langs=langs)
    lf = _Recorder(LongFormTranslator(tr, vad=vad, chunk_ms=args.source_segment_size, restart=restart,
                                      restart_min_speech_ms=args.restart_min_speech_ms,
                                      restart_eos_chunks=args.restart_eos_chunks))
    with tempfile.TemporaryDirectory() as out:
        obj = evaluate_talks(lf, talks, langs, latency_units(langs, "auto"), out, progress=False)
    gaps = [(a.offset_ms + a.duration_ms, b.offset_ms) for a, b in zip(sents, sents[1:])]
    errs = restart_errors_ms(lf.ends, gaps)
    return {"per_lang": {lang: {k: obj["per_lang"][lang].get(k) for k in
                                ("BLEU", "StreamLAAL", "untranslated_speech_share")} for lang in langs},
            "n_segments": obj["n_vad_segments"], "n_restarts": obj["n_restarts"], "audio_s": obj["audio_s"],
            "rtf": obj["rtf"], "restart_errors_ms": errs}


def system_summary(rows: list[dict[str, Any]], langs: list[str], name: str, model: str, restart: bool,
                   policy: str) -> dict[str, Any]:
    """The summary keys of one system at one policy over the rows (talks) that ran it."""
    ratios, excess, shares, errs, bleu = [], [], [], [], []
    for r in rows:
        if r["policy"] != policy or name not in r["vad"]:
            continue
        vad, ora = r["vad"][name], r["oracle"][model]
        errs += vad["restart_errors_ms"]
        for lang in langs:
            v, o = vad["per_lang"][lang], ora["per_lang"][lang]
            if v.get("BLEU") is not None:
                bleu.append(v["BLEU"])
            if v.get("BLEU") is not None and o.get("BLEU"):
                ratios.append(v["BLEU"] / o["BLEU"])
            if v.get("StreamLAAL") is not None and o.get("StreamLAAL") is not None:
                excess.append(v["StreamLAAL"] - o["StreamLAAL"])
            shares.append(v.get("untranslated_speech_share") or 0.0)
    return {"system": name, "policy": policy, "restart": restart, "bleu_ratio_vs_oracle_min": min(ratios, default=None),
            "vad_bleu_mean": statistics.mean(bleu) if bleu else None,
            "streamlaal_excess_ms_max": max(excess, default=None), "untranslated_share_max": max(shares, default=None),
            "restart_error_ms_median": statistics.median(errs) if errs else None, "n_restarts": len(errs)}


def capped(name: str, cap_s: float, default_s: float) -> str:
    """The key of system ``name`` streamed with a VAD segment cap of ``cap_s`` seconds: the name itself at the
    default cap ``default_s``, else ``name@<cap>s`` (``multisent+restart@5s``)."""
    return name if cap_s == default_s else f"{name}@{cap_s:g}s"


def parse_caps(text: str) -> list[float]:
    """``--max-segment-grid``: a comma list of positive seconds, in the order given, duplicates dropped.

    >>> parse_caps("20, 8,5,8")
    [20.0, 8.0, 5.0]
    """
    caps: list[float] = []
    for x in text.split(","):
        if not x.strip():
            continue
        try:
            v = float(x)
        except ValueError:
            raise ValueError(f"--max-segment-grid: {x.strip()!r} is not a number of seconds") from None
        if not v > 0:
            raise ValueError(f"--max-segment-grid: {x.strip()!r}: a segment cap must be > 0 s")
        if v not in caps:
            caps.append(v)
    if not caps:
        raise ValueError("--max-segment-grid: no cap given")
    return caps


def choose(rows: list[dict[str, Any]], langs: list[str], policies: list[str], systems: list[tuple[str, str, bool]],
           caps: list[float], default_s: float) -> dict[str, Any]:
    """The configuration the summary reports, chosen on the tuning talks ``rows`` (their ``vad`` runs keyed by
    :func:`capped`): over every system, policy and cap, the highest ``bleu_ratio_vs_oracle_min``; ties go to the
    higher mean VAD BLEU, then to the longer cap (the safer one on speech with longer sentences). Returns
    ``{"chosen": {system, base_system, model, restart, policy, max_segment_s}, "candidates": [system summaries]}``.

    Raises:
        ValueError: no candidate has a BLEU ratio (no runs, or every oracle BLEU is 0).
    """
    cands = []
    for pol in policies:
        for name, model, restart in systems:
            for cap in caps:
                x = system_summary(rows, langs, capped(name, cap, default_s), model, restart, pol)
                if x["bleu_ratio_vs_oracle_min"] is not None:
                    cands.append({**x, "base_system": name, "model": model, "max_segment_s": cap})
    if not cands:
        raise ValueError("no configuration has a BLEU ratio on the tuning talks (no runs, or every oracle BLEU is 0)")
    best = max(cands, key=lambda x: (x["bleu_ratio_vs_oracle_min"], x["vad_bleu_mean"] or 0.0, x["max_segment_s"]))
    return {"chosen": {k: best[k] for k in ("system", "base_system", "model", "restart", "policy", "max_segment_s")},
            "candidates": cands}


def summarize(rows: list[dict[str, Any]], langs: list[str], policies: list[str],
              systems: list[tuple[str, str, bool]], chosen: dict[str, Any] | None = None,
              chosen_on: str | None = None) -> dict[str, Any]:
    """The summary keys (module docstring) per system and policy, the reported one's, and whether each goal is met.

    The reported configuration is ``chosen`` (``system`` and ``policy`` keys, from :func:`choose` on the talks of
    the split ``chosen_on``) when given; without it, the best on these rows by ``bleu_ratio_vs_oracle_min``
    (``chosen_on`` = ``"test"``: chosen on the talks it is reported on).

    Raises:
        ValueError: no system has a BLEU ratio; ``chosen`` has no runs in ``rows``.
    """
    per = [system_summary(rows, langs, name, model, restart, pol)
           for pol in policies for name, model, restart in systems]
    per = [x for x in per if x["bleu_ratio_vs_oracle_min"] is not None]
    if not per:
        raise ValueError("no system has a BLEU ratio (no references, or every oracle BLEU is 0)")
    if chosen is not None:
        match = [x for x in per if (x["system"], x["policy"]) == (chosen["system"], chosen["policy"])]
        if not match:
            raise ValueError(f"the chosen configuration {chosen['system']} {chosen['policy']} has no runs to report")
        best = dict(match[0])
        best["chosen_on"] = chosen_on
    else:
        best = dict(max(per, key=lambda x: x["bleu_ratio_vs_oracle_min"]))
        best["chosen_on"] = "test"
    restarted = [x for x in per if x["restart"] and x["n_restarts"]]
    src = best if best["restart"] or not restarted else max(restarted, key=lambda x: x["bleu_ratio_vs_oracle_min"])
    best["restart_error_system"] = f"{src['system']} {src['policy']}"
    best["restart_error_ms_median_system"] = src["restart_error_ms_median"]
    best["restart_error_n_system"] = src["n_restarts"]
    pooled = [e for r in rows for name, _, restart in systems if restart and name in r["vad"]
              for e in r["vad"][name]["restart_errors_ms"]]
    best["restart_error_ms_median"] = statistics.median(pooled) if pooled else None
    best["restart_error_n"] = len(pooled)
    best["rss_growth_mib_30min_no_pause"] = None
    goals = {}
    for k, (op, g) in GOALS.items():
        v = best.get(k)
        goals[k] = {"goal": f"{op} {g:g}", "met": None if v is None else (v >= g if op == ">=" else v <= g)}
    best["goals"] = goals
    best["not_measured"] = {"rss_growth_mib_30min_no_pause": "measured with --rss-model (a bounded-left-context model)"}
    best["systems"] = per
    best["oracle_edge_bleu_ratio_min"] = edge_robustness(rows, langs)
    return best


def edge_robustness(rows: list[dict[str, Any]], langs: list[str]) -> dict[str, dict[str, float]]:
    """Per model and policy: the min over talks and languages of BLEU with widened oracle segments / BLEU with the
    oracle segments (``oracle_edge`` runs; empty without them)."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        for m, run in (r.get("oracle_edge") or {}).items():
            for lang in langs:
                w, o = run["per_lang"][lang].get("BLEU"), r["oracle"][m]["per_lang"][lang].get("BLEU")
                if w is not None and o:
                    out.setdefault(m, {}).setdefault(r["policy"], []).append(w / o)
    return {m: {pol: min(v) for pol, v in per.items()} for m, per in out.items()}


# ---------------------------------------------------------------------------------------- RSS, endless speech
def _rss_mib() -> float:
    """This process's resident set size (``VmRSS`` of /proc/self/status), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise OSError("no VmRSS in /proc/self/status (Linux only)")


#: the stream of the RSS measurement: utterances of this split joined with pauses drawn from this range (ms),
#: streamed at this policy with a VAD whose segment-ending silence is longer than any pause of the stream (with the
#: utterances' own leading and trailing silence), so that no segment ends: one endless segment
RSS_SPLIT, RSS_PAUSE_MS, RSS_POLICY, RSS_MIN_SILENCE_MS = "tst-COMMON", (0.0, 100.0), "waitk:k=3", 1000.0


def _rss_child(model: str, data: str | None, split: str, minutes: float, pause_ms: tuple[float, float], policy: str,
               chunk_ms: float, seed: int, queue: Any) -> None:
    """In a fresh process: stream ``minutes`` of ``split``'s utterances (cycled, joined with pauses drawn from
    ``pause_ms``, all shorter than the VAD's minimum silence) through one :class:`LongFormTranslator` with the
    Silero VAD, sentence restarts and a segment cap longer than the stream (a safety net that never cuts);
    per minute: RSS, the translator's tensor elements and the mean compute per chunk (CPU time of this process,
    which a virtual machine's steal time or a neighbour's load does not inflate, and wall time). Puts a dict on
    ``queue``."""
    import time

    import numpy as np

    from mmst.evaluation.bundle import load_bundle
    from mmst.evaluation.frontend import read_utterance_audio
    from mmst.evaluation.utterances import load_utterances
    from mmst.simultaneous.longform import LongFormTranslator, SegmentEnd, state_numel
    from mmst.simultaneous.vad import StreamingVad

    torch.set_num_threads(1)
    bundle = load_bundle(model, data_dir=data)
    langs = list(bundle.tgt_langs)
    audios = [a for a in (read_utterance_audio(u) for u in load_utterances(bundle.data_dir, split, langs)) if a.size]
    rng = np.random.default_rng(seed)
    tr = bundle.translator(policy={lang: policy for lang in langs}, tgt_langs=langs)
    cap_s = minutes * 60.0 + 60.0
    lf = LongFormTranslator(tr, vad=StreamingVad(min_silence_ms=RSS_MIN_SILENCE_MS, max_segment_s=cap_s),
                            chunk_ms=chunk_ms, measure_state=False)
    chunk = int(round(chunk_ms * 16))
    total = int(minutes * 60 * 16000)
    buf, fed, i, minute = np.zeros(0, np.float32), 0, 0, 0
    rows, ends, restarts, words = [], [], 0, 0
    t_min, c_min, n_min = 0.0, 0.0, 0
    while fed < total:
        while buf.size < chunk:
            pause = np.zeros(int(rng.uniform(*pause_ms) * 16), np.float32)
            buf = np.concatenate([buf, audios[i % len(audios)], pause])
            i += 1
        t0, c0 = time.perf_counter(), time.process_time()
        out = lf.push(buf[:chunk])
        t_min += time.perf_counter() - t0
        c_min += time.process_time() - c0
        n_min += 1
        buf, fed = buf[chunk:], fed + chunk
        ends += [e for e in out if isinstance(e, SegmentEnd)]
        words += sum(1 for e in out if not isinstance(e, SegmentEnd))
        if fed >= (minute + 1) * 60 * 16000 or fed >= total:
            minute = min(minute + 1, fed / (60 * 16000))
            restarts = sum(len(e.restarts) for e in ends) + sum(len(s) for s in tr.sentences.values())
            rows.append({"minute": round(minute, 2), "rss_mib": round(_rss_mib(), 1), "state_elements": state_numel(tr),
                         "ms_per_chunk": round(1000.0 * t_min / max(1, n_min), 2),
                         "cpu_ms_per_chunk": round(1000.0 * c_min / max(1, n_min), 2), "restarts": restarts,
                         "words": words})
            t_min, c_min, n_min = 0.0, 0.0, 0
    queue.put({"model": model, "langs": langs, "policy": policy, "minutes": minutes, "pause_ms": list(pause_ms),
               "max_segment_s": cap_s, "segments_closed": len(ends), "cap_cuts": sum(1 for e in ends if e.forced),
               "encoder_left_chunks": int(bundle.model.cfg.encoder_left_chunks),
               "encoder_pos_enc_type": str(getattr(bundle.model.cfg, "encoder_pos_enc_type", "abs")), "per_minute": rows})


#: minutes per window of the per-chunk cost comparison (:func:`cost_growth`)
COST_WINDOW_MIN = 5


def cost_growth(rows: list[dict[str, Any]], window: int = COST_WINDOW_MIN) -> dict[str, Any]:
    """Per-chunk CPU cost at the end of an endless stream against its start: the median of ``cpu_ms_per_chunk``
    over the last ``window`` whole minutes and over minutes 2 .. 1 + ``window`` (minute 1 loads and warms up),
    and their ratio. Fewer than 2 + ``window`` rows: the windows shrink to what there is (at least one row each).

    >>> rows = [{"cpu_ms_per_chunk": x} for x in (50, 20, 21, 19, 22, 20, 30, 40, 21, 22, 23)]
    >>> cost_growth(rows, 3)
    {'cpu_ms_per_chunk_start': 20.0, 'cpu_ms_per_chunk_end': 22.0, 'cpu_ms_per_chunk_ratio': 1.1, 'cost_window_min': 3}
    """
    vals = [float(r["cpu_ms_per_chunk"]) for r in rows]
    w = max(1, min(window, (len(vals) - 1) // 2)) if len(vals) > 2 else 1
    start = float(statistics.median(vals[1:1 + w] if len(vals) > 1 else vals))
    end = float(statistics.median(vals[-w:]))
    return {"cpu_ms_per_chunk_start": round(start, 2), "cpu_ms_per_chunk_end": round(end, 2),
            "cpu_ms_per_chunk_ratio": round(end / max(start, 1e-9), 3), "cost_window_min": w}


def rss_no_pause(args) -> dict[str, Any]:
    """``rss_growth_mib_30min_no_pause``: RSS growth (MiB) from minute 2 to the end of an ``--rss-minutes`` stream
    with no pause that ends a segment, through ``--rss-model`` (a bounded-left-context model), measured in a
    child process (:func:`_rss_child`) so that nothing else this benchmark loaded counts. Returns the child's
    record plus ``rss_growth_mib`` and the growth of the per-chunk compute: the median CPU ms per chunk of the last
    :data:`COST_WINDOW_MIN` minutes over that of minutes 2 to 1 + :data:`COST_WINDOW_MIN` (one minute's mean swings
    with the machine; the medians of a few do not)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_rss_child, args=(args.rss_model, args.data, RSS_SPLIT, args.rss_minutes, RSS_PAUSE_MS,
                                                RSS_POLICY, args.source_segment_size, args.seed, queue))
    proc.start()
    rec = queue.get()
    proc.join()
    rows = rec["per_minute"]
    base = rows[1] if len(rows) > 1 else rows[0]
    rec["rss_growth_mib"] = round(rows[-1]["rss_mib"] - base["rss_mib"], 1)
    rec.update(cost_growth(rows))
    print(f"RSS, {rec['minutes']:g} min without a segment-ending pause ({args.rss_model}): minute 2 "
          f"{base['rss_mib']} MiB, end {rows[-1]['rss_mib']} MiB (growth {rec['rss_growth_mib']} MiB); ms per chunk "
          f"(CPU, median of {COST_WINDOW_MIN} minutes) {rec['cpu_ms_per_chunk_start']} -> {rec['cpu_ms_per_chunk_end']} "
          f"(x{rec['cpu_ms_per_chunk_ratio']}); {rows[-1]['restarts']} restarts, "
          f"{rec['cap_cuts']} cap cuts")
    return rec


def set_rss_growth(obj: dict[str, Any], rec: dict[str, Any]) -> None:
    """Put the RSS record in ``obj`` (``rss_no_pause``) and its growth in the summary key
    ``rss_growth_mib_30min_no_pause`` with its goal."""
    key = "rss_growth_mib_30min_no_pause"
    obj["rss_no_pause"] = rec
    summary = obj.setdefault("summary", {})
    summary[key] = rec["rss_growth_mib"]
    op, goal = GOALS[key]
    summary.setdefault("goals", {})[key] = {"goal": f"{op} {goal:g}", "met": rec["rss_growth_mib"] <= goal}
    summary.get("not_measured", {}).pop(key, None)


def rss_only(args, prov: dict[str, Any]) -> int:
    """``--rss-only``: measure :func:`rss_no_pause` and put it into the existing ``--out`` JSON (its own provenance
    ``prov``, taken when the run started, under ``rss_no_pause``; the talks' rows and provenance are kept)."""
    path = Path(args.out)
    if not path.is_file():
        raise SystemExit(f"--rss-only: {path} does not exist (run the benchmark once without --rss-only)")
    obj = json.loads(path.read_text())
    rec = rss_no_pause(args)
    rec["provenance"] = prov
    set_rss_growth(obj, rec)
    write_results(args.out, obj, indent=1, ensure_ascii=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table and write the JSON."""
    from mmst.corpora.long_talk import build_long_talk, write_long_talk
    from mmst.evaluation.bundle import load_bundle
    from mmst.evaluation.frontend import read_utterance_audio
    from mmst.evaluation.utterances import load_utterances

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    prov = run_record(" ".join(["python", "bench/bench_continuous.py", *argv]), depends_on=DEPENDS_ON)
    if args.rss_only:
        return rss_only(args, prov)
    torch.set_num_threads(args.threads)
    if args.note:
        prov["note"] = args.note
    langs_arg = args.tgt_langs.split(",") if args.tgt_langs else None
    models = {"quickstart": load_bundle(args.model, data_dir=args.data, tgt_langs=langs_arg)}
    langs = list(models["quickstart"].tgt_langs)
    if args.multisent_model:
        models["multisent"] = load_bundle(args.multisent_model, data_dir=args.data, tgt_langs=langs)
    wanted = [x.strip() for x in args.systems.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in {s[0] for s in SYSTEMS}]
    if unknown:
        raise SystemExit(f"bench_continuous.py: --systems: unknown {', '.join(unknown)} "
                         f"(known: {', '.join(s[0] for s in SYSTEMS)})")
    systems = [s for s in SYSTEMS if s[0] in wanted and s[1] in models]
    models = {m: b for m, b in models.items() if any(s[1] == m for s in systems)}
    policies = [x.strip() for x in args.policies.split(";") if x.strip()]
    data_dir = models["quickstart"].data_dir
    default_s = args.max_segment_s
    try:
        caps = parse_caps(args.max_segment_grid)
    except ValueError as e:
        raise SystemExit(f"bench_continuous.py: {e}") from None
    test_splits = [x.strip() for x in args.splits.split(",") if x.strip()]
    tune_split = args.tune_split.strip()
    if tune_split in test_splits:
        raise SystemExit(f"bench_continuous.py: --tune-split {tune_split} is also a test split (--splits): choose "
                         "on talks that are not reported")

    def talks(split: str, tmp: str, n_utts: int):
        """Per pause range: ``(lo, hi, talk, folder)``, the talk of ``n_utts`` utterances of ``split``."""
        utts = load_utterances(data_dir, split, langs, n_utts)
        audios = [read_utterance_audio(u) for u in utts]
        refs = {lang: [u["refs"][lang] or "" for u in utts] for lang in langs}
        for rng in args.pause_ranges.split(";"):
            lo, hi = (float(x) for x in rng.split(","))
            talk = build_long_talk(audios, refs, pause_s=(lo / 1000.0, hi / 1000.0), seed=args.seed)
            d = Path(tmp) / f"{split}_p{lo:g}_{hi:g}"
            write_long_talk(talk, d, "talk")
            yield lo, hi, talk, d

    def stream(split: str, lo: float, hi: float, talk: Any, d: Path, pol: str, runs: list[tuple]) -> dict[str, Any]:
        """Every run ``(kind, key, model, oracle, restart, min silence, cap)`` of one talk at one policy: a row."""
        row: dict[str, Any] = {"split": split, "pause_ms": [lo, hi], "audio_s": talk.duration_s, "policy": pol}
        for kind, name, m, oracle, restart, silence, cap in runs:
            res = row.setdefault(kind, {})[name] = run_talk(
                models[m], d, langs, args, oracle, restart, pol, silence,
                args.oracle_edge_ms if kind == "oracle_edge" else 0.0, cap)
            per = " ".join(f"{lang} {v['BLEU']:.1f}/{v['untranslated_speech_share'] or 0:.2f}"
                           for lang, v in res["per_lang"].items())
            print(f"{split} pauses {lo:g}-{hi:g} ms {pol} {kind} {name:18s} segments "
                  f"{res['n_segments']:3d} restarts {res['n_restarts']:3d} RTF {res['rtf']:.2f}  "
                  f"BLEU/untranslated: {per}", flush=True)
        return row

    rows, tuning, extra = [], None, []
    with tempfile.TemporaryDirectory() as tmp:
        if tune_split:  # every system, policy and cap on the tuning talks; the best is reported on the test talks
            tune_rows = []
            for lo, hi, talk, d in talks(tune_split, tmp, args.tune_utterances):
                for pol in policies:
                    runs = [("oracle", m, m, True, False, None, None) for m in models]
                    runs += [("vad", capped(name, cap, default_s), m, False, restart, None, cap)
                             for name, m, restart in systems for cap in caps]
                    tune_rows.append(stream(tune_split, lo, hi, talk, d, pol, runs))
            tuning = {"split": tune_split, **choose(tune_rows, langs, policies, systems, caps, default_s),
                      "rows": tune_rows}
            c = tuning["chosen"]
            print(f"chosen on {tune_split}: {c['system']} {c['policy']} (segment cap {c['max_segment_s']:g} s)")
            if c["max_segment_s"] != default_s:
                extra = [(c["system"], c["model"], c["restart"])]
        for split in test_splits:
            for lo, hi, talk, d in talks(split, tmp, args.utterances):
                for pol in policies:
                    runs = [("oracle", m, m, True, False, None, None) for m in models]
                    if args.oracle_edge_ms:
                        runs += [("oracle_edge", m, m, True, False, None, None) for m in models]
                    runs += [("vad", name, m, False, restart, None, None) for name, m, restart in systems]
                    if extra and pol == tuning["chosen"]["policy"]:
                        runs += [("vad", *extra[0][:2], False, extra[0][2], None, tuning["chosen"]["max_segment_s"])]
                    if args.merged_vad_min_silence_ms:
                        runs += [("vad_merged", name, m, False, restart, args.merged_vad_min_silence_ms, None)
                                 for name, m, restart in systems]
                    rows.append(stream(split, lo, hi, talk, d, pol, runs))
    summary = summarize(rows, langs, policies, [*systems, *extra], chosen=tuning["chosen"] if tuning else None,
                        chosen_on=tune_split or None)
    obj = {"summary": summary, "provenance": prov,
           "config": {"model": str(args.model), "multisent_model": args.multisent_model,
                      "data": str(data_dir), "splits": test_splits, "tgt_langs": langs,
                      "utterances": args.utterances, "policies": policies,
                      "systems": [s[0] for s in [*systems, *extra]],
                      "tune_split": tune_split or None, "tune_utterances": args.tune_utterances if tune_split else None,
                      "max_segment_grid": caps,
                      "restart_min_speech_ms": args.restart_min_speech_ms,
                      "restart_eos_chunks": args.restart_eos_chunks,
                      "vad_min_silence_ms": args.vad_min_silence_ms, "max_segment_s": args.max_segment_s,
                      "merged_vad_min_silence_ms": args.merged_vad_min_silence_ms,
                      "oracle_edge_ms": args.oracle_edge_ms,
                      "source_segment_size_ms": args.source_segment_size, "threads": args.threads, "seed": args.seed},
           "tuning": tuning, "rows": rows}
    for x in summary["systems"]:
        print(f"{x['system']:18s} {x['policy']:18s} BLEU ratio min {x['bleu_ratio_vs_oracle_min']:.3f} "
              f"StreamLAAL excess max {x['streamlaal_excess_ms_max'] or 0:.0f} ms untranslated max "
              f"{x['untranslated_share_max'] or 0:.3f} restarts {x['n_restarts']}")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("goals", "systems")}))
    if args.rss_model:
        set_rss_growth(obj, rss_no_pause(args))
    write_results(args.out, obj, indent=1, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
