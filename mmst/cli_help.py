"""The one ``argparse`` help formatter of mmst's command-line scripts."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Description and epilog printed as written; ``(default: X)`` after an option's help only when the
    default means something (not ``None``/``False``) and the help does not already mention a default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        h = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in h:
            return h
        return super()._get_help_string(action)
