"""``python -m mmst.serve`` = ``mmst-serve``."""

import sys

from .cli import main

sys.exit(main())
