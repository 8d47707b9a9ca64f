#!/usr/bin/env python
"""``mmst-prep-lists``, also runnable as ``python data_prep/prep_lists.py``; its code is ``mmst/cli/prep_lists.py``."""

import sys

from mmst.cli.prep_lists import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
