#!/usr/bin/env python
"""``mmst-prep-multiway``, also runnable as ``python data_prep/prep_multiway.py``; its code is ``mmst/cli/prep_multiway.py``."""

import sys

from mmst.cli.prep_multiway import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
