"""Stream audio files that have no translation through a trained model and report the hypotheses.

For input-path checks on real recordings without references (e.g. ``../shared/data/en_asr_only``:
44.1 kHz stereo 24-bit FLAC and 16 kHz mono FLAC). BLEU is not defined there, so this prints and
writes, per file and target language, the streamed hypothesis with each word's delay (ms of source
audio read when the word was written), plus the real-time factor.

Usage::

    mmst-transcribe-stream --model exp/synthetic/model_export \\
        --tsv ../shared/data/en_asr_only/en_asr_only.tsv --tgt-langs de,es --waitk-lagging 3 --out OUT

The TSV needs a header with columns ``id`` and ``audio`` (a path, relative to the TSV's folder or
absolute); an ``en`` column, when present, is copied into the output as the English transcript.
Writes ``OUT/hypotheses.jsonl`` (one JSON per file and language) and ``OUT/hypotheses.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import sys
from pathlib import Path

from mmst.cli_help import ArgumentParser, add_model_arguments


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of ``mmst-transcribe-stream``."""
    p = ArgumentParser(prog="mmst-transcribe-stream", description=__doc__)
    add_model_arguments(p)
    p.add_argument("--tsv", required=True, help="TSV with a header and columns id, audio [, en]")
    p.add_argument("--waitk-lagging", default="3",
                   help="wait-k lag in pre-decision chunks, or 'offline' for full-sentence decoding")
    from mmst.simultaneous.policy_spec import add_policy_arguments

    add_policy_arguments(p)
    p.add_argument("--beam", type=int, default=1,
                   help="beam search while streaming (alignatt, edatt, la, holdn); 1 = greedy")
    p.add_argument("--source-segment-size", type=float, default=320.0, help="source segment size in ms")
    p.add_argument("--max-len-b", type=int, default=200, help="maximum tokens written per language")
    p.add_argument("--out", required=True, help="output folder for hypotheses.jsonl and hypotheses.md")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status (1 on a clear input error)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from mmst.atomic import atomic_write_lines, atomic_write_text
    from mmst.audio import AudioError, load_audio
    from mmst.evaluation.bundle import LoadError, load_bundle
    from mmst.evaluation.streaming import stream_utterance

    tsv = Path(args.tsv)
    if not tsv.is_file():
        print(f"error: {tsv}: no such file", file=sys.stderr)
        return 1
    with tsv.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    for lineno, r in enumerate(rows, start=2):
        for col in ("id", "audio"):
            if not r.get(col):
                print(f"error: {tsv}:{lineno}: missing field '{col}'", file=sys.stderr)
                return 1
    langs = args.tgt_langs.split(",") if args.tgt_langs else None
    from mmst.simultaneous.policy_spec import specs_from_args

    waitk = None if args.waitk_lagging == "offline" else int(args.waitk_lagging)
    try:
        swept, specs, per_lang = specs_from_args(args, [waitk])
        if swept is not None:
            raise ValueError(f"give one value for {swept} (sweeps are for mmst-eval)")
        bundle = load_bundle(args.model, args.data, langs, quantize=args.quantize)
        policy = None if waitk is None and args.policy is None else {
            lang: per_lang.get(lang, specs[0]) for lang in bundle.tgt_langs}
        translator = bundle.translator(waitk, max_len_b=args.max_len_b, beam=args.beam, policy=policy)
    except (LoadError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if policy is not None:
        print("policy: " + "; ".join(f"{lang}: {translator.policies[lang].describe()}" for lang in bundle.tgt_langs))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for r in rows:
        path = Path(r["audio"])
        if not path.is_absolute():
            path = tsv.parent / path
        try:
            audio = load_audio(path)
        except AudioError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        res = stream_utterance(translator, audio, bundle.tgt_langs, segment_ms=args.source_segment_size,
                               whole=waitk is None, utt_id=r["id"])
        rtf = res.compute_s * 1000.0 / max(res.source_length_ms, 1e-9)
        for lang in bundle.tgt_langs:
            ls = res.per_lang[lang]
            records.append({"id": r["id"], "lang": lang, "en": r.get("en", ""),
                            "prediction": ("" if lang in ("ja", "zh") else " ").join(ls.units), "delays": ls.delays,
                            "source_length_ms": res.source_length_ms, "rtf": rtf,
                            "policy": None if policy is None else translator.policies[lang].describe()})
    atomic_write_lines(out / "hypotheses.jsonl", (json.dumps(x, ensure_ascii=False) for x in records))
    lines = ["| id | lang | source (s) | RTF | hypothesis |", "|---|---|---|---|---|"]
    for x in records:
        lines.append(f"| {x['id']} | {x['lang']} | {x['source_length_ms'] / 1000:.2f} | {x['rtf']:.3f} | "
                     f"{x['prediction'] or '(empty)'} |")
    md = "\n".join(lines) + "\n"
    atomic_write_text(out / "hypotheses.md", md)
    print(md)
    print(f"wrote {out / 'hypotheses.jsonl'} and {out / 'hypotheses.md'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
