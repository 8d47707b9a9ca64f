"""Where a result came from: the command, the date, the git commit, the machine and the code that ran.

Every results JSON under ``docs/results/`` carries one such record under the key ``"provenance"``, so a
number in the docs can be traced to the run that produced it (development machines differ between
AVX-512/AMX Intel and AVX2 AMD CPUs, and throughput moves by about 2x between them). The benchmarks
(``bench/provenance.py``), the evaluation reports and the docs renderer all use this one record.

The record also says what ran: ``depends_on`` holds one digest per repository file (:func:`dependency_record`):

- the files of the paths the writer *declares* (recipes, configs, shell scripts, a served page: what runs
  without being imported), and
- the repository modules the run *imported*: :func:`run_record` snapshots the repository's files when the run
  starts (:class:`Snapshot`), and :func:`finish_record` (called when the results are written) adds the modules in
  this process's ``sys.modules`` and those that its child processes (torchrun workers, recipe stages, bench
  children) appended to the file named by the environment variable :data:`RUN_ENV` when they exited (importing
  ``mmst`` in a child registers that), each with its digest from the start-time snapshot.

A ``.py`` file's digest is of its syntax tree without docstrings, comments, and ``help=``/``description=``
strings (:func:`source_digest`): editing help text leaves a result fresh, any code change stales it. Another
file's digest is the SHA-256 of its bytes. When a digest no longer matches the tree, the code the numbers
describe has changed since, and :func:`changed_dependencies` names the files (``python tools/render_docs.py
--stale``). The digests need no git history: a shallow clone or a source tarball can check them.

Records written before this form (no ``"form"`` key) hold one digest per declared file or folder, the SHA-256
of the ``sha256sum`` listing of its files' bytes (:func:`folder_record`); they are still compared, folder by
folder.
"""

from __future__ import annotations

import ast
import atexit
import datetime as _dt
import hashlib
import os
import platform
import shlex
import subprocess
import sys
import tempfile
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


def run_record(command: str | None = None, depends_on: Sequence[str] | None = None, *,
               imports: bool = True) -> dict[str, Any]:
    """``{command, date, git_commit, machine[, depends_on]}`` for the running process.

    Call it when the run starts: the commit and the digests then describe the code that ran. With
    ``depends_on`` (and ``imports``) it starts this process's run (:func:`start_run`: the snapshot of the
    repository's files, :data:`RUN_ENV` for the children); :func:`finish_record`, when the results are written,
    adds the modules imported since.

    Args:
        command: the command line to record; default: this process's ``python`` + ``sys.argv``, with the
            script path relative to the repository when it lies inside it.
        depends_on: the paths the run uses without importing them, declared by hand (relative to the
            repository root: the script itself, recipes, configs, shell scripts; a folder stands for its files,
            e.g. ``["bench/bench_serve.py", "mmst/serve/"]``). Every results JSON under ``docs/results/`` needs
            the record.
        imports: record the repository modules the run imports (default); ``False`` records the declared
            paths only (stamping a JSON that another process wrote, ``bench/provenance.py --stamp``).

    Returns:
        ``{"command": str, "date": ISO 8601 UTC, "git_commit": str | None, "machine": machine()}``, plus
        ``"depends_on"`` (:func:`dependency_record`) when ``depends_on`` is given.

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
        if not (REPO / "pyproject.toml").is_file():
            rec["depends_on"] = unknown_dependencies(depends_on, f"not run from a source checkout ({REPO})")
        elif imports:
            rec["depends_on"] = start_run(REPO).record(depends_on)
        else:
            rec["depends_on"] = dependency_record(depends_on, tree_files(REPO))
    return rec


# ------------------------------------------------------------------------------------------ digests
#: A reader of one dependency path: ``path -> [(file path relative to the root, bytes), ...]``.
FileReader = Callable[[str], list[tuple[str, bytes]]]

#: The ``form`` of a per-file ``depends_on`` record (:func:`dependency_record`); records without it are folder
#: digests of the old form (:func:`folder_record`).
FILES_FORM = "files"

#: Keyword arguments whose string value is text for people (argparse help), left out of a ``.py`` digest.
TEXT_KEYWORDS = frozenset({"help", "description"})


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


def _is_text(node: ast.AST) -> bool:
    """A string expression: a literal, an f-string, or ``+``/``%`` starting from one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    return isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)) and _is_text(node.left)


