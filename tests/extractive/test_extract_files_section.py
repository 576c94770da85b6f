"""Files & Context of a coding session (nodes/extractive/files_section.py): merged, ranked, within budget."""

from __future__ import annotations

import pytest
from test_extract_trail import session, trail_of

from workmem.nodes.extractive.files_section import entry_path, files_op, merge_parts
from workmem.nodes.guards import guard_ops
from workmem.nodes.merge import merge_with_spill
from workmem.state.memory import (
    SECTION_BUDGETS,
    body_tokens,
    bullet_items,
    parse_sections,
    render_sections,
    split_pointer,
)
from workmem.state.tokens import count_tokens


def test_segments_of_one_file_merge():
    assert merge_parts(["edited L10-12 in load", "read L1-50"], ["edited L13, L40 in parse", "tested: pytest t.py"]) \
        == ["edited L10-13, L40 in load, parse", "tested: pytest t.py", "read L1-50"]


def test_entry_paths():
    assert entry_path("src/a.py — edited L3") == "src/a.py"
    assert entry_path("app/importers/csv_loader.py (read_file)") == "app/importers/csv_loader.py"


def test_an_old_entry_and_a_new_touch_of_the_same_file_are_one_entry_edited_files_first():
    old = "- tests/t.py — tested: pytest tests/t.py\n- src/a.py — read L1-20"
    trail = trail_of(session(("sed -i '5c\\    x' src/a.py", ""), ("cat README.md", "x")))
    op = files_op(old, trail, 1500, [])
    assert op == {"op": "UPDATE", "content": "- src/a.py — edited L5; read L1-20\n- tests/t.py — tested: pytest "
                                             "tests/t.py\n- README.md — read"}
    assert guard_ops({"Files & Context": old}, {"Files & Context": op})[1] == []  # no path lost


def test_nothing_new_keeps_the_section():
    trail = trail_of(session(("cat src/a.py", "x")))
    body = "- src/a.py — read"
    assert files_op(body, trail, 1500, []) == {"op": "KEEP"}


def test_a_small_budget_shortens_then_leaves_new_reads_out_but_never_an_old_entry():
    old = "- src/a.py — read L1-20"
    commands = [(f"cat src/module_{i}.py", "x") for i in range(12)] + [("sed -i '5c\\    x' src/b.py", "")]
    op = files_op(old, trail_of(session(*commands)), 30, [])
    items = bullet_items(op["content"] if op["op"] == "UPDATE" else old + "\n" + "\n".join(op.get("items", [])))
    assert items[0].startswith("src/b.py — edited") and "src/a.py — read" in items
    assert count_tokens("\n".join(f"- {i}" for i in items)) <= 30


@pytest.mark.parametrize(("command", "kind"), [("sed -i '5c\\    x' src/b.py", "edited"),
                                             ("cat > src/b.py <<'EOF'\nx = 1\nEOF", "created")])
def test_a_new_edit_or_file_is_never_left_out_the_old_entries_it_outgrows_go_first_where_the_spill_takes_lines(
        command, kind):
    old = "\n".join(f"- src/module_{i}.py — read" for i in range(8))
    budget = count_tokens(old)  # the old entries alone fill the section
    op = files_op(old, trail_of(session((command, ""))), budget, [])
    items = bullet_items(op["content"] if op["op"] == "UPDATE" else old + "\n" + "\n".join(op.get("items", [])))
    assert any(i.startswith(f"src/b.py — {kind}") for i in items)
    assert all(f"src/module_{i}.py — read" in items for i in range(8))  # no old path lost (the guard's rule)
    assert items[-1].startswith(f"src/b.py — {kind}")  # the spill takes the first lines, the new entry stays
    assert guard_ops({"Files & Context": old}, {"Files & Context": op})[1] == []


def test_through_the_guard_and_the_spill_the_edit_stays_and_the_oldest_reads_go_to_the_archive():
    section = "Files & Context"
    lines: list[str] = []
    while body_tokens("\n".join([*lines, f"- src/module_{len(lines)}.py — read"])) <= SECTION_BUDGETS[section]:
        lines.append(f"- src/module_{len(lines)}.py — read")
    old = "\n".join(lines)
    edited = "src/importers/supplier_encodings/nordhavn_loader.py"
    assert body_tokens(old) <= SECTION_BUDGETS[section] < body_tokens(f"{old}\n- {edited} — edited")
    op = files_op(old, trail_of(session((f"sed -i '5c\\    x' {edited}", ""))), SECTION_BUDGETS[section], [])
    ops, refused = guard_ops({section: old}, {section: op})
    assert refused == []
    merged, spilled = merge_with_spill(render_sections({section: old}), ops)
    body, count = split_pointer(parse_sections(merged)[section])
    assert body_tokens(parse_sections(merged)[section]) <= SECTION_BUDGETS[section]
    assert any(item.startswith(f"{edited} — edited") for item in bullet_items(body))
    # the section is written newest first: its last lines are the oldest, and they spill first
    assert count == len(spilled) > 0 and [s["item"] for s in spilled] == bullet_items(old)[::-1][:count]


def test_the_section_is_written_newest_first_and_a_rewrite_keeps_the_order_of_what_it_did_not_touch():
    old = "- src/c.py — read\n- src/b.py — read\n- src/a.py — read"  # c read last
    assert files_op(old, trail_of(session(("cat src/c.py", "x"))), 1500, []) == {"op": "KEEP"}
    op = files_op(old, trail_of(session(("cat src/z.py", "x"))), 1500, [])
    assert bullet_items(op["content"]) == ["src/z.py — read", "src/c.py — read", "src/b.py — read", "src/a.py — read"]
    op = files_op(old, trail_of(session(("cat src/a.py", "x"))), 1500, [])
    assert bullet_items(op["content"]) == ["src/a.py — read", "src/c.py — read", "src/b.py — read"]
