"""Where a result came from: the command, the date, the git commit and the machine.

Every results JSON under ``docs/results/`` carries one such record under the key ``"provenance"``, so a
number in the docs can be traced to the run that produced it (development machines differ between
AVX-512/AMX Intel and AVX2 AMD CPUs, and throughput moves by about 2x between them). The benchmarks
(``bench/provenance.py``), the evaluation reports and the docs renderer all use this one record.

The record also says what the run measured: ``depends_on`` lists the source paths (files or folders,
relative to the repository root) that the run exercised, with a content digest of each at measurement time
and one over all of them (:func:`dependency_record`). When a digest no longer matches the tree, the code the
numbers describe has changed since (:func:`changed_dependencies`; ``python tools/render_docs.py --stale``).
The digests need no git history: a shallow clone or a source tarball can check them. A digest is the
SHA-256 of the ``sha256sum`` listing of the files, sorted by path, so from the shell::

    find mmst/models bench/bench_train.py -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \\
        | LC_ALL=C sort | xargs sha256sum | sha256sum
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: The source tree of this package (the repository root in a checkout or an editable install).
REPO = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    """CPU model name from ``/proc/cpuinfo`` (Linux), else :func:`platform.processor`; ``"unknown"``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> list[str]:
    """The CPU features that change our throughput (AVX2, AVX-512, AVX512-BF16, AMX), as listed by Linux."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in have]
    except OSError:
        pass
    return []


def machine() -> dict[str, Any]:
    """``{cpu_model, cpu_flags, cores, torch, cuda_device, python, platform}`` of this process's machine.

    ``cores`` is the number of CPUs this process may run on (``os.sched_getaffinity``), which is what a
    benchmark can use; ``torch`` is ``torch.__version__`` (``None`` if torch is not installed).
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 0
    try:
        import torch

        tv: str | None = torch.__version__
        cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        tv, cuda = None, None
    return {"cpu_model": cpu_model(), "cpu_flags": cpu_flags(), "cores": cores, "torch": tv,
            "cuda_device": cuda, "python": platform.python_version(), "platform": platform.platform()}


