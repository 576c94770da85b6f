"""What the model sees of tool results: the newest output whole below the offload line, a preview with its
reference above it, older results shrunk only at a commit boundary, an append-only prefix between commits, a large
newest result that never trips the loop breaker — and every preview is the result's own text around one marker line
that names nothing of what it leaves out."""

from __future__ import annotations

import re
from contextlib import contextmanager

import pytest
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from workmem.graphs.agent.call import shown_pinned
from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.context.tool_results import offload_tokens_for
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.synopsis import synopsis
from workmem.state.tokens import count_tokens

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{5,}")
_NUMBER = re.compile(r"(?<![\w.])\d{3,6}(?![\w.])")


def tokens_of(text: str) -> set[str]:
    """The code-like tokens the replay's grounding measure counts (identifiers and 3-6 digit numbers)."""
    words = {w for w in _WORD.findall(text) if "_" in w or re.search(r"\d|[a-z][A-Z]", w)}
    return words | set(_NUMBER.findall(text))


def output(i: int, lines: int = 40) -> str:
    return f"== run {i} ==\n" + "\n".join(f"check_{i}_{j} passed in module_{i}x{j}" for j in range(lines))


@tool
def run_check(i: int) -> str:
    """Run check i."""
    return output(i)


@tool
def dump(i: int) -> str:
    """Dump a large report."""
    return "\n".join(f"row_{j} value_{j}x{i}" for j in range(3_000))


def checks(n: int, name: str = "run_check") -> list[AIMessage]:
    return [*(AIMessage(content="", tool_calls=[{"name": name, "args": {"i": i}, "id": f"c{i}", "type": "tool_call"}])
              for i in range(n)), AIMessage(content="Done.")]


def sent_result(prompt: list, call_id: str) -> str | None:
    return next((m.content for m in prompt if isinstance(m, ToolMessage) and m.tool_call_id == call_id), None)


@contextmanager
def checks_run(root, steps: int, *, keep: tuple[str, int], low_water: float):
    """(model, engine) after an agent called `run_check` `steps` times at a 4 000-token trigger, commits in sync,
    only the newest result kept whole past a commit."""
    model = scripted(*checks(steps))
    with WorkingMemoryEngine(root, durable=False, keep=keep) as engine:
        middleware = WorkingMemoryMiddleware(engine, trigger=("tokens", 4_000), commit_mode="sync",
                                             keep_tool_results=1, low_water=low_water)
        agent = create_agent(model, tools=[run_check], checkpointer=InMemorySaver(), middleware=[middleware])
        agent.invoke({"messages": [HumanMessage("Run the checks.")]}, {"configurable": {"thread_id": "t"}})
        yield model, engine


@pytest.mark.parametrize("mode", ["sync", "background"])
def test_the_call_after_a_result_under_the_line_carries_it_whole(root, mode):
    model = scripted(*checks(3))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[run_check], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, commit_mode=mode)])
        agent.invoke({"messages": [HumanMessage("Run the checks.")]}, {"configurable": {"thread_id": "t"}})
        engine.wait()
        for i, prompt in enumerate(model.prompts[1:]):
            assert sent_result(prompt, f"c{i}") == output(i), "the newest output, whole"


def test_a_result_over_the_line_is_previewed_with_its_reference(root):
    model = scripted(*checks(1, "dump"))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[dump], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, offload_tokens=2_000)])
        agent.invoke({"messages": [HumanMessage("Dump it.")]}, {"configurable": {"thread_id": "t"}})
        shown = sent_result(model.prompts[1], "c0")
        whole = dump.invoke({"i": 0})
        assert shown != whole and count_tokens(shown) <= 3_000
        assert 'read_tool_result(ref="seq:3"' in shown and shown.startswith("row_0 value_0x0")


def test_older_results_shrink_only_at_a_commit_boundary_and_the_prefix_only_grows_between(root):
    with checks_run(root, 12, keep=("messages", 8), low_water=0.9) as (model, engine):
        assert engine.session_info("t")["commit_count"] >= 1, "the premise: a commit ran"
        memories = [next((m.text for m in p if m.additional_kwargs.get("workmem") == "summary"), "")
                    for p in model.prompts]
        shrunk_at = None
        for n, (before, after) in enumerate(zip(model.prompts, model.prompts[1:], strict=False), start=1):
            if memories[n] != memories[n - 1]:
                shrunk_at = shrunk_at or n
                continue  # a commit: the prefix may change here, and only here
            assert [m.text for m in after[:len(before)]] == [m.text for m in before], f"call {n}: append-only"
        assert shrunk_at is not None
        kept = model.prompts[shrunk_at]
        results = [m for m in kept if isinstance(m, ToolMessage)]
        assert len(results) >= 2, "the commit kept more than the newest result"
        assert results[-1].content == output(int(results[-1].tool_call_id[1:])), "the newest kept whole"
        assert "[… tool result seq:" in results[0].content, "an older one shrunk at the boundary"


