"""The ``omnisteval`` command run on files mmst wrote, its scores read back unrounded: the independent check of
:mod:`mmst.evaluation.omnisteval_adapter` (same files in, same numbers out).

The command's ``scores.tsv`` keeps 4 decimals, too coarse to show agreement to 1e-6 ms. :func:`start` therefore
runs the command's own entry point (``omnisteval.cli.main``, what the ``omnisteval`` console script calls) in a
child Python process with the given arguments, and makes its score writer also write the score dict it was
handed, unrounded, as ``OUTPUT_FOLDER/scores_unrounded.json`` (:data:`UNROUNDED_FILE`). Nothing else of the
command changes: argument parsing, file loading, SoftSegmenter, scoring and its ``scores.tsv`` are its own.
:func:`compare` then gives the largest difference per metric, against both files.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mmst.evaluation.omnisteval_adapter import LONGFORM_KEYS, SHORTFORM_KEYS, TSV_NAMES, read_scores_tsv

#: Written beside the command's ``scores.tsv``: its score dict as JSON (OmniSTEval's keys, floats unrounded).
UNROUNDED_FILE = "scores_unrounded.json"
#: The largest difference :func:`compare` accepts against the unrounded scores (ms, or BLEU/chrF points).
TOLERANCE = 1e-6
#: The largest difference accepted against ``scores.tsv`` (half its last decimal, plus float rounding).
TSV_TOLERANCE = 5.001e-5

# The child process: omnisteval's CLI entry point, its scores.tsv writer wrapped to also dump the dict.
_CHILD = f"""
import json, os, sys
import omnisteval.cli as cli
_tsv = cli.dump_scores_tsv
def _dump(scores, output_folder, is_longform=False):
    _tsv(scores, output_folder, is_longform=is_longform)
    with open(os.path.join(output_folder, {UNROUNDED_FILE!r}), "w", encoding="utf-8") as f:
        json.dump({{k: None if v is None else float(v) for k, v in scores.items()}}, f)
cli.dump_scores_tsv = _dump
sys.argv = ["omnisteval", *sys.argv[1:]]
cli.main()
"""


def start(command: Sequence[str]) -> subprocess.Popen:
    """Start ``command`` (an ``omnisteval ...`` command line as a list, e.g.
    :func:`mmst.evaluation.omnisteval_adapter.cli_command`; it must name ``--output_folder``) in a child process
    that also writes :data:`UNROUNDED_FILE` there. Collect it with :func:`wait`; several may run side by side.

    Raises:
        ValueError: ``command`` does not start with ``omnisteval`` or has no ``--output_folder``.
    """
    if not command or Path(command[0]).name != "omnisteval" or "--output_folder" not in command:
        raise ValueError(f"expected an omnisteval command with --output_folder, got {' '.join(command)!r}")
    return subprocess.Popen([sys.executable, "-c", _CHILD, *command[1:]], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait(proc: subprocess.Popen, timeout_s: float = 600.0) -> None:
    """Wait for a :func:`start` process.

    Raises:
        RuntimeError: it exited with an error (the message holds the end of its stderr).
        subprocess.TimeoutExpired: it ran longer than ``timeout_s`` seconds (then it is killed).
    """
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"omnisteval exited with status {proc.returncode}: {err[-2000:]}")


def read_unrounded(output_folder: str | os.PathLike, longform: bool = True) -> dict[str, float]:
    """:data:`UNROUNDED_FILE` of a :func:`start` run, under mmst's metric names (the adapter's keys: LongYAAL,
    LongYAAL_CA, ..., SoftSeg_BLEU for long form; YAAL, ..., DSPTV for segmented); NaN or null values are left out."""
    raw = json.loads((Path(output_folder) / UNROUNDED_FILE).read_text(encoding="utf-8"))
    keys = LONGFORM_KEYS if longform else SHORTFORM_KEYS
    return {new: float(raw[old]) for old, new in keys.items() if raw.get(old) is not None and not math.isnan(raw[old])}


def compare(ours: Mapping[str, Any], output_folder: str | os.PathLike, longform: bool = True,
            metrics: Iterable[str] | None = None) -> dict[str, Any]:
    """The largest absolute difference per metric between the adapter's scores ``ours`` and those of the command
    that wrote ``output_folder``, against its unrounded dict and against its ``scores.tsv``.

    Args:
        ours: the adapter's metrics (:func:`~mmst.evaluation.omnisteval_adapter.longform_scores` or
            :func:`~mmst.evaluation.omnisteval_adapter.shortform_scores`).
        output_folder: the command's ``--output_folder``.
        longform: which key set (long form or segmented).
        metrics: the metrics to compare (default: every key of that set).

    Returns:
        ``{"max_abs_diff": {metric: float}, "tsv_max_abs_diff": {metric: float}, "missing": [metrics one side
        has and the other not], "equal": bool}``; ``equal`` is True when nothing is missing, every unrounded
        difference is at most :data:`TOLERANCE` and every ``scores.tsv`` one at most :data:`TSV_TOLERANCE`. A
        metric neither side computed (e.g. no latency without words) is left out.
    """
    theirs = read_unrounded(output_folder, longform)
    tsv = read_scores_tsv(Path(output_folder) / "scores.tsv")
    names = list(metrics) if metrics is not None else list((LONGFORM_KEYS if longform else SHORTFORM_KEYS).values())
    diff, tsv_diff, missing = {}, {}, []
    for k in names:
        a, b = ours.get(k), theirs.get(k)
        if a is None and b is None:
            continue
        if a is None or b is None:
            missing.append(k)
            continue
        diff[k] = abs(float(a) - b)
        t = tsv.get(TSV_NAMES[k])
        tsv_diff[k] = math.inf if t is None or math.isnan(t) else abs(float(a) - t)
    equal = (not missing and bool(diff) and all(v <= TOLERANCE for v in diff.values())
             and all(v <= TSV_TOLERANCE for v in tsv_diff.values()))
    return {"max_abs_diff": diff, "tsv_max_abs_diff": tsv_diff, "missing": missing, "equal": equal}
