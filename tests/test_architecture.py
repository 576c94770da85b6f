"""ARCHITECTURE.md's tables list exactly the modules on disk: one table per package folder, one row per module.

A folder's table follows a heading that names the folder in backticks (`` ## `state/files/` ``); each row's first
cell names one module (`` `store.py` ``). An `__init__.py` that holds only a docstring is not a module with a job
and is not listed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from paths import REPO

HEADING = re.compile(r"^#{2,4} .*?`((?:state|nodes|graphs|workmem)(?:/[a-z_]+)*/)`")
ROW = re.compile(r"^\|\s*`([A-Za-z_][\w]*\.py)`\s*\|")


def documented() -> dict[str, list[str]]:
    """Folder → the modules its table names, in table order."""
    tables: dict[str, list[str]] = {}
    folder = None
    for line in (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8").splitlines():
        if (m := HEADING.match(line)) is not None:
            folder = m.group(1)
            tables.setdefault(folder, [])
        elif line.startswith("#"):
            folder = None
        elif folder is not None and (m := ROW.match(line)) is not None:
            tables[folder].append(m.group(1))
    return tables


def has_a_job(path: Path) -> bool:
    """Anything but a package marker that holds only its docstring."""
    if path.name != "__init__.py":
        return True
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return any(not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) for node in body)


def on_disk() -> dict[str, list[str]]:
    """Folder → its modules with a job, sorted."""
    found: dict[str, list[str]] = {}
    for top in ("state", "nodes", "graphs", "workmem"):
        for path in sorted((REPO / top).rglob("*.py")):
            if has_a_job(path):
                folder = path.parent.relative_to(REPO).as_posix() + "/"
                found.setdefault(folder, []).append(path.name)
    return found


def test_every_package_folder_has_a_table_listing_exactly_its_modules():
    tables, disk = documented(), on_disk()
    assert set(tables) == set(disk), f"folders without a table: {sorted(set(disk) - set(tables))}; " \
                                     f"tables of no folder: {sorted(set(tables) - set(disk))}"
    for folder, modules in disk.items():
        listed = tables[folder]
        assert len(listed) == len(set(listed)), f"{folder}: a module listed twice"
        assert sorted(listed) == modules, (f"{folder}: missing {sorted(set(modules) - set(listed))}, "
                                           f"not on disk {sorted(set(listed) - set(modules))}")


def test_the_parser_reads_the_tables_it_checks():
    tables = documented()
    assert "store.py" in tables["state/files/"] and "commit.py" in tables["graphs/"]
    assert sum(map(len, tables.values())) >= 80


def test_product_code_cites_no_document_the_repository_lacks():
    """Comments and docstrings say the rule or point into docs/; no section sign of an outside specification, no
    issue number, no revision mark."""
    import re

    pattern = re.compile(r"§|\bSPEC\b|\[r[0-9]\]|\bissue[ -]?[0-9]+")
    found = [f"{path.relative_to(REPO)}:{n}" for top in ("workmem", "state", "nodes", "graphs")
             for path in sorted((REPO / top).rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if pattern.search(line)]
    assert found == []
    assert (REPO / "docs" / "design.md").is_file()


def test_tests_cite_no_section_of_an_outside_specification():
    """A test's docstring says the behaviour it pins down; the design it follows is in docs/, not in the
    section numbers of a specification the repository does not hold."""
    import re

    pattern = re.compile(r"§|\bSPEC\b|\[r[0-9]\]")
    found = [f"{path.relative_to(REPO)}:{n}" for path in sorted((REPO / "tests").rglob("*.py"))
             if path.name != "test_architecture.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if pattern.search(line)]
    assert found == []
