"""The word tables of a words module as written: entries in source order, repeats kept.

A `frozenset` hides a repeated entry, so the tests read the module's source: every top-level
`NAME = frozenset(...)` / `tuple(...)` / `(...)` assignment is evaluated with both built as lists.
"""

from __future__ import annotations

import ast
import inspect
from types import ModuleType


def tables(module: ModuleType) -> dict[str, list[str]]:
    """Table name → its entries as written, for every top-level table of string entries in `module`."""
    tree = ast.parse(inspect.getsource(module))
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            continue
        name = node.targets[0].id
        value = eval(compile(ast.Expression(node.value), module.__name__, "eval"),  # noqa: S307 - our own source
                     {"frozenset": list, "tuple": list, **found})
        if isinstance(value, tuple):
            value = list(value)
        if isinstance(value, list) and value and all(isinstance(entry, str) for entry in value):
            found[name] = value
    return found


def repeats(entries: list[str]) -> list[str]:
    """The entries written more than once, in order."""
    seen: set[str] = set()
    return [entry for entry in entries if entry in seen or seen.add(entry)]