_BODIES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _canonical(node: Any) -> str:
    """A syntax tree as text without docstrings (a body's leading string) and with ``help=``/``description=``
    strings blanked: node type and fields, without positions and without empty fields (``None``, ``[]``), so
    that fields added by later Python versions with empty defaults do not change it."""
    if isinstance(node, list):
        return "[" + ",".join([_canonical(x) for x in node]) + "]"
    if not isinstance(node, ast.AST):
        return repr(node)
    if isinstance(node, ast.keyword) and node.arg in TEXT_KEYWORDS and _is_text(node.value):
        return f"keyword(arg={node.arg!r},value=Constant(value=''))"
    parts = []
    for f in node._fields:
        v = getattr(node, f, None)
        if v is None or v == []:
            continue
        if f == "body" and isinstance(node, _BODIES) and isinstance(v[0], ast.Expr) \
                and isinstance(v[0].value, ast.Constant) and isinstance(v[0].value.value, str):
            v = v[1:] or [ast.Pass()]
        parts.append(f"{f}={_canonical(v)}")
    return f"{type(node).__name__}({','.join(parts)})"


def source_digest(rel: str, data: bytes) -> str:
    """The digest (SHA-256, hex) of one file's contents ``data``; ``rel`` (its path) chooses the rule.

    A ``.py`` file that parses: the digest of its syntax tree (:mod:`ast`) without docstrings, comments and the
    string values of ``help=``/``description=`` keywords (:data:`TEXT_KEYWORDS`), so editing those leaves the
    digest as it was and any change to the code does not. Any other file, or a ``.py`` file with a syntax
    error: the SHA-256 of its bytes.
    """
    if rel.endswith(".py"):
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError):
            pass
        else:
            return hashlib.sha256(_canonical(tree).encode()).hexdigest()
    return hashlib.sha256(data).hexdigest()


def listing_digest(digests: Mapping[str, str]) -> str:
    """SHA-256 (hex) of the listing ``<digest>  <path>\\n`` of ``digests`` (path -> digest), sorted by path
    (code-point order, as ``LC_ALL=C sort``)."""
    return hashlib.sha256("".join(f"{d}  {p}\n" for p, d in sorted(digests.items())).encode()).hexdigest()


def files_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """SHA-256 (hex) of the ``sha256sum`` listing of ``files``: one line ``<sha256 of bytes>  <path>\\n`` per
    file, sorted by path (code-point order, as ``LC_ALL=C sort``), each path once (the old form's digest)."""
    return listing_digest({rel: hashlib.sha256(data).hexdigest() for rel, data in files})


# ------------------------------------------------------------------------------------------ records
def dependency_record(paths: Sequence[str], read: FileReader | None = None, *, strict: bool = True,
                      imported: Iterable[str] = ()) -> dict[str, Any]:
    """``{"form": "files", "digest": hex, "paths": {file: hex}, "declared": [path, ...]}``: one
    :func:`source_digest` per file and the :func:`listing_digest` of them all.

    Args:
        paths: the declared paths, files or folders relative to the repository root (a folder may end in
            ``/``; it stands for every file below it). May be empty when ``imported`` is not.
        read: where the files come from; default :func:`tree_files` of this checkout (a run reads its
            start-time :class:`Snapshot`; the conversion of old records reads a commit from git history).
        strict: raise when a declared path holds no file (at measurement time that is a wrong path); with
            ``strict=False`` it is left out.
        imported: files (relative paths) the run imported (:meth:`Snapshot.imported`); a file that ``read``
            cannot find is left out.

    Raises:
        ValueError: neither ``paths`` nor ``imported`` names a file, or (``strict``) a declared path holds no
            file.
    """
    read = read or tree_files()
    digests: dict[str, str] = {}
    for path in paths:
        files = read(path)
        if strict and not files:
            raise ValueError(f"depends_on: {path!r} holds no file")
        digests.update((rel, source_digest(rel, data)) for rel, data in files)
    for rel in imported:
        if rel not in digests:
            digests.update((r, source_digest(r, data)) for r, data in read(rel) if r == rel)
    if not digests:
        raise ValueError("depends_on: no paths given" if not paths else "depends_on: no file found")
    return {"form": FILES_FORM, "digest": listing_digest(digests), "paths": dict(sorted(digests.items())),
            "declared": list(paths)}


