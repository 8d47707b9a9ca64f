"""Turn a TSV of real recordings (id, audio path, translations...) into an evaluation DATA directory.

The output has the same layout as mmst-prep-multiway's: ``<split>.tsv`` (columns id, audio, n_frames,
speaker, src_text, tgt_text_<lang>..., wav, offset, duration), ``<split>_st_<lang>.tsv``,
``fbank80.zip``, ``gcmvn.npz``, SentencePiece models, ``config.yaml``, ``prep_report.json``. The split
is never filtered (it is test data): a bad clip (unreadable, silent, or decoding to a length that
differs from the list's ``duration_s`` by more than 0.1 s, e.g. a truncated Ogg/Opus file) is an
error naming each bad row, unless ``--skip-bad`` is given: then those rows are left out (every other
row keeps its own translations), each one is logged with its reason and listed under
``skipped_bad_audio`` in ``prep_report.json`` (and counted in the split's ``rows_in`` and, as
``bad_audio``, in its ``dropped``). Near-silent clips (peak below -40 dBFS) are kept with a
warning.

Use ``--vocab-from DATA_TRAIN`` so a model trained on DATA_TRAIN can be evaluated: its vocabularies
and gcmvn.npz are copied instead of being estimated on the evaluation list itself (without it the
list's own text and audio are used, which is only fine for smoke tests).

Example::

    mmst-prep-audio-list --tsv ../shared/data/fleurs_flores/fleurs_flores.tsv \\
        --out data/fleurs --tgt-langs de,es,fr,ja --vocab-from data/synth
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from mmst.cli_help import PREP_LOG_FORMAT, ArgumentParser, add_progress_arguments, run_cli
from mmst.corpora.audiolist import AudioListError, drop_bad_audio, read_audio_list
from mmst.corpora.multiway import BuildError, build_from_rows, format_summary, vocab_source_config

log = logging.getLogger("prep_audio_list")


def build_parser() -> ArgumentParser:
    """Command-line options (see ``--help``)."""
    p = ArgumentParser(prog="mmst-prep-audio-list", description=__doc__.split("\n\n")[0])
    p.add_argument("--tsv", required=True,
                   help="TSV with header: id, audio (path, relative to the TSV's folder), <src-col>, one column per "
                        "language; other columns ignored")
    p.add_argument("--out", required=True, help="output DATA directory")
    p.add_argument("--tgt-langs", default=None,
                   help="comma-separated target language columns; default: the --vocab-from source's languages "
                        "present in the TSV, else every language-code column except --src-col")
    p.add_argument("--src-col", default="en", help="column holding the English transcript (src_text)")
    p.add_argument("--split", default=None, help="split name of the manifest (default: TSV file stem)")
    p.add_argument("--vocab-from", default=None,
                   help="the training DATA directory, or an exported model folder, whose spm_*.model and gcmvn.npz "
                        "are reused")
    p.add_argument("--vocab-size", type=int, default=None,
                   help="SentencePiece size when no --vocab-from (default automatic)")
    p.add_argument("--per-lang-vocab", action="store_true", help="also per-language models (no --vocab-from)")
    p.add_argument("--jobs", type=int, default=1, help="feature extraction processes")
    p.add_argument("--dither", type=float, default=1.0,
                   help="deterministic dither std in 16-bit units (1.0 = one LSB; same default as mmst-prep-multiway so eval "
                        "features match training features)")
    p.add_argument("--peak-normalize", type=float, default=None, metavar="PEAK",
                   help="scale each clip towards peak amplitude PEAK (e.g. 0.5) before fbank with the causal "
                        "running-peak gain (mmst.features.CausalPeakGain) that the streaming evaluation and the "
                        "SimulEval agent apply too; off by default. "
                        "Log-mel features shift by 2*ln(gain) under a gain change, which global CMVN does not "
                        "remove, so very quiet real clips (FLEURS peaks 0.003-0.04) can be brought to the level of "
                        "synthetic training speech. Record it with the results.")
    p.add_argument("--skip-bad", action="store_true",
                   help="leave out bad clips (unreadable, silent, or shorter/longer than duration_s by more than "
                        "0.1 s) with a report naming each one and its reason, instead of stopping; off by default")
    add_progress_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns 0 ok, 1 bad input, 2 bad arguments."""
    return run_cli(build_parser(), run, argv, errors=(AudioListError, BuildError), log_format=PREP_LOG_FORMAT,
                   error_log=log)


def run(args: argparse.Namespace) -> int:
    """Check the list's audio and build the DATA directory (see the module docstring); returns 0, or 2 for
    bad arguments.

    Raises:
        mmst.corpora.audiolist.AudioListError: a bad list or bad audio (without ``--skip-bad``).
        mmst.corpora.multiway.BuildError: the build failed (the message names the file).
    """
    if args.jobs < 1:
        log.error("--jobs must be >= 1")
        return 2
    split = args.split or os.path.splitext(os.path.basename(args.tsv))[0]
    langs = [x.strip() for x in args.tgt_langs.split(",") if x.strip()] if args.tgt_langs else None
    if langs is None and args.vocab_from:
        from mmst.data.manifest import read_manifest_header

        header = read_manifest_header(args.tsv)
        langs = [lang for lang in vocab_source_config(args.vocab_from)["tgt_langs"] if lang in header]
        if not langs:
            raise AudioListError(f"{args.tsv}: none of the --vocab-from languages is a column")
    rows, langs = read_audio_list(args.tsv, langs, args.src_col)
    if not rows:
        raise AudioListError(f"{args.tsv}: no data rows")
    rows, skipped = drop_bad_audio(rows, args.skip_bad, progress=not args.no_progress)
    if not rows:
        raise AudioListError(f"{args.tsv}: every clip is bad audio")
    report = build_from_rows(
        {split: rows}, args.out, langs, jobs=args.jobs, no_filter_splits=[split],
        extra_report={"tsv": os.path.abspath(args.tsv), "skipped_bad_audio": skipped},
        dropped_before={split: {"bad_audio": len(skipped)}},
        vocab_size=args.vocab_size, per_lang_vocab=args.per_lang_vocab, vocab_from=args.vocab_from,
        dither=args.dither, peak_normalize=args.peak_normalize, fit_split=split,
        progress=not args.no_progress, tool="prep_audio_list",
    )
    if args.vocab_from is None:
        log.warning("no --vocab-from: vocabulary and gcmvn were estimated on the evaluation list itself")
    print(format_summary(report))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
