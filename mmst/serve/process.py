"""``python -m mmst.serve`` in a child process on a free port, stopped when done (for the tests and the
docs' screenshot tool, ``tools/screenshot_serve.py``)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

#: The directory that holds the ``mmst`` package: the child runs there, so ``-m mmst.serve`` imports the
#: same code as this process.
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"listening on http://[^:]+:(\d+)/")


@contextlib.contextmanager
def server_process(args: list[str], log: str | Path, *, start_timeout_s: float = 120.0,
                   stop_timeout_s: float = 20.0) -> Iterator[tuple[subprocess.Popen, int]]:
    """Run ``python -m mmst.serve ARGS --port 0`` and yield ``(process, port)`` once it listens; on exit
    terminate it (killed after ``stop_timeout_s`` seconds).

    The server's stderr (its log) goes to the file ``log``; the port is read from its first
    ``listening on http://HOST:PORT/`` line on stdout.

    Raises:
        RuntimeError: the server exited before listening (a bad option, checkpoint or DATA); the message
            holds its stdout and its log.
        subprocess.TimeoutExpired: it closed its stdout without listening and did not exit within
            ``start_timeout_s`` seconds.
    """
    err = open(log, "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "mmst.serve", *args, "--port", "0"], cwd=_PACKAGE_ROOT,
                            stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        port = None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            m = _LISTENING.search(line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            proc.wait(timeout=start_timeout_s)
            err.flush()
            raise RuntimeError("mmst-serve did not start:\n" + "".join(lines) + Path(log).read_text())
        yield proc, port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
        err.close()
