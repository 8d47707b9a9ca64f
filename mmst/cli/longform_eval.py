"""Long-form evaluation: whole talks streamed as one stream each (VAD segmentation), scored by mWER
resegmentation (BLEU, StreamLAAL, StreamLAAL_CA).

Usage::

    mmst-eval-longform --model MODEL --audio talk.wav \\
        --refs de=talk.de,es=talk.es --segments talk.yaml --out OUT
    mmst-eval-longform --model MODEL --mustc-root ROOT --split tst-COMMON \\
        --tgt-langs de,es --policy alignatt --policy-args frames=4 --out OUT

Input: one or more recordings (``--audio``, repeatable; any rate, mono or stereo: resampled to 16 kHz
mono, with a message), their reference sentences per language (``--refs``, one sentence per line) and
the sentences' positions in the audio (``--segments``, MuST-C yaml ``- {duration: D, offset: O,
speaker_id: S, wav: talk.wav}``; with several recordings the ``wav`` field picks the recording).
Without ``--segments`` only BLEU is reported (StreamLAAL needs each sentence's start), with a message
saying so. Or a MuST-C release: ``--mustc-root ROOT --split tst-COMMON``, which reads each talk's wav,
yaml and text files from every ``en-XX`` pair.

Each talk streams in chunks of ``--source-segment-size`` ms through a Silero VAD (segments of at most
``--max-segment-s``) and the joint streaming translator (``--policy``/``--policy-args`` as in
``mmst-eval``, one setting). A language that ends its sentence while its segment goes on starts a new
one where the last ended (``--sentence-restart``, on by default; docs/longform.md). Outputs in ``--out``: ``<lang>/hypothesis.jsonl`` (one word
per line with its times), ``<lang>/instances.log`` (SimulEval-1.1 instances, one per reference sentence
after resegmentation), ``<lang>/omnisteval.jsonl`` with ``segments.yaml`` and ``references.txt`` (what
``omnisteval longform`` reads, one line per recording) and OmniSTEval's ``instances.resegmented.jsonl``,
``scores.json`` and ``scores.md`` (LongYAAL, LongYAAL_CA, BLEU and chrF after SoftSegmenter; BLEU, StreamLAAL,
StreamLAAL_CA, StreamAL,
StreamAL_CA and the untranslated speech share per language, VAD segments, sentence restarts,
real-time factor), and with ``--subtitles srt|vtt`` one subtitle
file per language per talk (``<lang>/<talk>.srt``). See docs/longform.md.

Errors (unreadable audio, reference files of different lengths, a bad yaml line, a bad option) print
one line naming the file and exit with status 1. Silence gives no output and no error; a talk without
detected speech is reported in scores.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from mmst.cli_help import (
    ArgumentParser,
    add_length_arguments,
    add_model_arguments,
    add_progress_arguments,
    add_restart_arguments,
    add_streaming_policy_arguments,
    add_vad_arguments,
    restart_options,
    run_cli,
)

logger = logging.getLogger("longform_eval")


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="mmst-eval-longform", description=__doc__)
    add_model_arguments(p, langs_default="those of --refs, or all of the model's")
    p.add_argument("--audio", action="append", default=None,
                   help="a long recording (repeat the option for several); any format soundfile reads")
    p.add_argument("--refs", default=None,
                   help="reference files per language, LANG=FILE,LANG=FILE (one sentence per line; all the "
                        "same number of lines)")
    p.add_argument("--segments", default=None,
                   help="MuST-C yaml with each reference sentence's offset and duration (seconds) in the audio; "
                        "needed for StreamLAAL")
    p.add_argument("--mustc-root", default=None, help="a MuST-C release root (ROOT/en-XX/data/<split>), instead "
                   "of --audio/--refs/--segments")
    p.add_argument("--split", default="tst-COMMON", help="MuST-C split with --mustc-root")
    add_streaming_policy_arguments(p)
    p.add_argument("--source-segment-size", type=float, default=320.0,
                   help="processing chunk in ms: the VAD and the translator run every this many ms of audio")
    add_vad_arguments(p)
    add_restart_arguments(p)
    p.add_argument("--oracle-segments", action="store_true",
                   help="segment at the --segments / yaml sentence boundaries instead of the VAD (gold "
                        "segmentation; one talk at a time); the VAD still scores speech, for the untranslated "
                        "speech share and the pauses of a sentence restart")
    add_length_arguments(p, min_len=False)
    p.add_argument("--eval-latency-unit", choices=["auto", "word", "char"], default="auto",
                   help="latency unit: auto = char for zh/ja, word otherwise")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch's choice)")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--subtitles", choices=["srt", "vtt"], default=None,
                   help="also write OUT/<lang>/<talk>.srt|vtt, one subtitle file per language per talk")
    p.add_argument("--subtitle-timing", choices=["emission", "source"], default="emission",
                   help="cue times: when the words were written (simultaneous captions) or the VAD segment's "
                        "span in the source")
    add_progress_arguments(p, log_level=False)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (1 with a one-line error for bad options or input)."""
    from mmst.evaluation.bundle import LoadError

    return run_cli(build_parser(), run, argv, errors=(LoadError, ValueError))


