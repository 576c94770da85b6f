"""The help formatter of the `workmem` command line."""

from __future__ import annotations

import argparse


class DefaultsFormatter(argparse.HelpFormatter):
    """Help that names an option's default once: not when its text already says it, nor for None / False."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default in (None, False, argparse.SUPPRESS) or not action.option_strings
                or (action.const is False and default is True)):  # a store_false --no-X flag: "not given"
            return text
        return f"{text} (default: %(default)s)"


def takes_unicode(stream: object) -> bool:
    """True when a text stream encodes every character (UTF-8, UTF-16, …; a stream that names no encoding
    is taken for UTF-8)."""
    encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "").replace("_", "")
    return encoding.startswith("utf")


def readable_on_any_terminal() -> bool:
    """Let a report's tables and bullets (`•`, `∪`, `—`) print on a terminal that cannot show them — as `?`,
    never a `UnicodeEncodeError` after the work is done; → True when standard output takes any Unicode (JSON may
    then keep its text as it is, else it is written ASCII-escaped, which loses nothing)."""
    import sys

    if takes_unicode(sys.stdout):
        return True
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="replace")
    return False