def git_commit(repo: Path = REPO) -> str | None:
    """``HEAD`` commit of ``repo``, with ``-dirty`` appended when tracked files differ; ``None`` outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


def run_record(command: str | None = None, depends_on: Sequence[str] | None = None) -> dict[str, Any]:
    """``{command, date, git_commit, machine[, depends_on]}`` for the running process.

    Call it when the run starts: the commit and the digests then describe the code that ran.

    Args:
        command: the command line to record; default: this process's ``python`` + ``sys.argv``, with the
            script path relative to the repository when it lies inside it.
        depends_on: the source paths the run exercises (relative to the repository root, e.g.
            ``["bench/bench_train.py", "mmst/models/"]``); recorded with their digests
            (:func:`dependency_record`). Every results JSON under ``docs/results/`` needs them.

    Returns:
        ``{"command": str, "date": ISO 8601 UTC, "git_commit": str | None, "machine": machine()}``, plus
        ``"depends_on"`` when ``depends_on`` is given.

        Outside a source checkout (mmst installed as a package, without ``pyproject.toml`` beside it) the
        digests cannot be taken: the record lists the paths with ``null`` digests (dependencies unknown).

    Raises:
        ValueError: a path of ``depends_on`` holds no file (a typo in the writer's list).
    """
    if command is None:
        argv = list(sys.argv)
        if argv and argv[0]:
            p = Path(argv[0]).resolve()
            argv[0] = str(p.relative_to(REPO)) if p.is_relative_to(REPO) else argv[0]
        command = shlex.join(["python", *argv])
    rec = {"command": command, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "git_commit": git_commit(), "machine": machine()}
    if depends_on is not None:
        rec["depends_on"] = (dependency_record(depends_on) if (REPO / "pyproject.toml").is_file()
                             else unknown_dependencies(depends_on, f"not run from a source checkout ({REPO})"))
    return rec


# ------------------------------------------------------------------------------------------ dependencies
#: A reader of one dependency path: ``path -> [(file path relative to the root, bytes), ...]``.
FileReader = Callable[[str], list[tuple[str, bytes]]]


def _ignored(rel: str) -> bool:
    """Files that git does not track and a digest must not see: byte code and packaging leftovers."""
    parts = rel.split("/")
    return (rel.endswith((".pyc", ".pyo")) or "__pycache__" in parts
            or any(p.endswith(".egg-info") for p in parts))


def tree_files(root: Path = REPO) -> FileReader:
    """A :data:`FileReader` over the files on disk under ``root`` (a checkout, a tarball, a copy).

    A folder yields every file below it (byte code and ``__pycache__`` skipped); a missing path yields
    none. Paths are POSIX, relative to ``root``.
    """
    root = Path(root)

    def read(path: str) -> list[tuple[str, bytes]]:
        p = root / path
        if p.is_file():
            cands = [p]
        elif p.is_dir():
            cands = [f for f in p.rglob("*") if f.is_file()]
        else:
            return []
        out = []
        for f in cands:
            rel = f.relative_to(root).as_posix()
            if not _ignored(rel):
                out.append((rel, f.read_bytes()))
        return out

    return read


def files_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """SHA-256 (hex) of the ``sha256sum`` listing of ``files``: one line ``<sha256 of bytes>  <path>\\n`` per
    file, sorted by path (code-point order, as ``LC_ALL=C sort``), each path once."""
    lines = sorted({rel: f"{hashlib.sha256(data).hexdigest()}  {rel}\n" for rel, data in files}.items())
    return hashlib.sha256("".join(line for _, line in lines).encode()).hexdigest()


def dependency_record(paths: Sequence[str], read: FileReader | None = None, *, strict: bool = True) -> dict[str, Any]:
    """``{"digest": hex, "paths": {path: hex}}``: the digest of each path and of all of them together.

    Args:
        paths: files or folders relative to the repository root (a folder may end in ``/``).
        read: where the files come from; default :func:`tree_files` of this checkout (the backfill of old
            results reads a commit from git history instead).
        strict: raise when a path holds no file (at measurement time that is a wrong path); with
            ``strict=False`` such a path gets the digest of no files.

    Raises:
        ValueError: ``paths`` is empty, or (``strict``) a path holds no file.
    """
    if not paths:
        raise ValueError("depends_on: no paths given")
    read = read or tree_files()
    per_path, every = {}, []
    for path in paths:
        files = read(path)
        if strict and not files:
            raise ValueError(f"depends_on: {path!r} holds no file")
        per_path[path] = files_digest(files)
        every += files
    return {"digest": files_digest(every), "paths": per_path}


def unknown_dependencies(paths: Sequence[str], reason: str) -> dict[str, Any]:
    """A ``depends_on`` record whose digests could not be taken: ``{"digest": None, "paths": {path: None},
    "note": reason}``. :func:`changed_dependencies` reports it as unknown, and the docs as possibly stale."""
    return {"digest": None, "paths": dict.fromkeys(paths), "note": reason}


def changed_dependencies(record: Mapping[str, Any] | None, read: FileReader | None = None,
                         cache: dict[str, str] | None = None) -> list[str] | None:
    """The paths of a ``depends_on`` record whose digest differs from the files now; ``[]`` when none does.

    ``None`` when the record is missing or has no digests (dependencies unknown). A path that no longer
    exists counts as changed. ``cache`` (path -> digest) spares re-reading a folder shared by many records;
    it belongs to one ``read``.
    """
    if not record or not record.get("digest") or not isinstance(record.get("paths"), Mapping):
        return None
    read = read or tree_files()
    cache = {} if cache is None else cache
    changed = []
    for path, digest in record["paths"].items():
        if path not in cache:
            cache[path] = files_digest(read(path))
        if cache[path] != digest:
            changed.append(path)
    return changed