def _parse_refs(value: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in (value or "").split(","):
        if not entry.strip():
            continue
        lang, sep, path = entry.partition("=")
        if not sep or not lang.strip() or not path.strip():
            raise ValueError(f"--refs entry {entry!r}: expected LANG=FILE")
        out[lang.strip()] = path.strip()
    return out


def run(args: argparse.Namespace) -> int:
    """Load the model bundle and the talks, stream and score them (see the module docstring).

    Raises:
        mmst.evaluation.bundle.LoadError: bad checkpoint, DATA or languages.
        ValueError: bad options or input (:class:`mmst.evaluation.longform.LongFormInputError`).
    """
    import torch

    from mmst.evaluation.bundle import load_bundle
    from mmst.evaluation.longform import evaluate_talks, talks_from_files, talks_from_mustc
    from mmst.evaluation.quality import latency_units
    from mmst.simultaneous.longform import LongFormTranslator, OracleSegmenter
    from mmst.simultaneous.policy_spec import specs_from_args
    from mmst.simultaneous.vad import StreamingVad

    if bool(args.audio) == bool(args.mustc_root):
        raise ValueError("give either --audio (with optional --refs/--segments) or --mustc-root")
    if args.source_segment_size <= 0 or args.max_segment_s <= 0:
        raise ValueError("--source-segment-size and --max-segment-s must be > 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    refs = _parse_refs(args.refs)
    langs = [x.strip() for x in args.tgt_langs.split(",") if x.strip()] if args.tgt_langs else (list(refs) or None)
    if args.mustc_root and not langs:
        raise ValueError("--mustc-root needs --tgt-langs")
    missing = [lang for lang in (langs or []) if refs and lang not in refs]
    if missing:
        raise ValueError(f"--tgt-langs {', '.join(missing)} without a --refs file")
    _, specs, per_lang = specs_from_args(args, [args.waitk_lagging])
    bundle = load_bundle(args.model, data_dir=args.data, tgt_langs=langs, device=args.device,
                         quantize=args.quantize)
    langs = list(bundle.tgt_langs)
    if args.mustc_root:
        talks = talks_from_mustc(args.mustc_root, args.split, langs)
    else:
        talks = talks_from_files(args.audio, {lang: refs[lang] for lang in langs if lang in refs}, args.segments)
    units = latency_units(langs, args.eval_latency_unit)
    policy = {lang: per_lang.get(lang, specs[0]) for lang in langs}
    tr = bundle.translator(args.waitk_lagging, max_len_a=args.max_len_a, max_len_b=args.max_len_b,
                           beam=args.beam, policy=policy)
    config = {"checkpoint": str(args.model), "data": str(bundle.data_dir), "tgt_langs": langs,
              "policy": {lang: p.describe() for lang, p in policy.items()}, "beam": args.beam,
              "source_segment_size_ms": args.source_segment_size, "max_segment_s": args.max_segment_s,
              "segmentation": "oracle" if args.oracle_segments else "silero-vad",
              "vad": {"threshold": args.vad_threshold, "min_silence_ms": args.vad_min_silence_ms,
                      "speech_pad_ms": args.vad_speech_pad_ms},
              "sentence_restart": args.sentence_restart, "restart_min_speech_ms": args.restart_min_speech_ms,
              "restart_eos_chunks": args.restart_eos_chunks,
              "latency_units": units, "n_talks": len(talks), "subtitles": args.subtitles,
              "subtitle_timing": args.subtitle_timing, "quantize": args.quantize}
    restart = restart_options(args)
    if args.oracle_segments:  # gold boundaries of the first language's sentences
        if len(talks) != 1 or not talks[0].timed:
            raise ValueError("--oracle-segments needs one talk with sentence positions (one --audio with --segments)")
        sents = next(iter(talks[0].refs.values()))
        speech = StreamingVad(threshold=args.vad_threshold, min_silence_ms=args.vad_min_silence_ms,
                              speech_pad_ms=args.vad_speech_pad_ms)
        seg = OracleSegmenter([(s.offset_ms / 1000.0, (s.offset_ms + s.duration_ms) / 1000.0) for s in sents],
                              speech=speech)  # the VAD's speech probabilities only: untranslated speech, pauses
        lf = LongFormTranslator(tr, vad=seg, chunk_ms=args.source_segment_size, **restart)
    else:
        vad = StreamingVad(threshold=args.vad_threshold, min_silence_ms=args.vad_min_silence_ms,
                           speech_pad_ms=args.vad_speech_pad_ms, max_segment_s=args.max_segment_s)
        lf = LongFormTranslator(tr, vad=vad, max_segment_s=args.max_segment_s, chunk_ms=args.source_segment_size,
                                **restart)
    obj = evaluate_talks(lf, talks, langs, units, Path(args.out), config, progress=not args.no_progress,
                         subtitles=args.subtitles, subtitle_timing=args.subtitle_timing)
    for lang in langs:
        m = obj["per_lang"][lang]
        logger.info("%s: LongYAAL %s LongYAAL_CA %s BLEU %s chrF %s (SoftSegmenter); BLEU %s StreamLAAL %s StreamLAAL_CA "
                    "%s (mWER); untranslated speech share %s", lang, _f(m.get("LongYAAL")), _f(m.get("LongYAAL_CA")),
                    _f(m.get("SoftSeg_BLEU")), _f(m.get("SoftSeg_chrF")), _f(m.get("BLEU")), _f(m.get("StreamLAAL")),
                    _f(m.get("StreamLAAL_CA")), _f(m.get("untranslated_speech_share"), 3))
    logger.info("%d VAD segments, %d sentence restarts, RTF %s -> %s", obj["n_vad_segments"], obj["n_restarts"],
                _f(obj["rtf"], 3), Path(args.out) / "scores.md")
    return 0


def _f(v, nd: int = 2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
