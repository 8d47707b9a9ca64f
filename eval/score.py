#!/usr/bin/env python
"""``mmst-score``, also runnable as ``python eval/score.py``; its code is ``mmst/cli/score.py``."""

import sys

from mmst.cli.score import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
