#!/usr/bin/env python
"""``mmst-compare-systems``, also runnable as ``python eval/compare_systems.py``; its code is ``mmst/cli/compare_systems.py``."""

import sys

from mmst.cli.compare_systems import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
