#!/usr/bin/env python
"""``mmst-transcribe-stream``, also runnable as ``python eval/transcribe_stream.py``; its code is ``mmst/cli/transcribe_stream.py``."""

import sys

from mmst.cli.transcribe_stream import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
