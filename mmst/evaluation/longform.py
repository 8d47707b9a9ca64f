"""Long-form evaluation: whole talks streamed as one stream each, scored by mWER resegmentation.

Inputs (:class:`Talk`): a recording and, optionally, its reference sentences per language, with
their positions in the audio (MuST-C yaml ``offset``/``duration``, seconds):

- :func:`talks_from_files`: ``--audio talk.wav --refs de=talk.de,es=talk.es --segments talk.yaml``
  (one line per reference sentence; several recordings share one yaml/text set, split by the yaml's
  ``wav`` field, as in MuST-C);
- :func:`talks_from_mustc`: every talk of a MuST-C release split (``ROOT/en-XX/data/<split>``), each
  language with its own pair's sentences.

:func:`evaluate_talks` streams each talk through a :class:`mmst.simultaneous.LongFormTranslator`
(VAD segmentation, any policy, joint decoding) and writes, under ``OUT``:

- ``OUT/<lang>/hypothesis.jsonl``: one word per line, ``{"talk", "text", "segment", "time_ms",
  "time_ca_ms"}`` (ms since the talk's start);
- ``OUT/<lang>/instances.log``: SimulEval-1.1 instances, one per reference sentence after
  resegmentation (delays relative to the sentence start; :mod:`mmst.evaluation.resegment`);
- with ``subtitles`` (``srt`` / ``vtt``): ``OUT/<lang>/<talk>.srt`` (or ``.vtt``), one subtitle file per
  language per talk (:mod:`mmst.simultaneous.subtitles`);
- ``OUT/<lang>/omnisteval.jsonl`` (one line per recording), ``segments.yaml``, ``references.txt`` and
  ``instances.resegmented.jsonl``: OmniSTEval's input and output; with sentence positions, LongYAAL,
  LongYAAL_CA, LongAL, LongLAAL (and ``_CA``), BLEU and chrF after SoftSegmenter resegmentation in
  ``scores.json`` (``SoftSeg_BLEU``, ``SoftSeg_chrF``; :mod:`mmst.evaluation.omnisteval_adapter`);
- ``OUT/scores.json`` and ``OUT/scores.md``: per language BLEU (resegmented, sacrebleu with the
  language's tokenizer), StreamLAAL, StreamLAAL_CA, StreamAL, StreamAL_CA, and
  ``untranslated_speech_share`` (VAD speech after a language ended its sentence in a segment it did not
  translate to its end, over all VAD speech; a warning above 10%); the number of VAD segments, sentence
  restarts and the real-time factor. Without sentence positions only BLEU is computed (and the reason is
  logged and written); without references, only the hypotheses, segments and RTF.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mmst.atomic import atomic_write_lines, atomic_write_text
from mmst.evaluation.resegment import RefSentence, resegment, stream_instances, timed_units

logger = logging.getLogger("mmst.evaluation.longform")

SAMPLE_RATE = 16000

#: Metrics of a long-form evaluation, in table order (latency in ms).
LONGFORM_METRICS = ("LongYAAL", "LongYAAL_CA", "SoftSeg_BLEU", "SoftSeg_chrF", "BLEU", "StreamLAAL",
                    "StreamLAAL_CA", "StreamAL", "StreamAL_CA")

#: scores key: speech after a language ended its sentence / all VAD speech (:func:`untranslated_speech`)
SHARE_KEY = "untranslated_speech_share"
#: a run warns (once) when a language's untranslated speech share is above this
SHARE_WARN = 0.10

NO_SEGMENTS_NOTE = ("no sentence positions (--segments): StreamLAAL needs the start and duration of each "
                    "reference sentence in the audio; only BLEU (after mWER resegmentation) is reported")


class LongFormInputError(ValueError):
    """Bad long-form input (unreadable audio, mismatched reference files, bad yaml); names file and line."""


@dataclass
class Talk:
    """One recording to stream, with its references.

    Attributes:
        id: talk id (the wav's stem).
        wav: audio path (any format and rate :func:`mmst.audio.load_audio` reads; resampled to 16 kHz).
        refs: ``{lang: [RefSentence, ...]}`` (``offset_ms``/``duration_ms`` NaN when unknown); empty =
            no references.
    """

    id: str
    wav: str
    refs: dict[str, list[RefSentence]] = field(default_factory=dict)

    @property
    def timed(self) -> bool:
        """True when every reference sentence has a position in the audio."""
        return bool(self.refs) and all(not np.isnan(s.offset_ms) for ss in self.refs.values() for s in ss)


def read_segments_yaml(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Segment lines of a MuST-C yaml: ``[{"offset": s, "duration": s, "wav": name, "line": n}, ...]``.

    Raises:
        LongFormInputError: missing file, or a bad line (message names file and line).
    """
    from mmst.corpora.mustc_layout import YamlLineError, parse_yaml_line

    p = Path(path)
    if not p.is_file():
        raise LongFormInputError(f"{p}: segments file not found")
    out = []
    for i, line in enumerate(p.read_text(encoding="utf-8").split("\n"), 1):
        s = line.strip()
        if not s or s == "---" or s.startswith("#"):
            continue
        try:
            d = parse_yaml_line(s, str(p), i)
        except YamlLineError as e:
            raise LongFormInputError(str(e)) from None
        if d["duration"] <= 0 or d["offset"] < 0:
            raise LongFormInputError(f"{p}:{i}: offset must be >= 0 and duration > 0, got "
                                     f"offset {d['offset']}, duration {d['duration']}")
        out.append({"offset": float(d["offset"]), "duration": float(d["duration"]), "wav": str(d["wav"]), "line": i})
    return out


def read_reference_files(refs: Mapping[str, str | os.PathLike]) -> dict[str, list[str]]:
    """``{lang: lines}`` of one reference file per language (one sentence per line).

    Raises:
        LongFormInputError: a missing or non-UTF-8 file, or files with different line counts (the
            message names every file and its count).
    """
    from mmst.corpora.mustc_layout import RawCorpusError, read_text_lines

    out = {}
    for lang, p in refs.items():
        if not Path(p).is_file():
            raise LongFormInputError(f"{p}: reference file for {lang} not found")
        try:
            out[lang] = [ln.strip() for ln in read_text_lines(p)]
        except RawCorpusError as e:
            raise LongFormInputError(str(e)) from None
    counts = {str(refs[lang]): len(lines) for lang, lines in out.items()}
    if len(set(counts.values())) > 1:
        raise LongFormInputError("reference files differ in line count: " +
                                 ", ".join(f"{p}: {n} lines" for p, n in counts.items()))
    return out


def talks_from_files(audio: Sequence[str | os.PathLike], refs: Mapping[str, str | os.PathLike] | None = None,
                     segments: str | os.PathLike | None = None) -> list[Talk]:
    """Talks from recordings, optional reference files and an optional MuST-C yaml.

    Without ``segments`` the references of all recordings are one list of sentences (scored against
    the recordings' hypotheses concatenated in order; BLEU only). With ``segments``, the yaml must have
    one line per reference line; each line goes to the recording whose file name is its ``wav``
    (with a single recording, every line goes to it).

    Raises:
        LongFormInputError: see :func:`read_reference_files` and :func:`read_segments_yaml`; yaml and
            references of different lengths; a yaml ``wav`` matching no recording; an audio file that
            does not exist.
    """
    for a in audio:
        if not Path(a).is_file():
            raise LongFormInputError(f"{a}: audio file not found")
    talks = [Talk(Path(a).stem, str(a)) for a in audio]
    if not refs:
        if segments is not None:
            logger.warning("--segments without --refs: nothing to score; ignored")
        return talks
    lines = read_reference_files(refs)
    n = len(next(iter(lines.values())))
    nan = float("nan")
    if segments is None:
        logger.warning(NO_SEGMENTS_NOTE)
        talks[0].refs = {lang: [RefSentence(t, nan, nan) for t in ls] for lang, ls in lines.items()}
        return talks
    segs = read_segments_yaml(segments)
    if len(segs) != n:
        raise LongFormInputError(f"{segments}: {len(segs)} segments but the reference files have {n} lines "
                                 f"({', '.join(str(p) for p in refs.values())})")
    by_name = {Path(t.wav).name: t for t in talks}
    for t in talks:
        t.refs = {lang: [] for lang in lines}
    for j, s in enumerate(segs):
        t = talks[0] if len(talks) == 1 else by_name.get(s["wav"])
        if t is None:
            raise LongFormInputError(f"{segments}:{s['line']}: wav {s['wav']!r} is none of the recordings "
                                     f"({', '.join(by_name)})")
        for lang, ls in lines.items():
            t.refs[lang].append(RefSentence(ls[j], s["offset"] * 1000.0, s["duration"] * 1000.0))
    return talks


def talks_from_mustc(root: str | os.PathLike, split: str, langs: Sequence[str]) -> list[Talk]:
    """Every talk of a MuST-C split, read from each ``ROOT/en-XX`` pair (the strict layout reader).

    Each language keeps its own pair's sentences and times. Talks missing from some pair are
    evaluated for the pairs that have them (with a warning).

    Raises:
        LongFormInputError: a missing pair or file, mismatched yaml/text line counts, a bad yaml line
            (:class:`mmst.corpora.mustc_layout.RawCorpusError`'s message: file, line and field).
    """
    from mmst.corpora.mustc_layout import RawCorpusError, read_pair_split

    talks: dict[str, Talk] = {}
    for lang in langs:
        try:
            segs = read_pair_split(root, lang, split, strict=True)[0]
        except RawCorpusError as e:
            raise LongFormInputError(str(e)) from None
        for s in segs:
            t = talks.setdefault(s.talk, Talk(s.talk, s.wav))
            if s.wav != t.wav and lang not in t.refs and os.path.getsize(s.wav) != os.path.getsize(t.wav):
                logger.warning("talk %s: %s differs from %s; the %s times refer to the first", t.id, s.wav, t.wav, lang)
            t.refs.setdefault(lang, []).append(RefSentence(s.tgt, s.offset * 1000.0, s.duration * 1000.0))
    for t in talks.values():
        for lang in langs:
            if lang not in t.refs:
                logger.warning("talk %s has no %s sentences in %s/%s", t.id, lang, root, split)
        for ss in t.refs.values():
            ss.sort(key=lambda s: s.offset_ms)
    return list(talks.values())


def read_talk_audio(path: str | os.PathLike) -> np.ndarray:
    """A whole recording as 16 kHz mono float32; a downmix or resampling is logged.

    Raises:
        LongFormInputError: unreadable or empty file (the message names it).
    """
    from mmst.audio import AudioError, audio_info, load_audio

    try:
        info = audio_info(path)
        if info.channels > 1 or info.sample_rate != SAMPLE_RATE:
            logger.warning("%s: %d channel(s) at %d Hz: %s to 16 kHz mono", path, info.channels, info.sample_rate,
                           "downmixed and resampled" if info.sample_rate != SAMPLE_RATE and info.channels > 1
                           else "resampled" if info.sample_rate != SAMPLE_RATE else "downmixed")
        return load_audio(path)
    except AudioError as e:
        raise LongFormInputError(f"cannot read audio: {e}") from None


@dataclass
class TalkRun:
    """The output of streaming one talk.

    Attributes:
        words: ``{lang: [LongFormWord, ...]}``.
        segments: the :class:`mmst.simultaneous.longform.SegmentEnd` events.
        audio_s: talk length in seconds; compute_s: wall-clock processing seconds.
        chunk_ms: wall-clock ms of each processing chunk, in stream order (``push`` calls of one chunk).
    """

    words: dict[str, list[Any]]
    segments: list[Any]
    audio_s: float
    compute_s: float
    chunk_ms: list[float] = field(default_factory=list)


def stream_talk(lf: Any, audio: np.ndarray, langs: Sequence[str], push_ms: float | None = None,
                on_chunk=None) -> TalkRun:
    """Stream ``audio`` (16 kHz float32) through a :class:`~mmst.simultaneous.LongFormTranslator`.

    Args:
        lf: the long-form translator (reset here).
        audio: the whole talk.
        langs: languages to collect.
        push_ms: size of each ``push`` (default: the translator's chunk, so each push is timed alone).
        on_chunk: optional ``f(position_s, ms)`` called after each push (benchmarks: cost vs position).

    Returns:
        :class:`TalkRun`.
    """
    from mmst.simultaneous.longform import SegmentEnd

    lf.reset()
    n = max(1, int(round((push_ms or lf.chunk_ms) * SAMPLE_RATE / 1000.0)))
    words: dict[str, list[Any]] = {lang: [] for lang in langs}
    segs: list[Any] = []
    chunk_ms: list[float] = []
    t_all = time.perf_counter()

    def take(evs):
        for e in evs:
            if isinstance(e, SegmentEnd):
                segs.append(e)
            elif e.lang in words:
                words[e.lang].append(e)

    for s in range(0, audio.size, n):
        t0 = time.perf_counter()
        take(lf.push(audio[s:s + n]))
        ms = (time.perf_counter() - t0) * 1000.0
        chunk_ms.append(ms)
        if on_chunk is not None:
            on_chunk(min(s + n, audio.size) / SAMPLE_RATE, ms)
    take(lf.finish())
    return TalkRun(words, segs, audio.size / SAMPLE_RATE, time.perf_counter() - t_all, chunk_ms)


def untranslated_speech(segments: Sequence[Any], langs: Sequence[str]) -> tuple[float, dict[str, float]]:
    """``(speech_ms, {lang: untranslated_ms})`` summed over a talk's
    :class:`~mmst.simultaneous.longform.SegmentEnd` s: the VAD speech inside the segments, and per language the
    speech after the point where it ended its last sentence before the segment closed (docs/longform.md)."""
    speech = sum(float(getattr(s, "speech_ms", 0.0)) for s in segments)
    lost = {lang: sum(float(getattr(s, "untranslated_speech_ms", {}).get(lang, 0.0)) for s in segments)
            for lang in langs}
    return speech, lost


def _hypothesis_lines(talk: Talk, ws: Sequence[Any]) -> list[str]:
    return [json.dumps({"talk": talk.id, "text": w.text, "segment": w.segment, "time_ms": round(w.time_ms, 3),
                        "time_ca_ms": round(w.time_ca_ms, 3)}, ensure_ascii=False) for w in ws]


def evaluate_talks(lf: Any, talks: Sequence[Talk], langs: Sequence[str], units: Mapping[str, str],
                   out_dir: str | os.PathLike, config: Mapping[str, Any] | None = None,
                   progress: bool = True, subtitles: str | None = None,
                   subtitle_timing: str = "emission") -> dict[str, Any]:
    """Stream every talk, write hypotheses, instances and scores (module docstring).

    Args:
        lf: a :class:`mmst.simultaneous.LongFormTranslator` decoding at least ``langs``.
        talks: talks to evaluate.
        langs: target languages to score.
        units: latency unit per language (``word`` / ``char``).
        out_dir: output directory.
        config: recorded in ``scores.json``.
        progress: a tqdm bar over talks.
        subtitles: ``srt`` or ``vtt`` to write a subtitle file per language per talk; None = none.
        subtitle_timing: ``emission`` (when the words were written) or ``source`` (the VAD segment's span).

    Returns:
        The ``scores.json`` object: ``per_lang`` (metrics + ``info``), ``average``, ``n_vad_segments``,
        ``rtf``, ``speech_s``, ``n_restarts``, ``talks`` (per talk: audio_s, n_vad_segments, speech_s,
        untranslated_speech_s per language, n_restarts), ``config``.

    Raises:
        LongFormInputError: an unreadable recording.
    """
    from tqdm import tqdm

    from mmst.evaluation.omnisteval_adapter import Recording, score_recordings
    from mmst.evaluation.quality import corpus_bleu
    from mmst.evaluation.scorer import ScoringError, average_scores, score_instances
    from mmst.simultaneous.subtitles import FORMATS, TIMINGS, write_subtitles

    if (subtitles is not None and subtitles not in FORMATS) or subtitle_timing not in TIMINGS:
        raise ValueError(f"subtitles must be one of {FORMATS} and their timing one of {TIMINGS}, "
                         f"got {subtitles!r}, {subtitle_timing!r}")
    out = Path(out_dir)
    hyp_lines: dict[str, list[str]] = {lang: [] for lang in langs}
    instances: dict[str, list[dict[str, Any]]] = {lang: [] for lang in langs}
    recordings: dict[str, list[Recording]] = {lang: [] for lang in langs}  # OmniSTEval's input
    untimed: dict[str, tuple[list[str], list[str]]] = {lang: ([], []) for lang in langs}
    talk_info: dict[str, Any] = {}
    notes: list[str] = []
    total_audio = total_compute = 0.0
    n_segments = 0
    speech_ms = 0.0
    lost_ms = {lang: 0.0 for lang in langs}
    untimed_mode = any(t.refs and not t.timed for t in talks)
    for talk in tqdm(talks, desc="talks", disable=not progress):
        audio = read_talk_audio(talk.wav)
        run = stream_talk(lf, audio, langs)
        if subtitles:  # a failure here costs this talk's subtitle files, never the scores
            try:
                write_subtitles(out, talk.id, run.words, run.segments, subtitles, subtitle_timing,
                                audio_ms=run.audio_s * 1000.0)
            except Exception as e:  # reported in scores.json/scores.md; the other talks go on
                msg = f"talk {talk.id}: subtitles not written: {type(e).__name__}: {e}"
                logger.warning(msg)
                notes.append(msg)
        total_audio += run.audio_s
        total_compute += run.compute_s
        n_segments += len(run.segments)
        talk_speech, talk_lost = untranslated_speech(run.segments, langs)
        speech_ms += talk_speech
        for lang in langs:
            lost_ms[lang] += talk_lost[lang]
        talk_info[talk.id] = {"audio_s": run.audio_s, "n_vad_segments": len(run.segments),
                              "rtf": run.compute_s / run.audio_s if run.audio_s else None,
                              "speech_s": talk_speech / 1000.0,
                              "untranslated_speech_s": {lang: ms / 1000.0 for lang, ms in talk_lost.items()},
                              "n_restarts": sum(len(getattr(s, "restarts", ())) for s in run.segments)}
        if not run.segments:
            msg = f"talk {talk.id}: no speech detected ({run.audio_s:.1f} s of audio): no output"
            logger.warning(msg)
            notes.append(msg)
        for lang in langs:
            ws = run.words[lang]
            hyp_lines[lang] += _hypothesis_lines(talk, ws)
            refs = talk.refs.get(lang) or []
            units_l = timed_units(ws, units[lang])
            recordings[lang].append(Recording(talk.wav, units_l, run.audio_s * 1e3, refs if talk.timed else ()))
            if untimed_mode:  # references without times: every talk's words, aligned to all references at once
                untimed[lang][0].extend(u.text for u in units_l)
                untimed[lang][1].extend(s.text for s in refs)
            elif refs:
                instances[lang] += stream_instances(units_l, refs, units[lang], talk.wav,
                                                    first_index=len(instances[lang]))
    per_lang: dict[str, dict[str, Any]] = {}
    for lang in langs:
        atomic_write_lines(out / lang / "hypothesis.jsonl", hyp_lines[lang])
        res: dict[str, Any] = {}
        info: dict[str, Any] = {"latency_unit": units[lang]}
        lyaal, lyaal_info = score_recordings(out / lang, recordings[lang], lang, units[lang])  # SoftSegmenter
        res.update(lyaal)
        info.update(lyaal_info)
        if instances[lang]:
            from mmst.evaluation.instances import write_instances

            write_instances(out / lang / "instances.log", instances[lang])
            info["n_sentences"] = len(instances[lang])
            try:
                sr = score_instances(instances[lang], lang, units[lang], computation_aware=True, omnisteval=False)
                m = sr.metrics
                if "BLEU" in m:
                    res["BLEU"] = m["BLEU"]
                for k in ("LAAL", "LAAL_CA", "AL", "AL_CA"):
                    if k in m:
                        res[f"Stream{k}"] = m[k]
                info.update(bleu_signature=sr.bleu_signature, empty_sentences=len(sr.empty_hypotheses),
                            n_scored_latency=sr.n_scored_latency)
            except ScoringError as e:
                info["error"] = str(e)
                logger.warning("%s: %s", lang, e)
                bleu = corpus_bleu([""] * len(instances[lang]), [i["reference"] for i in instances[lang]], lang)
                res["BLEU"] = bleu.score
        elif untimed[lang][1]:
            hyp, refs = untimed[lang]
            groups = resegment(hyp, refs, units[lang])
            from mmst.evaluation.latency import join_units

            sents = [join_units([hyp[i] for i in g], units[lang]) for g in groups]
            bleu = corpus_bleu(sents, refs, lang)
            res["BLEU"] = bleu.score
            info.update(bleu_signature=bleu.signature, n_sentences=len(refs), note=NO_SEGMENTS_NOTE)
            atomic_write_lines(out / lang / "resegmented.txt", sents)
        if speech_ms > 0:
            res[SHARE_KEY] = lost_ms[lang] / speech_ms
        per_lang[lang] = {**res, "info": info}
    high = {lang: d[SHARE_KEY] for lang, d in per_lang.items() if d.get(SHARE_KEY, 0.0) > SHARE_WARN}
    if high:  # once per run
        msg = (f"untranslated speech above {SHARE_WARN:.0%}: " + ", ".join(f"{lang} {v:.1%}" for lang, v in high.items())
               + " of the VAD speech came after a language had ended its sentence (see docs/longform.md)")
        logger.warning(msg)
        notes.append(msg)
    scored = {lang: {k: v for k, v in d.items() if k != "info"} for lang, d in per_lang.items()
              if any(k != "info" for k in d)}
    avg = average_scores(scored) if scored else {}
    obj: dict[str, Any] = {"per_lang": per_lang, "average": avg, "n_vad_segments": n_segments,
                           "rtf": total_compute / total_audio if total_audio else None,
                           "audio_s": total_audio, "compute_s": total_compute, "speech_s": speech_ms / 1000.0,
                           "n_restarts": sum(t["n_restarts"] for t in talk_info.values()),
                           "talks": talk_info, "notes": notes, "config": dict(config or {})}
    atomic_write_text(out / "scores.json", json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(out / "scores.md", _scores_md(obj, langs))
    return obj


def _scores_md(obj: Mapping[str, Any], langs: Sequence[str]) -> str:
    from mmst.evaluation.report import format_metrics_table

    rows = {lang: obj["per_lang"][lang] for lang in langs}
    if len(langs) > 1 and obj["average"]:
        rows["avg"] = obj["average"]
    md = ["# Long-form evaluation", "",
          "Whole talks streamed as one stream each, cut by the VAD. LongYAAL, SoftSeg_BLEU, SoftSeg_chrF: "
          "OmniSTEval (IWSLT 2026) after SoftSegmenter resegmentation; LongYAAL = mean over reference sentences "
          "of YAAL up to the end of the recording's references. BLEU, StreamLAAL, StreamAL: hypotheses resegmented "
          "onto the reference sentences by mWER alignment; StreamLAAL = mean over reference sentences of LAAL with "
          "delays from each sentence's start; `_CA` = computation-aware (real-time arrival). BLEU: sacrebleu.", "",
          format_metrics_table(rows, LONGFORM_METRICS, ca=False), "",
          f"Talks: {len(obj['talks'])}, audio {obj['audio_s']:.1f} s, VAD segments: {obj['n_vad_segments']}, "
          f"real-time factor: {obj['rtf'] if obj['rtf'] is None else round(obj['rtf'], 3)}", ""]
    shares = {lang: obj["per_lang"][lang].get(SHARE_KEY) for lang in langs}
    if any(v is not None for v in shares.values()):
        md += [f"Untranslated speech share ({obj.get('speech_s', 0.0):.1f} s of VAD speech; speech after a language "
               f"ended its sentence, in segments it did not translate to their end; sentence restarts: "
               f"{obj.get('n_restarts', 0)}): "
               + ", ".join(f"{lang} {v:.1%}" for lang, v in shares.items() if v is not None), ""]
    for lang in langs:
        note = obj["per_lang"][lang]["info"].get("note") or obj["per_lang"][lang]["info"].get("error")
        if note:
            md += [f"- {lang}: {note}"]
    md += [f"- {n}" for n in obj["notes"]]
    if obj["config"]:
        md += ["", "## Configuration", ""] + [f"- {k}: `{v}`" for k, v in obj["config"].items()]
    return "\n".join(md) + "\n"