def folder_record(paths: Sequence[str], read: FileReader | None = None, *, strict: bool = True) -> dict[str, Any]:
    """The old form: ``{"digest": hex, "paths": {path: hex}}``, the :func:`files_digest` of each declared path's
    files (bytes) and of all of them together. Kept to check and convert records written before the per-file
    form (``tools/backfill_depends_on.py``).

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


def is_folder_form(record: Mapping[str, Any]) -> bool:
    """True for a record of the old form (folder digests of bytes), False for the per-file form."""
    return record.get("form") != FILES_FORM


def changed_dependencies(record: Mapping[str, Any] | None, read: FileReader | None = None,
                         cache: dict[str, str] | None = None) -> list[str] | None:
    """The paths of a ``depends_on`` record whose digest differs from the files now; ``[]`` when none does.

    Per-file form: the files whose :func:`source_digest` changed or that no longer exist, then the files other
    than ``.py`` that a declared folder holds now and the record does not (a config added since; a new module
    runs only when code that imports it changes, which the record sees). Old form: the declared paths whose
    :func:`files_digest` changed. ``None`` when the record is missing or has no digests (dependencies
    unknown). ``cache`` (key -> digest) spares re-reading a file or folder shared by many records; it belongs
    to one ``read``.
    """
    if not record or not record.get("digest") or not isinstance(record.get("paths"), Mapping):
        return None
    read = read or tree_files()
    cache = {} if cache is None else cache
    changed = []
    if is_folder_form(record):
        for path, digest in record["paths"].items():
            key = "folder:" + path
            if key not in cache:
                cache[key] = files_digest(read(path))
            if cache[key] != digest:
                changed.append(path)
        return changed
    files = record["paths"]
    for rel, digest in files.items():
        key = "file:" + rel
        if key not in cache:
            found = [data for r, data in read(rel) if r == rel]
            cache[key] = source_digest(rel, found[0]) if found else "missing"
        if cache[key] != digest:
            changed.append(rel)
    for path in record.get("declared") or ():
        key = "list:" + path
        if key not in cache:
            cache[key] = "\n".join(r for r, _ in read(path) if not r.endswith(".py"))
        changed += sorted(r for r in cache[key].split("\n") if r and r not in files and r not in changed)
    return changed


# ------------------------------------------------------------------------------------------ what ran
#: The environment variable naming the file to which the processes of a run append the repository modules
#: they imported (one path per line, relative to the repository root), each when it exits.
RUN_ENV = "MMST_RUN_MODULES"


def _module_files(root: Path) -> list[str]:
    """The files of the modules in this process's ``sys.modules`` that lie under ``root`` (``__main__``
    included: a script run as ``python bench/x.py``), relative to ``root``."""
    out = set()
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not f:
            continue
        p = Path(f).resolve()
        if p.is_relative_to(root):
            out.add(p.relative_to(root).as_posix())
    return sorted(out)


def append_modules(trace: str | os.PathLike[str], root: Path = REPO) -> None:
    """Append this process's repository modules (:func:`_module_files`) to the run's ``trace`` file, in one
    ``O_APPEND`` write (processes that exit together do not mix their lines). A missing file (the run has
    ended) gets nothing. ``mmst/__init__.py`` registers this at exit in every process started with
    :data:`RUN_ENV` set."""
    try:
        fd = os.open(trace, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return
    try:
        os.write(fd, "".join(f"{rel}\n" for rel in _module_files(root)).encode())
    finally:
        os.close(fd)


def _listed_files(root: Path) -> list[str]:
    """The repository's files that a run may import: ``git ls-files`` (tracked and untracked, not ignored)
    ``*.py``; outside git, every ``*.py`` under ``root`` outside hidden and ``site-packages`` folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.py"],
                             cwd=root, capture_output=True, check=True, timeout=30).stdout.decode()
        return sorted({f for f in out.split("\0") if f and (root / f).is_file()})
    except (OSError, subprocess.SubprocessError):
        rels = (p.relative_to(root).as_posix() for p in root.rglob("*.py"))
        return sorted(r for r in rels if not _ignored(r) and "site-packages" not in r.split("/")
                      and not any(part.startswith(".") for part in r.split("/")))


