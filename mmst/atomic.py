"""Atomic file writes: the one implementation every mmst output goes through.

The content goes to a temporary file ``.<name>.tmp-<pid>-<random>`` in the same directory, is flushed
and fsync'ed, then ``os.replace``-d onto the final name, and the directory is fsync'ed. A crash
therefore leaves either the old file or the new one, never a truncated file, and a rerun can trust
any file whose final name exists. Any library that writes to a path or a file object (torch.save,
soundfile, matplotlib) goes through :func:`atomic_path`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success move it onto ``path`` atomically.

    The caller writes the complete file at the yielded path (any library that takes a path works).
    On an exception the temporary file is removed and ``path`` is left untouched.

    Args:
        path: final destination. Its parent directory is created if missing.

    Yields:
        ``Path`` of the temporary file (same directory, name ``.<name>.tmp-<pid>-<random>``: the pid
        lets a clean-up tell the files of dead writers from saves in progress).
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.tmp-{os.getpid()}-", dir=final.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp creates 0600; use the usual permissions
        os.replace(tmp_path, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise
    _fsync_dir(final.parent)


def _fsync_dir(path: Path) -> None:
    """fsync a directory so a rename in it survives a power loss (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see module docstring)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8, ``\\n`` newlines, no translation) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted UTF-8 JSON to ``path`` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def atomic_write_lines(path: str | os.PathLike[str], lines: Iterable[str]) -> None:
    """Write ``lines`` to ``path`` atomically, each followed by ``\n`` (UTF-8)."""
    atomic_write_text(path, "".join(ln + "\n" for ln in lines))


def atomic_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Copy the file ``src`` to ``dst`` atomically (streamed, 4 MiB blocks)."""
    with atomic_path(dst) as tmp, open(src, "rb") as fi, open(tmp, "wb") as fo:
        shutil.copyfileobj(fi, fo, length=1 << 22)


def atomic_save_npy(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Save ``array`` as an ``.npy`` file (no pickle) at ``path`` atomically."""
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    atomic_write_bytes(path, buf.getvalue())
