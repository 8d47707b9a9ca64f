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

Writes are atomic: the file is written to ``<name>.tmp-<pid>`` in the same directory, flushed,
``fsync``-ed, then ``os.replace``-d over the target and the directory is ``fsync``-ed; a crash leaves
either the old or the new file, never a truncated one. A process killed during a save (SIGKILL,
out of memory) leaves its ``<name>.tmp-<pid>`` behind; :func:`remove_stale_temp_files` deletes
those of processes that no longer exist (the trainer calls it at start-up and on resume).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINT_FORMAT = "mmst-checkpoint"
_NUMBERED = re.compile(r"^checkpoint_(\d+)\.pt$")
_TEMP = re.compile(r"^.+\.pt\.tmp-(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, not ours, or incompatible with the current run."""


class VocabMismatchError(CheckpointError):
    """The vocabulary of the data does not match the one the checkpoint was trained with."""


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


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def atomic_save(obj: Any, path: str | Path) -> None:
    """``torch.save(obj, path)`` atomically (tmp file in the same dir + fsync + ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def atomic_copy(src: str | Path, dst: str | Path) -> None:
    """Copy a file atomically (tmp + fsync + ``os.replace``)."""
    dst = Path(dst)
    tmp = dst.with_name(f"{dst.name}.tmp-{os.getpid()}")
    try:
        with open(src, "rb") as fi, open(tmp, "wb") as fo:
            shutil.copyfileobj(fi, fo, length=1 << 22)
            fo.flush()
            os.fsync(fo.fileno())
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(dst.parent)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load one of OUR checkpoints with ``torch.load(weights_only=True)`` (never executes pickle code).

    Raises:
        CheckpointError: the file is missing, cannot be loaded safely, or is not an mmst checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:
        raise CheckpointError(f"cannot load {path} with weights_only=True (not an mmst checkpoint, "
                              f"or corrupted): {e}") from e
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not an mmst checkpoint (missing format={CHECKPOINT_FORMAT!r})")
    return ckpt


# --------------------------------------------------------------------------------------------- vocab


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def vocab_fingerprint(path: str | Path, size: int) -> dict[str, Any]:
    """``{"path", "size", "sha256"}`` of a SentencePiece model (stored in checkpoints)."""
    return {"path": str(path), "size": int(size), "sha256": file_sha256(path)}


def check_vocab_compat(saved: dict[str, Any], current: dict[str, Any], where: str = "checkpoint") -> None:
    """Raise :class:`VocabMismatchError` when ``current`` vocab info differs from ``saved``.

    Both are ``{"tgt": {lang: fingerprint}, "src": fingerprint | None}`` (see :func:`vocab_fingerprint`).
    Sizes and SHA-256 must match for every language of the checkpoint.
    """
    s_tgt, c_tgt = saved.get("tgt", {}), current.get("tgt", {})
    for lang, s in s_tgt.items():
        c = c_tgt.get(lang)
        if c is None:
            raise VocabMismatchError(f"{where} has a vocabulary for language {lang!r} but the data does not")
        if int(s["size"]) != int(c["size"]) or s.get("sha256") != c.get("sha256"):
            raise VocabMismatchError(
                f"vocabulary for {lang!r} does not match the {where}: {where} used {s['path']} "
                f"(size {s['size']}, sha256 {str(s.get('sha256'))[:12]}), data has {c['path']} "
                f"(size {c['size']}, sha256 {str(c.get('sha256'))[:12]})")
    s_src, c_src = saved.get("src"), current.get("src")
    if s_src and c_src and (int(s_src["size"]) != int(c_src["size"]) or s_src.get("sha256") != c_src.get("sha256")):
        raise VocabMismatchError(f"source (CTC) vocabulary does not match the {where}: {s_src['path']} "
                                 f"(size {s_src['size']}) vs {c_src['path']} (size {c_src['size']})")


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
    """Delete ``*.pt.tmp-<pid>`` files left in ``save_dir`` by a process killed during a save.

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
