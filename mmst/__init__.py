"""mmst: multilingual simultaneous speech translation.

Importing ``mmst`` sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user set it: with OpenMP's default
(active spin-waiting) threads, 2-thread CPU training on a machine with other busy processes ran
10-40x slower (bench/NOTES.md). It must be set before torch initialises OpenMP, so import ``mmst``
(or any ``mmst.*`` module) before ``torch`` in scripts.
"""

import os as _os

_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

if _os.environ.get("MMST_RUN_MODULES"):  # started by a run that records what it imports (mmst.provenance.RUN_ENV)
    import atexit as _atexit

    from mmst.provenance import append_modules as _append_modules

    _atexit.register(_append_modules, _os.environ["MMST_RUN_MODULES"])
