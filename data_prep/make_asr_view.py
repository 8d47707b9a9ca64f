#!/usr/bin/env python
"""``mmst-make-asr-view``, also runnable as ``python data_prep/make_asr_view.py``; its code is ``mmst/cli/make_asr_view.py``."""

import sys

from mmst.cli.make_asr_view import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
