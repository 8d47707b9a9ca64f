#!/usr/bin/env python
"""``mmst-speed-perturb``, also runnable as ``python data_prep/speed_perturb.py``; its code is ``mmst/cli/speed_perturb.py``."""

import sys

from mmst.cli.speed_perturb import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
