"""mmst: multilingual simultaneous speech translation.

Importing ``mmst`` sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user set it: with OpenMP's default
(active spin-waiting) threads, 2-thread CPU training on a machine with other busy processes ran
10-40x slower (bench/NOTES.md). It must be set before torch initialises OpenMP, so import ``mmst``
(or any ``mmst.*`` module) before ``torch`` in scripts.
"""

import os as _os

_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
