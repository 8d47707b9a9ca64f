#!/usr/bin/env python
"""``mmst-eval-longform``, also runnable as ``python eval/longform_eval.py``; its code is ``mmst/cli/longform_eval.py``."""

import sys

from mmst.cli.longform_eval import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
