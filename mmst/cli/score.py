"""Score a SimulEval 1.1 ``instances.log`` (sacrebleu BLEU and SimulEval-1.1 latency metrics), or a long-form
``omnisteval.jsonl`` (LongYAAL after SoftSegmenter and StreamLAAL after mWER).

Usage::

    mmst-score --instances OUT/de/instances.log --tgt-langs de --computation-aware
    mmst-score --instances simuleval_out/instances.log --tgt-langs ja --json
    mmst-score --hypothesis-file OUT/de/omnisteval.jsonl --segments talk.yaml --refs talk.de --tgt-langs de

Prints BLEU (with the sacrebleu signature), chrF, YAAL, AL, LAAL, AP, DAL, ATD, StartOffset, EndOffset,
OmniSTEval's degeneracy diagnostics (SWF, EFSW, DSPTV and "likely degenerate" when |DSPTV| > 20) and, with
``--computation-aware``, the latency metrics from ``elapsed`` (``YAAL_CA``, ``AL_CA``, ...). chrF, YAAL and the
diagnostics are OmniSTEval's own numbers (``omnisteval shortform`` on the same file gives them).  Unlike SimulEval
1.1.4 (SimulEval issue 44), the plain metrics always come from ``delays``, so one run gives both.  The
reference length in AL/LAAL/AP is its number of whitespace-separated words; SimulEval 1.1.4 counts
``len(ref.split(" "))`` instead (``--simuleval-compat`` to reproduce it).
``--json`` prints one JSON object ``{"BLEU": .., "AL": .., "AL_CA": .., ...}`` on stdout; notes and
warnings go to stderr.  Empty hypotheses are reported, counted as "" in BLEU and left out of latency
(as SimulEval does); a file where every hypothesis is empty is an error (exit status 1).
Definitions: see ``mmst/evaluation/latency.py`` and ``docs/evaluation.md``.

Long form (``--hypothesis-file``, one JSON line per recording with ``source``, ``prediction``, ``delays``,
``elapsed`` and ``source_length`` in ms, as ``mmst-eval-longform`` writes it; ``--segments``, a MuST-C yaml with
each reference sentence's position; ``--refs``, the sentences, one a line): prints LongYAAL, LongYAAL_CA,
LongAL, LongLAAL, BLEU and chrF after SoftSegmenter resegmentation (OmniSTEval's, the numbers ``omnisteval
longform`` gives on the same files), and BLEU, StreamLAAL, StreamLAAL_CA and StreamAL after mWER
resegmentation (mmst's, as ``mmst-eval-longform`` computes them). See ``docs/longform.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from mmst.cli_help import ArgumentParser
from mmst.evaluation.instances import InstancesFormatError, read_instances
from mmst.evaluation.latency import LATENCY_METRICS
from mmst.evaluation.report import format_metrics_table
from mmst.evaluation.scorer import ScoringError, score_instances


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of ``mmst-score``."""
    p = ArgumentParser(prog="mmst-score", description=__doc__)
    p.add_argument("--instances", default=None, help="SimulEval 1.1 instances.log (one JSON per line)")
    p.add_argument("--hypothesis-file", default=None,
                   help="instead of --instances: a long-form hypothesis, one JSON line per recording with source, "
                        "prediction, delays, elapsed and source_length in ms (mmst-eval-longform's "
                        "<lang>/omnisteval.jsonl); needs --segments and --refs")
    p.add_argument("--segments", default=None,
                   help="with --hypothesis-file: MuST-C yaml with each reference sentence's offset and duration "
                        "(seconds) and wav (the recording)")
    p.add_argument("--refs", default=None,
                   help="with --hypothesis-file: the reference sentences, one a line, in the order of --segments")
    p.add_argument(
        "--tgt-langs",
        default=None,
        help="the target language code (one: an instances.log holds one language); chooses the BLEU tokenizer "
        "(zh: zh, ja: ja-mecab, else 13a) and the default latency unit (char for zh/ja, word otherwise)",
    )
    p.add_deprecated_alias("--tgt-lang", "--tgt-langs")
    p.add_argument(
        "--computation-aware",
        action="store_true",
        help="also report computation-aware metrics (<metric>_CA) computed from 'elapsed'",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object {metric: value} on stdout")
    p.add_argument(
        "--eval-latency-unit",
        choices=["word", "char"],
        default=None,
        help="latency unit (default: char for zh/ja, word otherwise); must match how the log was written",
    )
    p.add_argument(
        "--no-use-ref-len",
        action="store_true",
        help="use the hypothesis length instead of the reference length in AL/LAAL/AP (SimulEval option)",
    )
    p.add_argument(
        "--simuleval-compat",
        action="store_true",
        help="count reference words as SimulEval 1.1.4 does, len(ref.split(' ')): repeated, leading or trailing "
        "spaces add empty words and change AL/LAAL/AP; use it only to reproduce SimulEval's numbers "
        "(default: whitespace-separated words, len(ref.split()))",
    )
    p.add_argument(
        "--sacrebleu-tokenizer",
        default=None,
        help="override the sacrebleu tokenizer chosen from --tgt-langs (e.g. 13a, zh, ja-mecab, char, intl)",
    )
    p.add_argument(
        "--input-type",
        choices=["speech", "text"],
        default="speech",
        help="source type of the log (ATD pseudo-token size: 300 ms for speech, 1 token for text)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status (0 ok, 1 error)."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.tgt_langs is not None and "," in args.tgt_langs:
        p.error(f"--tgt-langs {args.tgt_langs}: give one language (an instances.log holds one)")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s", stream=sys.stderr)
    if (args.instances is None) == (args.hypothesis_file is None):
        p.error("give --instances (segmented) or --hypothesis-file with --segments and --refs (long form)")
    if args.hypothesis_file is not None:
        if not (args.segments and args.refs):
            p.error("--hypothesis-file needs --segments and --refs")
        return _main_longform(args)
    try:
        instances = read_instances(args.instances)
        res = score_instances(
            instances,
            tgt_lang=args.tgt_langs,
            latency_unit=args.eval_latency_unit,
            computation_aware=args.computation_aware,
            use_ref_len=not args.no_use_ref_len,
            tokenize=args.sacrebleu_tokenizer,
            input_type=args.input_type,
            simuleval_compat=args.simuleval_compat,
        )
    except (OSError, InstancesFormatError, ScoringError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if res.missing_references:
        print(f"note: {len(res.missing_references)} instances have no reference (left out of BLEU)", file=sys.stderr)
    if res.bleu_note:
        print(f"note: {res.bleu_note}", file=sys.stderr)
    if args.json:
        print(json.dumps(res.metrics))
        return 0
    order = ["BLEU", "chrF", "YAAL"] + list(LATENCY_METRICS) + ["SWF", "EFSW", "DSPTV"]
    print(f"instances: {res.n_instances} (latency over {res.n_scored_latency}); latency unit: {res.latency_unit}")
    if res.bleu_signature:
        print(f"sacrebleu: {res.bleu_signature}")
    rows = {m: {"value": res.metrics.get(m), "computation-aware": res.metrics.get(f"{m}_CA")} for m in order}
    cols = ["value", "computation-aware"] if args.computation_aware else ["value"]
    print(format_metrics_table(rows, cols, ca=False, row_header="metric"))
    if "likely_degenerate" in res.metrics:
        print(f"likely degenerate policy (|DSPTV| > 20, OmniSTEval): {'YES' if res.metrics['likely_degenerate'] else 'no'}")
    return 0



def _main_longform(args: argparse.Namespace) -> int:
    """``--hypothesis-file``: both resegmentations of a long-form hypothesis, printed side by side."""
    from mmst.evaluation.longform_files import score_longform_files

    try:
        res = score_longform_files(args.hypothesis_file, args.segments, args.refs, args.tgt_langs,
                                   args.eval_latency_unit, args.sacrebleu_tokenizer)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(res))
        return 0
    soft = ["LongYAAL", "LongAL", "LongLAAL", "SoftSeg_BLEU", "SoftSeg_chrF"]
    rows = {m: {"value": res.get(m), "computation-aware": res.get(f"{m}_CA")} for m in soft}
    rows.update({m: {"value": res.get(m), "computation-aware": res.get(f"{m}_CA")}
                 for m in ("BLEU", "StreamLAAL", "StreamAL")})
    print("SoftSegmenter (OmniSTEval): LongYAAL, LongAL, LongLAAL, SoftSeg_BLEU, SoftSeg_chrF; "
          "mWER (mmst): BLEU, StreamLAAL, StreamAL")
    print(format_metrics_table(rows, ["value", "computation-aware"], ca=False, row_header="metric"))
    return 0

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
