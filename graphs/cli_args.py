"""The argument types every `workmem` subcommand shares: one syntax for `--keep`, `--trigger` and sizes."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from workmem.state.errors import InvalidInput
from workmem.state.retention import MESSAGES, TOKENS, Keep, Trigger, keep_value, trigger_value

KEEP_HELP = ("what stays raw: messages:10, turns:3, tokens:4000 or fraction:0.1 of the context window "
             "(a bare number counts messages)")
TRIGGER_HELP = "when a commit starts: tokens:N, or fraction:F of the context budget (a bare number counts tokens)"


def keep_arg(text: str) -> Keep:
    """`--keep`: `unit:n` (messages, turns, tokens or fraction), or a bare number of messages."""
    if isinstance(text, str) and text.strip().isdigit():
        text = f"{MESSAGES}:{text.strip()}"
    try:
        return keep_value(text, "--keep")
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None


def token_trigger_arg(text: str) -> Trigger:
    """`--trigger` of the commands that count tokens (demo, eval): `tokens:N`, `fraction:F`, or a bare N tokens."""
    if isinstance(text, str) and text.strip().lstrip("-").isdigit():
        text = f"{TOKENS}:{text.strip()}"
    try:
        chosen = trigger_value(text, "--trigger")
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None
    if chosen[0] == MESSAGES:
        raise argparse.ArgumentTypeError("this command counts tokens: give tokens:N or fraction:F")
    return chosen  # type: ignore[return-value]


def threshold_arg(text: str) -> Trigger:
    """`--threshold N`: the older spelling of `--trigger tokens:N`."""
    return TOKENS, positive_int(text)


def positive_int(text: Any) -> int:
    """A size that must be at least 1 (a budget, a threshold)."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def add_trigger_options(cmd: argparse.ArgumentParser, default: Trigger) -> None:
    """`--trigger UNIT:N` and its older spelling `--threshold N` (tokens), into one `trigger` destination."""
    group = cmd.add_mutually_exclusive_group()
    group.add_argument("--trigger", type=token_trigger_arg, default=default, metavar="UNIT:N",
                       help=f"{TRIGGER_HELP} (default: {default[0]}:{default[1]})")
    group.add_argument("--threshold", dest="trigger", type=threshold_arg, metavar="N",
                       help="the same as --trigger tokens:N")


def check_out_file(field: str, value: str | None) -> None:
    """`InvalidInput` unless `value` (when given) names a file that can be written: not a folder, in a folder that
    exists and can be written (checked before a command does its work, so nothing is lost to a mistyped path)."""
    if value is None:
        return
    path = Path(value)
    if not value or path.is_dir() or not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise InvalidInput(field, value, "must be a file in a folder that exists and can be written")
