#!/usr/bin/env python
"""``mmst-synthesize-corpus``, also runnable as ``python data_prep/synthesize_corpus.py``; its code is ``mmst/cli/synthesize_corpus.py``."""

import sys

from mmst.cli.synthesize_corpus import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
