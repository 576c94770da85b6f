"""`token_counter=`: the caller's way of counting a call decides the trigger, as in `SummarizationMiddleware`."""

from __future__ import annotations

import pytest
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.state.errors import InvalidInput

HISTORY = [m for i in range(5) for m in (HumanMessage(content=f"step {i}: edit src/mod_{i}.py", id=f"u{i}"),
                                         AIMessage(content=f"edited src/mod_{i}.py", id=f"a{i}"))]


def run(root, counter) -> tuple[int, list[int]]:
    """One model call over the history with a 3 000-token trigger → archives made, sizes the counter saw."""
    seen: list[int] = []

    def counted(messages: list[BaseMessage]) -> int:
        assert all(isinstance(m, BaseMessage) for m in messages)
        seen.append(len(messages))
        return counter(messages)

    with WorkingMemoryMiddleware(model="extractive", root=root, durable=False, session_id="s", min_commit_tokens=1,
                                 trigger=("tokens", 3000), keep=("messages", 2), commit_mode="sync",
                                 token_counter=counted if counter else None) as mw:
        agent = create_agent(scripted("done"), tools=[], middleware=[mw])
        agent.invoke({"messages": [*HISTORY, HumanMessage(content="and now?", id="u9")]})
        return len(mw.engine.list_archives("s")), seen


def test_a_counter_that_sees_a_large_call_starts_the_commit_cl100k_would_not(root):
    archives, seen = run(root, lambda messages: 1000 * len(messages))
    assert archives == 1 and seen, "11 messages at 1 000 tokens each pass the 3 000-token trigger"


def test_without_a_counter_cl100k_decides(root):
    assert run(root, None) == (0, []), "the same call is ~100 cl100k tokens: no commit"


def test_a_counter_that_sees_a_small_call_holds_the_commit_back(root):
    archives, seen = run(root, lambda messages: 1)
    assert archives == 0 and seen


@pytest.mark.parametrize("bad", ["len", 5])
def test_a_counter_must_be_callable(root, bad):
    with pytest.raises(InvalidInput, match="token_counter"):
        WorkingMemoryMiddleware(model="extractive", root=root, token_counter=bad)
    assert not root.exists()


def boom(messages: list) -> int:
    raise RuntimeError("counter boom")


@pytest.mark.parametrize("bad", [boom, lambda messages: -1, lambda messages: 1.5, lambda messages: None])
def test_a_counter_that_cannot_count_is_refused_at_construction(root, bad):
    with pytest.raises(InvalidInput, match="token_counter"):
        WorkingMemoryMiddleware(model="extractive", root=root, token_counter=bad)
    assert not root.exists()


def test_a_counter_whose_provider_is_unreachable_at_construction_is_taken(root, caplog):
    """`ChatAnthropic.get_num_tokens_from_messages` asks Anthropic: an outage then is no reason to refuse it."""
    def offline(messages: list) -> int:
        raise ConnectionError("provider unreachable")

    with WorkingMemoryMiddleware(model="extractive", root=root, token_counter=offline) as mw:
        assert mw.settings.token_counter is offline
    assert any("could not be tried now" in r.getMessage() for r in caplog.records)


def test_a_counter_that_fails_mid_run_is_a_typed_error_naming_it(root):
    calls = []

    def tired(messages: list) -> int:  # counts once (the construction's try), then fails
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("counter boom")
        return 1

    with pytest.raises(InvalidInput, match="token_counter.*RuntimeError: counter boom"):
        run(root, tired)


def test_a_counter_returning_no_count_is_refused(root):
    with pytest.raises(InvalidInput, match="token_counter"):
        run(root, lambda messages: "many")


def test_a_fraction_keep_is_taken_of_the_models_input_limit(root, monkeypatch):
    import workmem.graphs.agent.call as middleware

    seen: list[tuple[tuple[str, float], int]] = []
    real = middleware.resolve_keep
    monkeypatch.setattr(middleware, "resolve_keep", lambda keep, limit: seen.append((keep, limit)) or real(keep, limit))
    model = scripted("done")
    model.profile = {"max_input_tokens": 4000}
    with WorkingMemoryMiddleware(model="extractive", root=root, durable=False, session_id="s", min_commit_tokens=1,
                                 trigger=("tokens", 300), keep=("fraction", 0.25), commit_mode="sync") as mw:
        create_agent(model, tools=[], middleware=[mw]).invoke(
            {"messages": [*HISTORY, HumanMessage(content="and now?", id="u9")]})
        assert mw.engine.keep == ("messages", 10), "the engine it built keeps its default, not 25 % of 128 000"
        assert mw.engine.session_info("s")["keep"] != ["tokens", 32_000]
    assert seen and all(limit == 4000 for _, limit in seen), seen
    assert real(("fraction", 0.25), 4000) == ("tokens", 1000)
