#!/usr/bin/env python
"""``mmst-eval``, also runnable as ``python eval/simultaneous_eval.py``; its code is ``mmst/cli/simultaneous_eval.py``."""

import sys

from mmst.cli.simultaneous_eval import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
