"""Simultaneous (wait-k) evaluation of an mmst checkpoint with joint multilingual decoding.

Usage::

    mmst-eval --model MODEL --data DATA --split tst-COMMON \\
        --tgt-langs de,es --waitk-lagging 3 --source-segment-size 320 --out OUT
    mmst-eval ... --policy alignatt --policy-args frames=2,4,6,8 --out OUT
    mmst-eval ... --policy la --policy-args n=2 --beam 4 \\
        --policy-per-lang ja=alignatt:frames=4 --out OUT

Policies (``--policy``; ``docs/policies.md``): ``waitk`` (k), ``alignatt`` (frames, layer, heads, compat),
``edatt`` (alpha, frames, layer, heads, compat), ``la`` (n), ``holdn`` (n), ``ctcwaitk`` (k; ``ctc`` is its
deprecated alias). Several values for one
parameter (``--policy-args frames=2,4,6``, or ``--waitk-lagging 1,3,5`` for wait-k) sweep it in one run.

A thin command line over :mod:`mmst.evaluation` (:mod:`~mmst.evaluation.utterances`,
:mod:`~mmst.evaluation.frontend`, :mod:`~mmst.evaluation.runner`). Each utterance's audio is re-read from the manifest's ``wav``/``offset``/``duration`` columns
(``mmst.audio.load_audio``: any rate, mono or stereo -> 16 kHz mono), streamed in segments of
``--source-segment-size`` ms through ONE streaming translator that decodes every requested language
in lockstep (joint decoding), and timed exactly as SimulEval 1.1 times an agent.  Outputs:

- ``OUT/<lang>/instances.log``: SimulEval-1.1 instances (index, prediction, delays, elapsed,
  prediction_length, reference, source, source_length);
- ``OUT/scores.json`` and ``OUT/scores.md``: per-language and averaged BLEU, AL, LAAL, AP, DAL, ATD,
  StartOffset, EndOffset, each also computation-aware (``_CA``), and the real-time factor;
- with a sweep: ``OUT/<point>/...`` per point (``k<k>`` for wait-k, else the policy label such as
  ``alignatt-frames4``), plus the sweep summary ``OUT/scores.json`` / ``OUT/scores.md`` (one row per
  point; both name the policy and its parameters) and ``OUT/latency_quality.png`` /
  ``OUT/latency_quality_ca.png`` (BLEU vs AL and vs AL_CA per language).

``--offline`` decodes each full utterance with beam search (the quality upper bound; every word has
delay = source length).  Errors (unknown language, vocab mismatch, missing files) print one line and
exit with status 1; unreadable, empty or silent audio and missing references give warnings.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tqdm import tqdm

from mmst.cli_help import (
    ArgumentParser,
    add_length_arguments,
    add_model_arguments,
    add_progress_arguments,
    run_cli,
)

logger = logging.getLogger("simultaneous_eval")


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="mmst-eval", description=__doc__)
    add_model_arguments(p)
    p.add_argument("--split", default="tst-COMMON", help="manifest split to evaluate (DATA/<split>.tsv)")
    p.add_argument(
        "--waitk-lagging",
        default="3",
        help="wait-k lagging in pre-decision chunks; a comma list (1,3,5,7,9) sweeps k into OUT/k<k>/; "
        "'offline' = full-sentence decoding",
    )
    from mmst.simultaneous.policy_spec import add_policy_arguments

    add_policy_arguments(p, sweep=True)
    p.add_argument("--source-segment-size", type=float, default=320.0, help="source segment size in ms")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--offline", action="store_true", help="full-sentence beam search (quality upper bound)")
    p.add_argument("--beam", type=int, default=None,
                   help="beam size: --offline (default 5), or beam search while streaming with alignatt, edatt, "
                        "la, holdn (default 1 = greedy)")
    add_length_arguments(p)
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
    p.add_argument("--jobs", type=int, default=1,
                   help="processes that decode utterances side by side, each with --threads torch threads "
                        "(default 1; on 2 idle cores, --jobs 2 halves the wall time; the hypotheses do not "
                        "change). Each process times its own compute, so the computation-aware latencies "
                        "are those of --jobs processes sharing the machine")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--simuleval-compat", action="store_true",
                   help="count reference words as SimulEval 1.1.4 does (split on single spaces, so repeated or "
                        "trailing spaces add words) to reproduce its AL/LAAL/AP; default: whitespace-separated words")
    add_progress_arguments(p, log_level=False)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (1 with a one-line error for bad options or input)."""
    from mmst.evaluation.bundle import LoadError

    return run_cli(build_parser(), run, argv, errors=(LoadError, ValueError))


