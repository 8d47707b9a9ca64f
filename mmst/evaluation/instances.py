"""Read and write SimulEval 1.1 ``instances.log`` files.

Format (SimulEval 1.1 ``Instance.summarize`` for speech-to-text): one JSON object per line::

    {"index": 0, "prediction": "ein Haus", "delays": [640.0, 960.0], "elapsed": [652.1, 975.3],
     "prediction_length": 2, "reference": "ein Haus", "source": [...], "source_length": 1234.0}

- ``prediction``: the hypothesis; units joined with ``" "`` (word unit) or ``""`` (char unit).
- ``delays``: per unit, ms of source read when the unit was written.
- ``elapsed``: per unit, ``delay + wall-clock ms since the start of the sentence`` (SimulEval's
  ``step_to_elapsed``), used by the computation-aware metrics.
- ``prediction_length``: number of units.
- ``source_length``: source duration in ms (``n_samples * 1000 / sample_rate``).
- ``source``: free-form description of the source (SimulEval writes ``soundfile.info`` lines; we
  write ``[wav, "offset=..", "duration=.."]``).
- ``reference``: the reference text, or ``null`` when there is none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mmst.atomic import atomic_write_lines
from mmst.evaluation.latency import join_units

#: Keys every instance line must have to be scored.
REQUIRED_KEYS: tuple[str, ...] = ("index", "prediction", "delays", "source_length")


class InstancesFormatError(ValueError):
    """Raised for an unreadable/ill-formed instances.log; the message names the file and line."""


def make_instance(
    index: int,
    units: Sequence[str],
    delays: Sequence[float],
    elapsed: Sequence[float],
    reference: str | None,
    source: Any,
    source_length_ms: float,
    unit: str = "word",
) -> dict[str, Any]:
    """Build one SimulEval-1.1 instance dict.

    Args:
        index: 0-based position in the test set.
        units: the hypothesis split into latency units (words, or characters for the char unit).
        delays: per-unit delay, ms of source read (same length as ``units``).
        elapsed: per-unit delay + compute ms (same length as ``units``).
        reference: reference text or ``None``.
        source: description of the source (list of strings or a string).
        source_length_ms: source duration in ms.
        unit: ``word`` or ``char``; how ``prediction`` is joined.

    Raises:
        ValueError: ``units``, ``delays`` and ``elapsed`` differ in length.
    """
    if not (len(units) == len(delays) == len(elapsed)):
        raise ValueError(
            f"instance {index}: {len(units)} units, {len(delays)} delays, {len(elapsed)} elapsed differ"
        )
    return {
        "index": int(index),
        "prediction": join_units(list(units), unit),
        "delays": [float(d) for d in delays],
        "elapsed": [float(e) for e in elapsed],
        "prediction_length": len(units),
        "reference": reference,
        "source": source,
        "source_length": float(source_length_ms),
    }


def write_instances(path: str | os.PathLike, instances: Iterable[dict[str, Any]]) -> None:
    """Write instances to ``path``, one JSON per line (atomically: temp file + rename).

    Parent directories are created.
    """
    atomic_write_lines(path, (json.dumps(ins, ensure_ascii=False) for ins in instances))


def read_instances(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a SimulEval ``instances.log``.

    Blank lines are ignored.  ``elapsed`` defaults to ``[]`` and ``reference`` to ``None`` when
    absent.

    Returns:
        list of instance dicts in file order.

    Raises:
        FileNotFoundError: no such file.
        InstancesFormatError: a line is not JSON or lacks a required key; the file is empty.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"instances file not found: {path}")
    out: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                ins = json.loads(line)
            except json.JSONDecodeError as e:
                raise InstancesFormatError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(ins, dict):
                raise InstancesFormatError(f"{path}:{lineno}: expected a JSON object")
            missing = [k for k in REQUIRED_KEYS if k not in ins]
            if missing:
                raise InstancesFormatError(f"{path}:{lineno}: missing key(s) {', '.join(missing)}")
            ins.setdefault("elapsed", [])
            ins.setdefault("reference", None)
            if ins["delays"] is None:
                ins["delays"] = []
            if ins["elapsed"] is None:
                ins["elapsed"] = []
            out.append(ins)
    if not out:
        raise InstancesFormatError(f"{path}: no instances (empty file)")
    return out
