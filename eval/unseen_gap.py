#!/usr/bin/env python
"""``mmst-unseen-gap``, also runnable as ``python eval/unseen_gap.py``; its code is ``mmst/cli/unseen_gap.py``."""

import sys

from mmst.cli.unseen_gap import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