def run(args: argparse.Namespace) -> int:
    """Load the model bundle and the utterances, evaluate every k (see the module docstring).

    Raises:
        mmst.evaluation.bundle.LoadError: bad checkpoint, DATA, languages, manifest or audio.
        ValueError: bad ``--waitk-lagging`` or ``--source-segment-size``.
    """
    import torch

    from mmst.evaluation.bundle import LoadError, load_bundle
    from mmst.evaluation.frontend import read_utterance_audio
    from mmst.evaluation.quality import latency_units
    from mmst.evaluation.runner import run_sweep
    from mmst.evaluation.utterances import load_utterances
    from mmst.simultaneous.policy_spec import specs_from_args
    from mmst.simultaneous.waitk import parse_waitk_list

    if args.threads:
        torch.set_num_threads(args.threads)
    ks = [None] if args.offline else parse_waitk_list(args.waitk_lagging, "--waitk-lagging")
    settings: list = list(ks)
    swept, per_lang = ("k" if len(ks) > 1 else None), {}
    if args.offline or (args.policy is None and not args.policy_per_lang):
        specs_from_args(args, [3])  # --policy-args or an alias without --policy: a clear error
    else:
        swept, settings, per_lang = specs_from_args(args, ks)
    if args.source_segment_size <= 0:
        raise ValueError("--source-segment-size must be > 0")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    beam = args.beam if args.beam is not None else (5 if args.offline else 1)
    if beam < 1:
        raise ValueError(f"--beam must be >= 1, got {beam}")
    langs = [x.strip() for x in args.tgt_langs.split(",") if x.strip()] if args.tgt_langs else None
    bundle = load_bundle(args.model, data_dir=args.data, tgt_langs=langs, device=args.device,
                         quantize=args.quantize)
    langs = list(bundle.tgt_langs)
    unknown = [lang for lang in per_lang if lang not in langs]
    if unknown:
        raise ValueError(f"--policy-per-lang names {', '.join(unknown)}, not among the decoded languages {langs}")
    units = latency_units(langs, args.eval_latency_unit)
    utts = load_utterances(bundle.data_dir, args.split, langs, args.max_utterances)
    audios = [read_utterance_audio(u) for u in tqdm(utts, desc="audio", disable=args.no_progress)]
    if all(a.size == 0 for a in audios):
        raise LoadError(f"no readable audio in {args.split} ({len(utts)} utterances)")
    base_cfg = {
        "checkpoint": str(args.model), "data": str(bundle.data_dir), "split": args.split, "tgt_langs": langs,
        "source_segment_size_ms": args.source_segment_size, "max_len_a": args.max_len_a,
        "max_len_b": args.max_len_b, "min_len": args.min_len, "latency_units": units,
        "offline": bool(args.offline), "joint_decoding": True, "fbank": bundle.fbank_kwargs,
        "peak_normalize": bundle.peak_normalize, "simuleval_compat": bool(args.simuleval_compat),
        "n_utterances": len(utts), "quantize": args.quantize, "jobs": args.jobs,
    }
    run_sweep(bundle, utts, audios, settings, Path(args.out), units=units, segment_ms=args.source_segment_size,
              base_config=base_cfg, max_len_a=args.max_len_a, max_len_b=args.max_len_b, min_len=args.min_len,
              beam=beam, progress=not args.no_progress, swept=swept, per_lang=per_lang, jobs=args.jobs)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
