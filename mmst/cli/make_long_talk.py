"""Build a long synthetic talk from a DATA split: its utterances joined with pauses.

Usage::

    mmst-make-long-talk --data DATA --split tst-COMMON --minutes 2.5 --out TALKDIR

Reads each utterance's audio from the manifest (``wav``/``offset``/``duration``), joins them in
manifest order with pauses drawn uniformly from ``--pause-ms`` until the talk lasts ``--minutes``
(cycling through the split when it is shorter), and writes ``OUT/NAME.wav``, ``OUT/NAME.yaml`` (MuST-C segment lines) and
``OUT/NAME.<lang>`` (references), the input of ``mmst-eval-longform --audio OUT/NAME.wav
--segments OUT/NAME.yaml --refs de=OUT/NAME.de,...``. A thin command line over
:mod:`mmst.corpora.long_talk`.
"""

from __future__ import annotations

import argparse
import logging
import sys

from mmst.cli_help import ArgumentParser


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="mmst-make-long-talk", description=__doc__)
    p.add_argument("--data", required=True, help="DATA directory with <split>.tsv")
    p.add_argument("--split", default="tst-COMMON", help="manifest split whose utterances make the talk")
    p.add_argument("--tgt-langs", default=None, help="comma-separated reference languages (default: all columns)")
    p.add_argument("--minutes", type=float, default=0.0,
                   help="talk length in minutes: utterances in manifest order (cycled when the split is shorter) until "
                   "this long (0 = every utterance once)")
    p.add_argument("--max-utterances", type=int, default=None, help="use at most this many utterances")
    p.add_argument("--pause-ms", default="300,800", help="shortest,longest pause between utterances in ms")
    p.add_argument("--seed", type=int, default=0, help="seed of the pause lengths")
    p.add_argument("--name", default="talk", help="file stem of the outputs")
    p.add_argument("--out", required=True, help="output directory")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; 1 with a one-line error for bad options or input."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)
    from mmst.corpora.long_talk import build_long_talk, write_long_talk
    from mmst.data.manifest import read_manifest
    from mmst.evaluation.bundle import LoadError
    from mmst.evaluation.frontend import read_utterance_audio
    from mmst.evaluation.utterances import load_utterances

    try:
        lo, hi = (float(x) / 1000.0 for x in args.pause_ms.split(","))
        langs = args.tgt_langs.split(",") if args.tgt_langs else None
        if langs is None:
            from pathlib import Path

            rows = read_manifest(Path(args.data) / f"{args.split}.tsv")
            langs = [c[len("tgt_text_"):] for c in (rows[0] if rows else {}) if c.startswith("tgt_text_")]
        utts = load_utterances(args.data, args.split, langs, args.max_utterances)
        audios = [read_utterance_audio(u) for u in utts]
        talk = build_long_talk(audios, {lang: [u["refs"][lang] or "" for u in utts] for lang in langs},
                               pause_s=(lo, hi), duration_s=args.minutes * 60.0, seed=args.seed)
        paths = write_long_talk(talk, args.out, args.name)
    except (LoadError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    logging.info("%s: %.1f s, %d utterances (%s)", paths["wav"], talk.duration_s, len(talk.order),
                 ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
