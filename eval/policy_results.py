#!/usr/bin/env python
"""``mmst-policy-results``, also runnable as ``python eval/policy_results.py``; its code is ``mmst/cli/policy_results.py``."""

import sys

from mmst.cli.policy_results import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
