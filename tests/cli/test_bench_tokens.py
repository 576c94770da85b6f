"""The token benchmark's fakes and layers (tests/benchmarks/bench_tokens.py): the extractor rule holds,
its workmem answers fit the schema, and a short session gives the same counts twice."""

from __future__ import annotations

import json
import sys

import pytest
from langchain_core.messages import HumanMessage
from paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

from token_fakes import budget, fixed_reply, memory_ops, section_of, select, summary_units  # noqa: E402
from token_layers import LAYERS, run_layer  # noqa: E402

from workmem.nodes.formatting import format_messages  # noqa: E402
from workmem.nodes.prompts import update_prompt  # noqa: E402
from workmem.state.memory import render_sections  # noqa: E402
from workmem.state.ops import CREATE_TOOL_NAME, UPDATE_TOOL, UPDATE_TOOL_NAME, parse_update_args  # noqa: E402
from workmem.state.tokens import count_tokens  # noqa: E402

TEXTS = [f"Priya moved the cache of app/cache_{i}.py to Redis on 2025-03-{i % 28 + 1:02d}. Nothing else here."
         for i in range(40)]


def test_budget_is_fifteen_percent_capped_at_800():
    assert budget(1000) == 150
    assert budget(10_000) == 800


def test_select_keeps_the_newest_informative_sentences_within_budget():
    units = [(None, text) for text in TEXTS]
    chosen = select(units)
    covered = count_tokens("\n".join(TEXTS))
    assert sum(count_tokens(text) + 1 for _, text in chosen) <= budget(covered)
    assert all("Nothing else" not in text for _, text in chosen)  # uninformative sentences never count
    assert chosen[-1][1].startswith("Priya moved the cache of app/cache_39.py")  # newest first, listed in order


@pytest.mark.parametrize(("sentence", "section"), [
    ("KeyError: 'field_12' in the nightly export.", "Errors & Corrections"),
    ("No, do not change lib/sync.py; keep the limit at 5.", "Errors & Corrections"),
    ("Last CI run on runner ci-3: 512 passed, 2 failed in 88.1s.", "Key Facts & Decisions"),
    ("TODO: add a regression test for ticket OPS-1001.", "Open Issues"),
    ("Should we move the cache to Redis?", "Open Issues"),
    ("Please refactor the loader so batch 12 runs faster.", "Task & Goals"),
    ("The slowest test is in app/loader.py today.", "Files & Context"),
], ids=["exception-line", "correction", "ci-summary-is-no-error", "todo", "question", "request", "path"])
def test_sections_follow_the_extractive_models_cues(sentence, section):
    assert section_of(sentence) == section


def test_fixed_reply_is_sixty_tokens():
    assert count_tokens(fixed_reply()) == 60


def test_workmem_answers_are_valid_update_ops():
    wm = render_sections({"Session Title": "Cache", "Key Facts & Decisions": "- Decided on Redis 7 on 2025-01-02."})
    stored = [{"seq": i + 1, "turn_id": f"t{i}", "role": "user", "parts": [{"type": "text", "text": t}]}
              for i, t in enumerate(TEXTS[:12])]
    args = memory_ops(update_prompt(wm, format_messages(stored))[1][1], UPDATE_TOOL_NAME)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(args, UPDATE_TOOL["function"]["parameters"])
    assert parse_update_args(args).ok
    created = memory_ops("<messages>\n[#1 user]\n" + TEXTS[0] + "\n</messages>", CREATE_TOOL_NAME)
    assert any(body for body in created["sections"].values())


def test_summary_units_read_both_summarisers_prompts():
    sm = HumanMessage('Intro\n<messages>\nMessages to summarize:\n<message type="human">a &lt;b&gt;</message>\n'
                      '<message type="ai">c</message>\n</messages>')
    assert summary_units([sm]) == [(None, "a <b>"), (None, "c")]
    ask = HumanMessage("This is summary of the conversation so far: old\n\nExtend this summary by taking into "
                       "account the new messages above:")
    assert summary_units([HumanMessage("x"), ask]) == [(None, "old"), (None, "x")]


@pytest.mark.parametrize("layer", LAYERS)
def test_counts_are_exact_and_repeatable(layer):
    turns = TEXTS[:30]
    first, second = (run_layer(layer, turns, fixed_reply(), trigger=1000, keep=4) for _ in range(2))
    assert len(first.agent_calls) == len(turns)
    assert first.agent_calls == second.agent_calls
    assert first.maintenance_calls == second.maintenance_calls
    assert json.dumps(first.agent_parts) == json.dumps(second.agent_parts)
    if layer in ("workmem", "summarization", "langmem"):
        assert first.maintenance_calls, layer
