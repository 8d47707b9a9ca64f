#!/usr/bin/env python
"""``mmst-make-long-talk``, also runnable as ``python data_prep/make_long_talk.py``; its code is ``mmst/cli/make_long_talk.py``."""

import sys

from mmst.cli.make_long_talk import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