class Snapshot:
    """The repository's source files as they were when a run started, and the modules the run imported.

    Taking it reads every ``.py`` file of the repository (:func:`_listed_files`, about 2.5 MB here) and keeps
    the bytes: digests are taken later, from these bytes, for the files the run used, so a file edited during
    the run is recorded as it was when the run started. Files of declared paths are read on first use.
    The snapshot creates the run's trace file (:data:`RUN_ENV`), to which child processes append their modules.

    Args:
        root: the repository root.
        trace: the trace file (default: a new temporary file, removed by :meth:`close`).
    """

    def __init__(self, root: Path = REPO, trace: str | os.PathLike[str] | None = None):
        self.root = Path(root)
        self._data = {rel: (self.root / rel).read_bytes() for rel in _listed_files(self.root)}
        self._folders: set[str] = set()
        if trace is None:
            fd, name = tempfile.mkstemp(prefix="mmst-run-", suffix=".modules")
            os.close(fd)
            trace = name
        self.trace = Path(trace)
        self.trace.touch()

    def read(self, path: str) -> list[tuple[str, bytes]]:
        """A :data:`FileReader` over the start-time files; a declared path not yet read is read now from disk
        (once) and kept."""
        key = path.rstrip("/")
        if key not in self._data and key not in self._folders:
            for rel, data in tree_files(self.root)(path):
                self._data.setdefault(rel, data)
            self._folders.add(key)
        if key in self._data:
            return [(key, self._data[key])]
        prefix = key + "/"
        return [(rel, data) for rel, data in self._data.items() if rel.startswith(prefix)]

    def imported(self) -> list[str]:
        """The snapshot's files that this process has imported so far or that a child appended to the trace
        file; files created after the start (not in the snapshot) are left out."""
        rels = set(_module_files(self.root))
        try:
            rels.update(self.trace.read_text().split())
        except OSError:
            pass
        return sorted(r for r in rels if r in self._data)

    def record(self, declared: Sequence[str]) -> dict[str, Any]:
        """The per-file ``depends_on`` record (:func:`dependency_record`) of ``declared`` and the imported
        modules, with start-time digests. Raises ``ValueError`` when a declared path holds no file."""
        return dependency_record(declared, self.read, imported=self.imported())

    def close(self) -> None:
        """Remove the trace file (children that exit later append nothing)."""
        self.trace.unlink(missing_ok=True)


_run: Snapshot | None = None


def start_run(root: Path = REPO) -> Snapshot:
    """This process's run: the first call takes the :class:`Snapshot` and sets :data:`RUN_ENV` for the child
    processes; later calls return the same run. The trace file is removed when the process exits."""
    global _run
    if _run is None:
        _run = Snapshot(root)
        os.environ[RUN_ENV] = str(_run.trace)
        atexit.register(end_run)
    return _run


def end_run() -> None:
    """End this process's run: remove its trace file and unset :data:`RUN_ENV` (when it names that file)."""
    global _run
    if _run is not None:
        if os.environ.get(RUN_ENV) == str(_run.trace):
            del os.environ[RUN_ENV]
        _run.close()
        _run = None


def finish_record(record: dict[str, Any]) -> dict[str, Any]:
    """Complete a :func:`run_record` taken at the start of this process's run with what ran since: its
    ``depends_on`` gets the modules imported so far by this process and by the children that have exited
    (digests from the start). Call it when the results are written (``bench/provenance.py``'s
    ``write_results`` does). A record without a per-file ``depends_on``, or taken outside a run, is returned
    unchanged. Returns ``record``."""
    dep = record.get("depends_on")
    if _run is not None and isinstance(dep, Mapping) and dep.get("form") == FILES_FORM:
        record["depends_on"] = _run.record(dep.get("declared") or [])
    return record
