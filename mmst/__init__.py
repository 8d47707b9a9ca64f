"""mmst: multilingual simultaneous speech translation.

Importing ``mmst`` sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user set it: with OpenMP's default
(active spin-waiting) threads, 2-thread CPU training on a machine with other busy processes ran
10-40x slower (bench/NOTES.md). It must be set before torch initialises OpenMP, so import ``mmst``
(or any ``mmst.*`` module) before ``torch`` in scripts.

In a process started by a run that records what it ran (``MMST_RUN_MODULES`` names the run's file, set by
:func:`mmst.provenance.run_record`), importing ``mmst`` also registers, for the process's exit, the append of
the repository modules it imported to that file (:func:`mmst.provenance.append_modules`).
"""

import os as _os

_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

if _os.environ.get("MMST_RUN_MODULES"):  # started by a run that records what it imports (mmst.provenance.RUN_ENV)
    import atexit as _atexit

    from mmst.provenance import append_modules as _append_modules

    _atexit.register(_append_modules, _os.environ["MMST_RUN_MODULES"])
