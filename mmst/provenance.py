"""Where a result came from: the command, the date, the git commit and the machine.

Every results JSON under ``docs/results/`` carries one such record under the key ``"provenance"``, so a
number in the docs can be traced to the run that produced it (development machines differ between
AVX-512/AMX Intel and AVX2 AMD CPUs, and throughput moves by about 2x between them). The benchmarks
(``bench/provenance.py``), the evaluation reports and the docs renderer all use this one record.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import subprocess
import sys
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


def run_record(command: str | None = None) -> dict[str, Any]:
    """``{command, date, git_commit, machine}`` for the running process.

    Args:
        command: the command line to record; default: this process's ``python`` + ``sys.argv``, with the
            script path relative to the repository when it lies inside it.

    Returns:
        ``{"command": str, "date": ISO 8601 UTC, "git_commit": str | None, "machine": machine()}``.
    """
    if command is None:
        argv = list(sys.argv)
        if argv and argv[0]:
            p = Path(argv[0]).resolve()
            argv[0] = str(p.relative_to(REPO)) if p.is_relative_to(REPO) else argv[0]
        command = shlex.join(["python", *argv])
    return {"command": command, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "git_commit": git_commit(), "machine": machine()}
