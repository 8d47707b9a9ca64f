#!/usr/bin/env python
"""``mmst-prep-audio-list``, also runnable as ``python data_prep/prep_audio_list.py``; its code is ``mmst/cli/prep_audio_list.py``."""

import sys

from mmst.cli.prep_audio_list import build_parser, main  # noqa: F401 (build_parser: the options, for tools and tests)

if __name__ == "__main__":
    sys.exit(main())
