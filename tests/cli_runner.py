"""Run a command-line entry point (``main(argv)``) in the test process, as a subprocess would be run.

A new Python process costs about 3 s of imports (torch) before it does anything; tests of what a command
computes, writes and reports call its ``main`` here instead, and keep a subprocess only where the process
itself is under test (exit on a signal, environment variables, the script file).

:func:`run_main` returns a :class:`subprocess.CompletedProcess` with the exit status, stdout and stderr
(log lines included, formatted as :func:`mmst.cli_help.run_cli` formats them), so a test reads the same
fields either way. The process-wide state a command may change (torch's thread count, the root logger) is
restored afterwards.
"""

from __future__ import annotations

import contextlib
import io
import logging
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from mmst.cli_help import EVAL_LOG_FORMAT


def run_main(main: Callable[[list[str]], Any], argv: Sequence[Any], *,
             log_format: str = EVAL_LOG_FORMAT) -> subprocess.CompletedProcess:
    """``main([str(a) for a in argv])`` with stdout/stderr captured; ``SystemExit`` becomes the exit status.

    Args:
        main: the entry point (returns the exit status, or raises ``SystemExit`` as argparse does).
        argv: the command line without the program name (paths and numbers are turned into strings).
        log_format: the format of the log lines written to the captured stderr.

    Returns:
        ``CompletedProcess(args, returncode, stdout, stderr)``.
    """
    import torch

    args = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter(log_format))
    root = logging.getLogger()
    level, threads = root.level, torch.get_num_threads()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(args)
            except SystemExit as e:  # argparse: an int; sys.exit("message"): the message and status 1
                if e.code is None or isinstance(e.code, int):
                    rc = e.code
                else:
                    print(e.code, file=err)
                    rc = 1
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        torch.set_num_threads(threads)
    return subprocess.CompletedProcess(args, int(rc or 0), out.getvalue(), err.getvalue())