def test_a_commit_keeps_the_messages_that_fit_as_the_next_call_shows_them(root):
    # older results past the boundary show as their synopsis (128 tokens at a 4 000 trigger, not 524): the low-water
    # mark counts them so, so the commit keeps more steps in view for the same share of the trigger
    with checks_run(root, 12, keep=("messages", 20), low_water=0.7) as (model, engine):
        first = next(n for n, p in enumerate(model.prompts) if any(m.additional_kwargs.get("workmem") == "summary"
                                                                   for m in p))
        results = [m for m in model.prompts[first] if isinstance(m, ToolMessage)]
        assert len(results) >= 5, "steps whose results show as synopses stay in view (at stored sizes: two)"
        assert all("[… tool result seq:" in m.content for m in results[:-1]) and "[…" not in results[-1].content
        shown = sum(count_tokens(m.text) for m in model.prompts[first])
        assert shown <= 0.7 * 4_000, "still within the low-water share"
        seqs = [m["seq"] for a in engine.list_archives("t") for m in engine.archive_messages("t", a["archive_id"])]
        seqs += [m["seq"] for m in engine.live_messages("t")]
        assert seqs == list(range(1, 2 * 12 + 3)), "every message stored once, archived or live"


def test_a_call_over_the_trigger_commits_even_when_the_keep_fits_as_shown(root):
    # keep 20 messages fits the low-water share once older results count as synopses; the commit must still come
    # at the trigger (covering at least the floor), or every call after it grows past the trigger
    with checks_run(root, 30, keep=("messages", 20), low_water=0.7) as (model, engine):
        sizes = [sum(count_tokens(m.text) for m in prompt) for prompt in model.prompts]
        assert engine.session_info("t")["commit_count"] >= 4
        assert max(sizes) <= 4_000 + count_tokens(output(0)), f"a call grew past the trigger: {max(sizes)}"


def test_a_large_newest_result_does_not_trip_the_loop_breaker(root):
    @tool
    def big(i: int) -> str:
        """A large output."""
        return "\n".join(f"entry_{i}_{j} = {j * 7}" for j in range(900))

    model = scripted(*checks(6, "big"))
    with WorkingMemoryEngine(root, durable=False, keep=("messages", 2)) as engine:
        middleware = WorkingMemoryMiddleware(engine, trigger=("tokens", 6_000), commit_mode="sync")
        agent = create_agent(model, tools=[big], checkpointer=InMemorySaver(), middleware=[middleware])
        agent.invoke({"messages": [HumanMessage("Collect the entries.")]}, {"configurable": {"thread_id": "t"}})
        assert count_tokens(big.invoke({"i": 0})) > 6_000, "the premise: one result alone is over the trigger"
        assert engine.call_state("t").counters.breaker_at is None, "never engaged by the newest result"
        last = agent.get_state({"configurable": {"thread_id": "t"}}).values["workmem_last_call"]
        assert "breaker" not in last and not any(e["event"] == "loop_breaker_engaged" for e in last["events"])


def test_the_marker_line_names_no_token_of_the_omitted_part():
    text = "\n".join(f"line {j}: handler_{j} calls resolve_{j}x and parseArgs{j}" for j in range(2_000))
    shown = synopsis(text, tool="read_log", ref="seq:7", limit_tokens=300)
    lines = shown.split("\n")
    markers = [line for line in lines if line.startswith("[… tool result seq:7")]
    assert len(markers) == 1, "one marker line"
    cut = lines.index(markers[0])
    head, tail = "\n".join(lines[:cut]), "\n".join(lines[cut + 1:])
    assert text.startswith(head + "\n") and text.endswith("\n" + tail), "contiguous slices of the result"
    omitted = text[len(head):len(text) - len(tail)]
    measurements = {group for n in (len(text), len(omitted), len(head), count_tokens(text))
                    for group in f"{n:,}".split(",")}
    named = tokens_of(markers[0]) & tokens_of(omitted)
    assert named <= measurements, f"the marker names only its own sizes and offset, not {named - measurements}"
    assert not {t for t in named if not t.isdigit()}, "no identifier of the omitted part"


def test_the_pinned_message_is_its_first_lines_and_one_marker_naming_nothing_it_leaves_out():
    text = "Fix the flaky import.\n" + "\n".join(f"step {j}: call setup_{j}() then verify_{j}x" for j in range(400))
    pinned = {"role": "user", "parts": [{"type": "text", "text": text}], "meta": {},
              "tokens": count_tokens(text), "lc": HumanMessage(text, id="task")}
    shown = shown_pinned(pinned, 200)
    lines = shown["lc"].content.split("\n")
    assert shown["tokens"] <= 200 + 40 and shown["lc"].id == "task"
    assert text.startswith("\n".join(lines[:-1]) + "\n"), "the message's own first lines"
    omitted = text[len("\n".join(lines[:-1])):]
    left_out = str(len(text.split("\n")) - len(lines[:-1]))
    assert tokens_of(lines[-1]) & tokens_of(omitted) <= {left_out}, "only the count of the lines left out"
    assert shown_pinned(pinned, 10_000) is pinned, "a short message stays whole"


def test_the_offload_line_is_absolute_never_a_share_of_the_trigger():
    assert offload_tokens_for(8_000, 128_000) == offload_tokens_for(32_000, 128_000) == 8_000
    assert offload_tokens_for(8_000, 1_000_000) == 20_000
    assert offload_tokens_for(8_000, 128_000, 1_234) == 1_234
