"""Add speed-perturbed feature copies (0.9/1.0/1.1, soxr) of a split to a multi-way DATA directory.

Usage::

    mmst-speed-perturb --data DATA --split train --factors 0.9,1.0,1.1 --jobs 2
    mmst-train --config conf.yaml --data DATA --save-dir MODEL_DIR "data.augment.speed_perturb=[0.9,1.0,1.1]"

Reads each ``<split>.tsv`` row's source audio (``wav``, ``offset``, ``duration``), plays it ``f`` times
faster (soxr resampling from ``16000 f`` to 16000 Hz, as ``sox speed``), computes fbank with the DATA's
dither settings, and writes ``fbank80_<split>_sp.zip``, ``<split>_sp.tsv`` (originals plus copies, each
with its own ``n_frames``), a ``speed_perturb`` entry in ``config.yaml`` and ``speed_perturb_<split>.json``.
A rerun reuses cached copies. See ``mmst/corpora/speed_perturb.py``. Prints the report as JSON. Exit status
1 with one ``error:`` line for a bad DATA directory or unreadable audio; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys

from mmst.cli_help import ArgumentParser, add_progress_arguments
from mmst.corpora.speed_perturb import DEFAULT_FACTORS, SpeedPerturbBuildError, build_speed_perturbed
from mmst.data.corpus import DataConfigError


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="mmst-speed-perturb", description=__doc__)
    p.add_argument("--data", required=True, help="multi-way DATA directory (written into)")
    p.add_argument("--split", default="train", help="split to perturb (default: train)")
    p.add_argument("--factors", default=",".join(f"{f:g}" for f in DEFAULT_FACTORS),
                   help="comma-separated speed factors; 1.0 keeps the originals in the new manifest "
                        "(default: 0.9,1.0,1.1)")
    p.add_argument("--jobs", type=int, default=1, help="feature extraction processes (default: 1)")
    add_progress_arguments(p, log_level=False)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    p = build_parser()
    args = p.parse_args(argv)
    try:
        factors = [float(x) for x in args.factors.split(",") if x.strip()]
    except ValueError:
        p.error(f"--factors: expected comma-separated numbers, got {args.factors!r}")
    try:
        report = build_speed_perturbed(args.data, args.split, factors, jobs=args.jobs, progress=not args.no_progress)
    except (SpeedPerturbBuildError, DataConfigError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
