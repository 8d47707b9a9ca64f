"""Checkpoints: atomic writes, rotation, RNG capture, strict loading with ``weights_only=True``.

Layout in ``SAVE_DIR``:

* ``checkpoint_<update>.pt`` - the ``keep_last`` most recent periodic checkpoints;
* ``checkpoint_last.pt``     - the most recent save (resume point);
* ``checkpoint_best.pt``     - the best validation result so far.

A checkpoint is a dict of tensors and primitive containers only (so ``torch.load(path,
weights_only=True)`` works):

``{"format": "mmst-checkpoint", "version": 1, "model": state_dict, "model_cfg": dict, "model_arch": str,
"optimizer": state_dict, "scheduler": dict, "rng": dict, "data_iterator": {"epoch", "offset", "seed"},
"train_state": {"num_updates", "best_metric", "nan_skipped", ...}, "config": dict (TrainConfig),
"data_dir": str, "vocab": {"tgt": {lang: {"path", "size", "sha256"}}, "src": {...}},
"tgt_langs": [..]}``

Writes are atomic (:func:`mmst.atomic.atomic_path`): the file is written to
``.<name>.tmp-<pid>-<random>`` in the same directory, flushed, ``fsync``-ed, then ``os.replace``-d over
the target and the directory ``fsync``-ed; a crash leaves either the old or the new file, never a
truncated one. A process killed during a save (SIGKILL, out of memory) leaves its temporary file
behind; :func:`remove_stale_temp_files` deletes those of processes that no longer exist (the trainer
calls it at start-up and on resume).
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mmst.atomic import atomic_copy, atomic_path  # noqa: F401  (atomic_copy re-exported)
from mmst.data.vocab import file_sha256, vocab_fingerprint  # noqa: F401  (re-exported)
from mmst.models.checkpoint import (  # noqa: F401  (the read side, re-exported)
    CHECKPOINT_FORMAT,
    CheckpointError,
    VocabMismatchError,
    check_vocab_compat,
    load_checkpoint,
    load_model_from_checkpoint,
)

_NUMBERED = re.compile(r"^checkpoint_(\d+)\.pt$")
_TEMP = re.compile(r"^\.?.+\.pt\.tmp-(\d+)(?:-\w+)?$")
"""Temporary checkpoint files: ``.<name>.pt.tmp-<pid>-<random>`` (:mod:`mmst.atomic`), or ``<name>.pt.tmp-<pid>``."""


# ---------------------------------------------------------------------------------------------- RNG


def get_rng_state() -> dict[str, Any]:
    """Python, numpy and torch (CPU + all CUDA devices) RNG states as tensors/primitive containers."""
    py = random.getstate()
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": {"version": py[0], "state": list(py[1]), "gauss": py[2]},
        "numpy": {"name": np_state[0], "keys": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [s for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore states captured by :func:`get_rng_state` (CUDA only when available on both sides)."""
    py = state["python"]
    random.setstate((int(py["version"]), tuple(int(x) for x in py["state"]), py["gauss"]))
    n = state["numpy"]
    np.random.set_state((n["name"], np.asarray(n["keys"].numpy(), dtype=np.uint32), int(n["pos"]),
                         int(n["has_gauss"]), float(n["cached_gaussian"])))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


# ----------------------------------------------------------------------------------------- file I/O


def atomic_save(obj: Any, path: str | Path) -> None:
    """``torch.save(obj, path)`` atomically (:func:`mmst.atomic.atomic_path`: tmp file, fsync, ``os.replace``)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        torch.save(obj, fh)


# --------------------------------------------------------------------------------------------- vocab


# ------------------------------------------------------------------------------------------- manager


class CheckpointManager:
    """Writes ``checkpoint_<update>.pt`` / ``_last`` / ``_best`` in ``save_dir`` and prunes old ones.

    Args:
        save_dir: output directory (created).
        keep_last: number of numbered checkpoints to keep (0 = keep all).
    """

    def __init__(self, save_dir: str | Path, keep_last: int = 5) -> None:
        self.save_dir = Path(save_dir)
        self.save_dir.mkdir(parents=True, exist_ok=True)
        self.keep_last = int(keep_last)

    @property
    def last_path(self) -> Path:
        """``SAVE_DIR/checkpoint_last.pt``."""
        return self.save_dir / "checkpoint_last.pt"

    @property
    def best_path(self) -> Path:
        """``SAVE_DIR/checkpoint_best.pt``."""
        return self.save_dir / "checkpoint_best.pt"

    def numbered_path(self, update: int) -> Path:
        """``SAVE_DIR/checkpoint_<update>.pt``."""
        return self.save_dir / f"checkpoint_{update}.pt"

    def numbered(self) -> list[tuple[int, Path]]:
        """Existing numbered checkpoints, sorted by update (ascending)."""
        return list_numbered_checkpoints(self.save_dir)

    def save(self, state: dict[str, Any], update: int, numbered: bool = True, last: bool = True,
             best: bool = False) -> list[Path]:
        """Write ``state`` to the requested files atomically; prune; return the paths written."""
        written: list[Path] = []
        first: Path | None = None
        targets = []
        if last:  # written first: checkpoint_last.pt is never older than a numbered checkpoint
            targets.append(self.last_path)
        if numbered:
            targets.append(self.numbered_path(update))
        if best:
            targets.append(self.best_path)
        for p in targets:
            if first is None:
                atomic_save(state, p)
                first = p
            else:
                atomic_copy(first, p)
            written.append(p)
        if numbered:
            self.prune()
        return written

    def prune(self) -> None:
        """Delete all but the ``keep_last`` most recent numbered checkpoints."""
        if self.keep_last <= 0:
            return
        for _, p in self.numbered()[: -self.keep_last]:
            p.unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except OSError:
        return False
    return True


def remove_stale_temp_files(save_dir: str | Path) -> list[Path]:
    """Delete temporary checkpoint files (``*.pt.tmp-<pid>*``) left in ``save_dir`` by a process killed
    during a save.

    A temporary file whose writer process (``pid``) is still running on this machine is kept (it may
    be a save in progress); every other one is removed.

    Returns:
        The removed paths (sorted).
    """
    removed = []
    d = Path(save_dir)
    for p in sorted(d.iterdir()) if d.is_dir() else []:
        m = _TEMP.match(p.name)
        if m and p.is_file() and not _pid_alive(int(m.group(1))):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def list_numbered_checkpoints(save_dir: str | Path) -> list[tuple[int, Path]]:
    """``[(update, path)]`` of ``checkpoint_<update>.pt`` files in ``save_dir``, ascending."""
    out = []
    for p in Path(save_dir).iterdir() if Path(save_dir).is_dir() else []:
        m = _NUMBERED.match(p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)
