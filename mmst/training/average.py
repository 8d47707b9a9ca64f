"""``mmst-average-checkpoints``: average the model weights of several mmst checkpoints.

Usage::

    mmst-average-checkpoints --inputs exp/ckpt/checkpoint_900.pt exp/ckpt/checkpoint_1000.pt --out avg.pt
    mmst-average-checkpoints --save-dir exp/ckpt --last 5 --out exp/ckpt/checkpoint_avg5.pt

Floating-point tensors are averaged in float64 and cast back to their dtype; integer tensors (e.g.
counters) are taken from the last input. The output is a full mmst checkpoint: everything except
``model`` comes from the LAST input (as fairseq's ``average_checkpoints.py``), so it can be evaluated or
used with ``--load-pretrained-encoder-from``. All inputs must have the same parameter names and shapes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from mmst.cli_help import ArgumentParser
from mmst.training.checkpoint import CheckpointError, atomic_save, list_numbered_checkpoints, load_checkpoint


def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Average the ``model`` state dicts of ``paths`` (loaded with ``weights_only=True``).

    Returns:
        The last checkpoint's dict with ``model`` replaced by the average and ``averaged_from`` added.

    Raises:
        CheckpointError: no inputs, unreadable input, or mismatching parameter names/shapes.
    """
    if not paths:
        raise CheckpointError("average_checkpoints: no input checkpoints")
    acc: dict[str, torch.Tensor] = {}
    ref: dict[str, Any] | None = None
    last: dict[str, Any] = {}
    for i, p in enumerate(paths):
        ckpt = load_checkpoint(p)
        state = ckpt["model"]
        if ref is None:
            ref = {k: (v.shape, v.dtype) for k, v in state.items()}
            for k, v in state.items():
                acc[k] = v.double().clone() if v.is_floating_point() else v.clone()
        else:
            if set(state) != set(ref):
                diff = sorted(set(state) ^ set(ref))
                raise CheckpointError(f"{p}: parameter names differ from {paths[0]} (e.g. {diff[:5]})")
            for k, v in state.items():
                if v.shape != ref[k][0]:
                    raise CheckpointError(f"{p}: {k} has shape {tuple(v.shape)}, {paths[0]} has {tuple(ref[k][0])}")
                if v.is_floating_point():
                    acc[k] += v.double()
                else:
                    acc[k] = v.clone()
        if i == len(paths) - 1:
            last = ckpt
    assert ref is not None
    n = len(paths)
    avg = {k: (v / n).to(ref[k][1]) if ref[k][1].is_floating_point else v for k, v in acc.items()}
    out = dict(last)
    out["model"] = avg
    out["averaged_from"] = [str(p) for p in paths]
    return out


def last_n_checkpoints(save_dir: str | Path, n: int) -> list[Path]:
    """The ``n`` most recent ``checkpoint_<update>.pt`` in ``save_dir`` (ascending update order).

    Raises:
        CheckpointError: fewer than ``n`` numbered checkpoints exist.
    """
    found = list_numbered_checkpoints(save_dir)
    if len(found) < n:
        raise CheckpointError(f"{save_dir}: asked for the last {n} checkpoints, found {len(found)} "
                              "checkpoint_<update>.pt files")
    return [p for _, p in found[-n:]]


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of ``mmst-average-checkpoints``."""
    ap = ArgumentParser(prog="mmst-average-checkpoints", description=__doc__)
    ap.add_argument("--inputs", nargs="+", default=None, help="checkpoint files to average")
    ap.add_argument("--save-dir", default=None,
                    help="training directory (mmst-train --save-dir) with checkpoint_<update>.pt files (with --last)")
    ap.add_deprecated_alias("--dir", "--save-dir")
    ap.add_argument("--last", type=int, default=None,
                    help="average the N most recent checkpoint_<update>.pt of --save-dir")
    ap.add_argument("--out", required=True, help="output checkpoint path (written atomically)")
    ap.add_deprecated_alias("--output", "--out")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit status (2 = usage error, 1 = checkpoint error)."""
    args = build_parser().parse_args(argv)
    if (args.inputs is None) == (args.last is None):
        print("error: give either --inputs FILE... or --last N --save-dir DIR", file=sys.stderr)
        return 2
    try:
        if args.last is not None:
            if args.save_dir is None or args.last < 1:
                print("error: --last N (N >= 1) needs --save-dir DIR", file=sys.stderr)
                return 2
            paths: list[Any] = last_n_checkpoints(args.save_dir, args.last)
        else:
            paths = list(args.inputs)
        out = average_checkpoints(paths)
        atomic_save(out, args.out)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"averaged {len(paths)} checkpoints -> {args.out}: " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
