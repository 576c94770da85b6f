"""Every path of the commit graph, driven by a scripted model through the real engine.

Each case asserts the route taken (the node sequence recorded in `archive.json` `model.route`) and
what was stored. A first commit with a full create answer gives the session a v2 working memory, so
the cases below exercise the update prompt and its fallbacks on top of a good memory.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
from fakes import (
    CREATE,
    UPDATE,
    create_call,
    fenced_json_reply,
    invalid_call,
    long_session,
    scripted,
    text_reply,
    transport_error,
    valid_update_call,
)
from langchain_core.messages import AIMessage

import workmem.graphs.commit
import workmem.nodes.generate
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes import extractive_fallback
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.nodes.formatting import HEADER_RE
from workmem.state.memory import SECTIONS, parse_sections
from workmem.state.ops import update_tool
from workmem.state.tokens import count_tokens

HEAD = ["slice_turns", "load_memory"]
TAIL = ["persist"]  # the archive records the route up to persist; the run then ends in `report`
ONE_CHUNK = ["generate", "validate", "guard", "merge"]

BASE = {
    "Session Title": "Fix the CSV parser",
    "Current State": "Reading src/parser.py to find the delimiter bug.",
    "Task & Goals": "- Fix delimiter detection in src/parser.py",
    "Key Facts & Decisions": "- Decided on 2024-05-14 to use csv.Sniffer because Nordhavn changes formats.",
    "Files & Context": "- src/parser.py\n- tests/test_parser.py",
    "Errors & Corrections": "- ValueError: missing columns in test_brightline",
    "Open Issues": "- Confirm the encoding of the Nordhavn feed",
}

FIRST_TURNS = [
    {"role": "user", "content": "Please fix the CSV parser in src/parser.py, Nordhavn feeds fail."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "src/parser.py"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "def parse(text): return text.split(',')"},
    {"role": "assistant", "content": "The parser hard-codes a comma delimiter."},
]
SECOND_TURNS = [
    {"role": "user", "content": "Use csv.Sniffer and keep tests/test_parser.py green."},
    {"role": "assistant", "content": "Switched to csv.Sniffer; the tests pass now."},
]

# Strings that must never end up in a working memory: what the scripts raise or send as junk.
ERROR_TEXTS = ("boom-7f3a", "APIConnectionError", "Connection error", "ValueError: boom", "not valid JSON",
               "no tool call", "model error", "Traceback", "placeholder", "[object", "None", "null",
               "I cannot do that", "still nothing useful")


@pytest.fixture(autouse=True)
def fast_retry(monkeypatch):
    """Transport-error retries without the backoff sleep."""
    monkeypatch.setattr(workmem.nodes.generate, "retry_delay", lambda backoff_s, attempt: 0.0)


def archive_of(engine: WorkingMemoryEngine, session: str = "s") -> dict[str, Any]:
    archive = engine.working_memory(session)
    assert archive is not None
    return archive


def sections_of(engine: WorkingMemoryEngine, session: str = "s") -> dict[str, str]:
    return parse_sections(archive_of(engine, session)["working_summary"]["markdown"])


def assert_clean(markdown: str) -> None:
    """No error text or placeholder stored as memory; exactly the seven sections."""
    for junk in ERROR_TEXTS:
        assert junk not in markdown, f"{junk!r} stored as memory"
    assert list(parse_sections(markdown)) == list(SECTIONS)


def assert_each_message_once(engine: WorkingMemoryEngine, session: str = "s") -> None:
    seqs = [m["seq"] for a in engine.storage.sessions.list_archives(session)
            for m in engine.storage.sessions.archive_messages(session, a["archive_id"])]
    seqs += [m["seq"] for m in engine.storage.sessions.live_messages(session)]
    assert seqs == list(range(1, engine.session_info(session)["total_message_count"] + 1))


def tool_asked(model: Any, call: int) -> str:
    """The tool the model was forced to call on its `call`-th invocation (0-based)."""
    return model.bound[call]["tool_choice"]


def run_second_commit(make_engine, *script: Any) -> tuple[WorkingMemoryEngine, Any, dict[str, Any]]:
    """First commit: a full create answer (v2 WM); then more messages and a second commit playing `script`."""
    model = scripted(create_call(BASE), *script)
    engine = make_engine(model)
    engine.add_messages("s", FIRST_TURNS)
    first = engine.commit("s")
    assert first["status"] == "completed"
    assert sections_of(engine) == BASE
    engine.add_messages("s", SECOND_TURNS)
    result = engine.commit("s")
    return engine, model, result


UPDATE_PATH = [*HEAD, *ONE_CHUNK, *TAIL]
DRAWN_NODES = set(workmem.graphs.commit.compile_commit_graph().get_graph().nodes)
RETRY_THEN_CREATE = ["generate", "validate", "create_retry", "generate", "validate", "guard", "merge"]

# (id, script of the second commit, route of the second commit, degraded, section checks)
CASES = [
    (
        "valid_ops",
        [valid_update_call({"Current State": {"op": "UPDATE", "content": "Sniffer in place; tests pass."},
                            "Key Facts & Decisions": {"op": "APPEND", "items": ["Sniffer limited to ; , and tab"]}})],
        UPDATE_PATH, False,
        {"Current State": "Sniffer in place; tests pass.",
         "Key Facts & Decisions": BASE["Key Facts & Decisions"] + "\n- Sniffer limited to ; , and tab"},
    ),
    (
        "no_tool_call_then_create_prompt",
        [text_reply("I think the session went well."),
         create_call({**BASE, "Current State": "Sniffer in place after a create retry."})],
        [*HEAD, *RETRY_THEN_CREATE, *TAIL], False,
        {"Current State": "Sniffer in place after a create retry.", "Files & Context": BASE["Files & Context"]},
    ),
    (
        "empty_arguments_are_no_call",
        [valid_update_call({}, fill_keep=False),
         create_call({"Current State": "Rewritten after empty arguments."})],
        [*HEAD, *RETRY_THEN_CREATE, *TAIL], False,
        {"Current State": "Rewritten after empty arguments.", "Open Issues": BASE["Open Issues"]},
    ),
    (
        "broken_json_recovers_partial_ops",
        [invalid_call('{"sections": {"Current State": {"op": "UPDATE", "content": "Recovered state."}, '
                      '"Open Issues": {"op": "APPEND", "items": ["Check the CI run", "cut off her')],
        [*HEAD, "generate", "validate", "recover", "guard", "merge", *TAIL], False,
        {"Current State": "Recovered state.",
         "Open Issues": BASE["Open Issues"] + "\n- Check the CI run",
         "Task & Goals": BASE["Task & Goals"]},
    ),
    (
        "fenced_json_in_text",
        [fenced_json_reply({"sections": {"Current State": {"op": "UPDATE", "content": "From a fenced block."},
                                         "Task & Goals": {"op": "APPEND", "items": ["Keep tests green"]}}})],
        [*HEAD, "generate", "validate", "recover", "guard", "merge", *TAIL], False,
        {"Current State": "From a fenced block.", "Task & Goals": BASE["Task & Goals"] + "\n- Keep tests green"},
    ),
    (
        "nothing_recoverable_then_create",
        [invalid_call("I cannot do that"), create_call({"Current State": "Created after recover failed."})],
        [*HEAD, "generate", "validate", "recover", "create_retry", "generate", "validate", "guard", "merge", *TAIL],
        False,
        {"Current State": "Created after recover failed.", "Key Facts & Decisions": BASE["Key Facts & Decisions"]},
    ),
    (
        "nothing_recoverable_twice_then_extractive",
        [invalid_call("I cannot do that"), text_reply("still nothing useful")],
        [*HEAD, "generate", "validate", "recover", "create_retry", "generate", "validate", "extractive_fallback",
         "guard", "merge", *TAIL],
        True,
        {"Session Title": BASE["Session Title"]},
    ),
    (
        "client_validation_error_is_malformed_output",
        [ValueError("boom-7f3a: arguments are a list"), create_call({"Current State": "After a bad answer."})],
        [*HEAD, "generate", "validate", "recover", "create_retry", "generate", "validate", "guard", "merge", *TAIL],
        False,
        {"Current State": "After a bad answer."},
    ),
    (
        "transport_errors_every_time_then_extractive",
        [transport_error("Connection error. boom-7f3a sk-abcdefghijklmnopqrstuvwxyz")] * 3,
        [*HEAD, "generate", "generate", "generate", "extractive_fallback", "guard", "merge", *TAIL], True,
        {"Session Title": BASE["Session Title"], "Errors & Corrections": BASE["Errors & Corrections"]},
    ),
    (
        "transport_error_then_success_is_retried",
        [transport_error(), valid_update_call({"Current State": {"op": "UPDATE", "content": "Second try."}})],
        [*HEAD, "generate", *ONE_CHUNK, *TAIL], False,
        {"Current State": "Second try."},
    ),
]


@pytest.mark.parametrize("schema", ["ref", "inline"])
@pytest.mark.parametrize(("script", "route", "degraded", "expected"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_path_over_existing_memory(make_engine, monkeypatch, script, route, degraded, expected, schema):
    """Every malformed-output path routes the same with the compact (`$ref`) and the inlined update schema."""
    monkeypatch.setenv("WORKMEM_TOOL_SCHEMA", schema)
    engine, model, result = run_second_commit(make_engine, *script)
    sent = [b["tools"][0] for b in model.bound if b.get("tools") and b["tools"][0]["function"]["name"] == UPDATE]
    assert sent and all(tool == update_tool(inline=schema == "inline") for tool in sent)

    assert result["status"] == "completed", result
    archive = archive_of(engine)
    assert archive["archive_id"] == "archive_002"
    assert archive["model"]["route"] == route
    assert set(route) <= DRAWN_NODES, "every route name is a node of the drawing"
    assert result["route"] == [*route, "report"]
    assert archive["model"]["degraded"] is degraded
    assert engine.task(result["task_id"])["result"]["degraded"] is degraded
    assert model.calls == 1 + len(script)  # the script was played exactly, nothing more
    sections = sections_of(engine)
    for name, body in expected.items():
        assert sections[name] == body, name
    for name in SECTIONS:  # a good WM is never replaced by an empty one
        assert sections[name].strip(), name
    assert_clean(archive["working_summary"]["markdown"])
    assert_each_message_once(engine)
    assert engine.storage.sessions.live_messages("s") == []


def test_update_prompt_first_then_create_prompt_on_retry(make_engine):
    """After a no-call answer the same chunk is asked again with the create tool forced."""
    engine, model, _ = run_second_commit(make_engine, text_reply("no tools today"), create_call(BASE))
    assert [tool_asked(model, i) for i in range(3)] == [CREATE, UPDATE, CREATE]
    # both prompts show the current WM: the create retry must be able to carry it forward
    assert "Reading src/parser.py to find the delimiter bug." in model.prompt_text(1)
    assert "Confirm the encoding of the Nordhavn feed" in model.prompt_text(2)
    assert "<previous_memory>" in model.prompt_text(2)
    assert "csv.Sniffer" in model.prompt_text(2)


def api_refusal(status: int = 401) -> Exception:
    """An `openai.AuthenticationError` (or another 4xx), as the client raises for a bad key or model name."""
    import httpx2
    import openai

    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    response = httpx2.Response(status, request=request, json={"error": {"message": "refused"}})
    error = {401: openai.AuthenticationError, 404: openai.NotFoundError}[status]
    return error("Incorrect API key provided: sk-abc123def456ghi789jkl", response=response, body=None)


def test_a_call_that_raises_is_asked_again_and_a_fallback_names_the_error(make_engine):
    """A typo in model_kwargs makes the client raise `TypeError` on every call (an OpenAI-compatible server's body
    without `choices` raises too, and may answer the next time): asked once more with the create prompt, and the
    fallback names the exception, not "no usable tool call"; a raised call is a failed attempt, not an answer."""
    error = TypeError("create() got an unexpected keyword 'bogus'")
    engine, model, result = run_second_commit(make_engine, error, error)
    archive = archive_of(engine)
    assert archive["model"]["route"] == [*HEAD, "generate", "validate", "recover", "create_retry", "generate",
                                         "validate", "extractive_fallback", "guard", "merge", *TAIL]
    assert model.calls == 3 and archive["model"]["usage"]["calls"] == 0
    assert archive["model"]["error"] == "TypeError: create() got an unexpected keyword 'bogus'"
    assert "no usable tool call" not in result["reason"] and "TypeError" in result["reason"]
    engine, model, result = run_second_commit(make_engine, KeyError("Response missing 'choices' key"),
                                              create_call(BASE))
    assert result["status"] == "completed" and not result.get("degraded"), "the second answer is used"
    assert archive_of(engine)["model"]["error"] is None and not engine.task(result["task_id"])["error"], \
        "a call the retry recovered from is no error of the commit"


@pytest.mark.parametrize("status", [401, 404])
def test_api_refusal_is_a_visible_model_error_not_malformed_output(make_engine, status):
    """A bad key or model name is not retried and not spent on the create retry: it goes straight to the
    fallback, and the task row says why, redacted."""
    engine, model, result = run_second_commit(make_engine, api_refusal(status))
    archive = archive_of(engine)
    assert archive["model"]["route"] == HEAD + ["generate", "validate", "extractive_fallback", "guard", "merge"] + TAIL
    assert archive["model"]["degraded"] is True and model.calls == 2  # the first commit + one refused call
    task = engine.task(result["task_id"])
    assert task["status"] == "completed" and "Incorrect API key provided" in task["error"]
    assert "sk-abc123def456ghi789jkl" not in task["error"]
    assert task["error"].endswith(archive["model"]["error"]), "the task says who stood in for whom, and why"
    assert archive["model"]["fallback"] == "workmem-extractive" and archive["model"]["name"]
    assert_clean(archive["working_summary"]["markdown"])


def test_transport_error_text_is_redacted_in_its_own_field_not_memory(make_engine):
    """The model error is recorded (redacted) for debugging, never as memory."""
    secret = "sk-abcdefghijklmnopqrstuvwxyz0123"
    engine, _, result = run_second_commit(make_engine, *[transport_error(f"Connection error. {secret}")] * 3)
    state = engine.runner.graph.get_state({"configurable": {"thread_id": engine.task(result["task_id"])["thread_id"]}})
    (error,) = state.values["model_errors"]
    assert "Connection error" in error and secret not in error
    assert state.values["usage"]["failed_attempts"] == 3 and state.values["usage"]["calls"] == 0
    archive = archive_of(engine)
    assert secret not in archive["working_summary"]["markdown"]
    assert archive["model"]["usage"]["failed_attempts"] == 3 and archive["model"]["error"] == error
    assert engine.task(result["task_id"])["error"].endswith(error)


# -- the create path --------------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "expected_empty"), [
    ({"Session Title": "Fix the CSV parser", "Current State": "Just started."}, SECTIONS[2:]),
    ({"Session Title": "Fix the CSV parser", "Open Issues": "- Which encoding?", "Task & Goals": "   "},
     [s for s in SECTIONS if s not in ("Session Title", "Open Issues")]),
], ids=["title_and_state_only", "blank_section_is_empty"])
def test_first_commit_create_answer_missing_sections(make_engine, given, expected_empty):
    model = scripted(create_call(given))
    engine = make_engine(model)
    engine.add_messages("s", FIRST_TURNS)
    result = engine.commit("s")
    archive = archive_of(engine)
    assert result["status"] == "completed"
    assert tool_asked(model, 0) == CREATE
    sections = sections_of(engine)
    assert list(sections) == list(SECTIONS)
    for name in SECTIONS:
        if name in expected_empty:
            assert sections[name] == "", name
        else:
            assert sections[name] == given[name].strip(), name
    assert_clean(archive["working_summary"]["markdown"])


def test_first_commit_empty_create_answer_retries_then_falls_back(make_engine):
    """A create answer with no usable section fails its schema: create retry once, then extractive."""
    model = scripted(create_call({}), create_call({}))
    engine = make_engine(model)
    engine.add_messages("s", FIRST_TURNS)
    engine.commit("s")
    archive = archive_of(engine)
    if archive["model"]["route"] == [*HEAD, *ONE_CHUNK, *TAIL]:
        pytest.fail("an empty create answer was accepted as the working memory")
    assert archive["model"]["route"] == [*HEAD, *RETRY_THEN_CREATE[:-2], "extractive_fallback", "guard", "merge",
                                         *TAIL]
    assert archive["model"]["degraded"] is True
    assert "src/parser.py" in sections_of(engine)["Files & Context"]


def test_create_answer_missing_sections_over_existing_memory_keeps_them(make_engine):
    engine, _, _ = run_second_commit(make_engine, text_reply("no call"),
                                     create_call({"Current State": "Only the state was rewritten."}))
    sections = sections_of(engine)
    assert sections == {**BASE, "Current State": "Only the state was rewritten."}


def test_create_answer_over_existing_memory_goes_through_the_guards(make_engine):
    """A worse create answer cannot replace a good WM: every guarded section refuses the loss."""
    worse = {
        "Session Title": "Cooking recipes",  # shares no word with the old title → kept
        "Current State": "Everything is fine.",  # volatile → replaced
        "Task & Goals": "- Ship it",  # volatile → replaced
        "Key Facts & Decisions": "- Fine",  # loses the anchors (2024-05-14, Nordhavn, decided) → salvaged as APPEND
        "Files & Context": "- docs/README.md",  # loses src/parser.py → KEEP + APPEND of the new path
        "Errors & Corrections": "- Nothing went wrong",  # append-only
        "Open Issues": "- Nothing open",  # silently drops the encoding issue → restored
    }
    engine, _, result = run_second_commit(make_engine, text_reply("no call"), create_call(worse))
    assert result["route"] == [*HEAD, *RETRY_THEN_CREATE, *TAIL, "report"]
    s = sections_of(engine)
    assert s["Session Title"] == BASE["Session Title"]
    assert s["Current State"] == "Everything is fine."
    assert s["Task & Goals"] == "- Ship it"
    assert s["Key Facts & Decisions"].startswith(BASE["Key Facts & Decisions"])
    assert s["Files & Context"] == BASE["Files & Context"] + "\n- docs/README.md"
    assert s["Errors & Corrections"] == BASE["Errors & Corrections"] + "\n- Nothing went wrong"
    assert "- [silently dropped, restored] Confirm the encoding of the Nordhavn feed" in s["Open Issues"]
    assert "Nothing open" in s["Open Issues"]


def test_legacy_memory_goes_through_the_create_prompt(make_engine):
    """A previous free-form summary is upgraded: create prompt with the legacy text as previous memory."""
    legacy = "We were fixing the CSV parser; the Nordhavn feed uses semicolons (legacy-note-41)."
    model = scripted(create_call({"Session Title": "Fix the CSV parser", "Current State": "Upgraded."}))
    engine = make_engine(model)
    stored = engine.add_messages("s", FIRST_TURNS)
    archive = {"archive_id": "archive_001", "session_id": "s", "task_id": None, "created_at": "2024-01-01T00:00:00Z",
               "source_turn_range": {"start_turn_id": "t1", "end_turn_id": "t1", "start_seq": 1, "end_seq": 2},
               "working_summary": {"markdown": legacy, "sections": {}}, "preserved_tail": {},
               "expansion": {"archive_index": []}, "model": {"name": "legacy", "degraded": False, "route": []},
               "tokens": {"covered": 0, "working_memory": 0}}
    engine.storage.sessions.write_archive("s", archive, stored[:2], legacy, "legacy summary")
    result = engine.commit("s")
    assert result["archive_id"] == "archive_002"
    assert tool_asked(model, 0) == CREATE
    assert "legacy-note-41" in model.prompt_text(0)
    assert sections_of(engine)["Current State"] == "Upgraded."
    assert_each_message_once(engine)


# -- nothing to do ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("keep", "reason"), [(10, "all_within_keep_window"), (0, "no_messages")])
def test_nothing_to_cover_is_skipped_without_a_model_call(make_engine, keep, reason):
    model = scripted(create_call(BASE))
    engine = make_engine(model)
    engine.add_messages("s", FIRST_TURNS)
    if reason == "no_messages":
        engine.commit("s")
    result = engine.commit("s", keep_recent_count=keep)
    assert (result["status"], result["reason"]) == ("skipped", reason)
    assert model.calls == (1 if reason == "no_messages" else 0)
    task = engine.task(result["task_id"])
    assert task["status"] == "skipped"
    # a skipped run deletes its thread
    assert engine.runner.checkpointer.get_tuple({"configurable": {"thread_id": task["thread_id"]}}) is None


def test_keep_recent_count_leaves_the_tail_live(make_engine):
    model = scripted(create_call(BASE))
    engine = make_engine(model)
    engine.add_messages("s", [*FIRST_TURNS, *SECOND_TURNS])
    engine.commit("s", keep_recent_count=2)
    archive = archive_of(engine)
    assert archive["source_turn_range"]["end_seq"] == 4
    assert archive["preserved_tail"]["head_seq"] == 5
    assert [m["seq"] for m in engine.storage.sessions.live_messages("s")] == [5, 6]
    assert "[#5 " not in model.prompt_text(0)
    assert_each_message_once(engine)


# -- chunking ---------------------------------------------------------------------------------------


class RecordingExtractive(ExtractiveChatModel):
    """The extractive model, remembering the seqs of the transcript of each call."""

    seen: list[list[int]] = []

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        text = "\n".join(m.text for m in messages)
        self.seen.append([int(m.group(1)) for line in text.splitlines() if (m := HEADER_RE.match(line))])
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def test_long_range_is_split_into_checkpointed_chunks(make_engine):
    model = RecordingExtractive(seen=[])
    engine = make_engine(model, chunk_tokens=300)
    engine.add_messages("s", long_session(12))
    result = engine.commit("s", keep_recent_count=2)
    assert result["status"] == "completed"

    archive = archive_of(engine)
    state = engine.runner.graph.get_state({"configurable": {"thread_id": engine.task(result["task_id"])["thread_id"]}})
    chunks = state.values["chunks"]
    assert len(chunks) >= 3
    # consecutive chunks covering exactly the covered range
    assert chunks[0][0] == archive["source_turn_range"]["start_seq"] == 1
    assert chunks[-1][1] == archive["source_turn_range"]["end_seq"] == 22
    assert all(b[0] == a[1] + 1 for a, b in zip(chunks, chunks[1:], strict=False))
    # one model call per chunk, each seeing only its own messages
    assert model.seen == [list(range(a, b + 1)) for a, b in chunks]
    # the route loops once per chunk
    assert archive["model"]["route"] == [*HEAD, *ONE_CHUNK * len(chunks), *TAIL]
    # every chunk's merge was checkpointed: a checkpoint per chunk_index 1..n with the WM so far
    history = list(engine.runner.graph.get_state_history(
        {"configurable": {"thread_id": engine.task(result["task_id"])["thread_id"]}}))
    after_merge = {s.values.get("chunk_index") for s in history if s.next in (("generate",), ("persist",))
                   and s.values.get("route", [""])[-1] == "merge"}
    assert after_merge == set(range(1, len(chunks) + 1))
    # the later chunks' facts are in the final WM, merged on top of the first chunk's
    wm = archive["working_summary"]["markdown"]
    assert "module_0.py" in wm and "module_10.py" in wm
    assert_each_message_once(engine)


def test_huge_message_is_clipped_in_the_prompt_only(make_engine):
    huge = "row;" + " ".join(f"value{i}" for i in range(6000)) + " tail-marker-93"
    model = RecordingExtractive(seen=[])
    captured: list[str] = []
    original = RecordingExtractive._generate

    def spy(self, messages, stop=None, run_manager=None, **kwargs):
        captured.append("\n".join(m.text for m in messages))
        return original(self, messages, stop=stop, run_manager=run_manager, **kwargs)

    engine = make_engine(model, clip_tokens=200, chunk_tokens=2000)
    engine.add_messages("s", [{"role": "user", "content": "Load the feed in data/feed.csv"},
                              {"role": "assistant", "content": huge}])
    RecordingExtractive._generate = spy
    try:
        engine.commit("s")
    finally:
        RecordingExtractive._generate = original
    assert len(captured) == 1
    assert "…[clipped " in captured[0]
    assert "tail-marker-93" in captured[0]  # head + tail kept
    assert "value3000 " not in captured[0]
    stored = engine.storage.sessions.archive_messages("s", "archive_001")
    assert stored[1]["parts"][0]["text"] == huge


def test_a_message_of_many_tool_calls_fits_one_prompt_and_is_archived_whole(make_engine):
    calls = [{"id": f"c{i}", "type": "function",
              "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/mod_{i}.py"})}}
             for i in range(400)]
    results = [{"role": "tool", "tool_call_id": f"c{i}", "content": f"contents of mod_{i}"} for i in range(400)]
    model = PromptSpy(prompts=[])
    engine = make_engine(model, clip_tokens=2000, chunk_tokens=6000)
    engine.add_messages("s", [{"role": "user", "content": "Read every module"},
                              {"role": "assistant", "content": "", "tool_calls": calls}, *results])
    engine.commit("s")
    step = next(p for p in model.prompts if "src/mod_0.py" in p)
    block = step[step.index("assistant]"):].split("\n[#")[0]
    assert "src/mod_399.py" in block and "src/mod_200.py" not in block and count_tokens(block) <= 2000 * 1.05
    stored = engine.storage.sessions.archive_messages("s", "archive_001")
    assert len([p for p in stored[1]["parts"] if p["type"] == "tool_call"]) == 400
    assert_each_message_once(engine)


def test_a_model_failing_on_a_message_of_many_parts_falls_back_with_every_message_once(make_engine):
    calls = [{"id": f"c{i}", "type": "function",
              "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/mod_{i}.py"})}}
             for i in range(400)]
    results = [{"role": "tool", "tool_call_id": f"c{i}", "content": f"contents of mod_{i}"} for i in range(400)]
    engine = make_engine(scripted(*[transport_error()] * 3), clip_tokens=2000, chunk_tokens=6000)
    engine.add_messages("s", [{"role": "user", "content": "Read every module"},
                              {"role": "assistant", "content": "", "tool_calls": calls}, *results])
    result = engine.commit("s")
    assert result["status"] == "completed" and archive_of(engine)["model"]["degraded"] is True
    assert "extractive_fallback" in result["route"]
    files = sections_of(engine)["Files & Context"]
    assert "src/mod_0.py" in files and "src/mod_399.py" in files  # the offline model read the clipped step
    assert_each_message_once(engine)


class PromptSpy(ExtractiveChatModel):
    """The extractive model standing in for one that bills what it reads, keeping every prompt's text."""

    reads_for_free: ClassVar[bool] = False
    prompts: list[str] = []

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.prompts.append("\n".join(m.text for m in messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def _transcript(prompt: str) -> str:
    return prompt[prompt.index("<messages>"):prompt.index("</messages>")]


class OfflineSpy(PromptSpy):
    """The same spy reading for free, as the extractive model does."""

    reads_for_free: ClassVar[bool] = True


def _commit_prompts_of_a_long_output(engine, model, threshold):
    """(explicit commit's prompt, trigger commit's prompt) of a session holding one 3,000-token output."""
    body = " ".join(f"line{i}" for i in range(1500)) + " tail-marker-41"
    assert 2_500 < count_tokens(body) < 3_900
    prompts = []
    for name, commit in [("explicit", lambda s: engine.commit(s, keep_recent_count=0)),
                         ("trigger", lambda s: engine.commit_for_call(s, ("messages", 0), threshold, wait=True))]:
        engine.add_messages(name, [{"role": "user", "content": "Run the suite in tests/"},
                                   {"role": "assistant", "content": body}])
        model.prompts.clear()
        assert commit(name)["status"] == "completed"
        prompt = model.prompts[-1]
        assert "tail-marker-41" in prompt  # the tail of a clipped message is kept
        prompts.append(prompt[prompt.index("line0"):prompt.index("tail-marker-41")])
        archived = engine.storage.sessions.archive_messages(name, "archive_001")
        assert archived[1]["parts"][0]["text"] == body
    return prompts


@pytest.mark.parametrize(("threshold", "clip"),
                         [(64_000, 250), (32_000, 125), (8_000, 64), (4_000, 64), (2 * 10**6, 4_000)])
def test_a_model_commit_a_trigger_started_clips_its_transcript_to_the_trigger(make_engine, threshold, clip):
    # one 3,000-token tool output: whole in the archive, and in the prompt of an explicit commit (the engine's
    # clip_tokens, 4,000), but cut to the trigger's share (1/256, at least 64) in a commit a call started
    model = PromptSpy(prompts=[])
    engine = make_engine(model)
    assert engine.clip_for_trigger(threshold) == clip
    explicit, trigger = _commit_prompts_of_a_long_output(engine, model, threshold)
    assert "…[clipped " not in explicit
    if clip >= 4_000:
        assert "…[clipped " not in trigger
    else:
        assert "…[clipped " in trigger and count_tokens(trigger) <= clip + 40


@pytest.mark.parametrize("spec", [None, "extractive", "workmem-extractive", ExtractiveChatModel()])
def test_the_default_offline_model_reads_for_free_whatever_names_it(root, monkeypatch, spec):
    monkeypatch.delenv("WORKMEM_MODEL", raising=False)
    with WorkingMemoryEngine(root=root, model=spec) as engine:
        assert engine.model.reads_for_free and engine.clip_for_trigger(8_000) == engine.clip_tokens == 4_000


@pytest.mark.parametrize("threshold", [8_000, 64_000])
def test_the_offline_model_reads_a_trigger_commit_as_an_explicit_one(make_engine, threshold):
    # reading costs the extractive model nothing: its transcript is not cut to the trigger's share
    model = OfflineSpy(prompts=[])
    engine = make_engine(model)
    assert engine.model.reads_for_free and engine.clip_for_trigger(threshold) == engine.clip_tokens
    explicit, trigger = _commit_prompts_of_a_long_output(engine, model, threshold)
    assert trigger == explicit and "…[clipped " not in trigger


def test_a_trigger_commit_failing_midway_falls_back_on_the_clipped_transcript_with_every_message_once(make_engine,
                                                                                                     monkeypatch):
    # a model's trigger commit at 8k, two chunks: the first merges, the model fails on the second and the offline
    # model commits it from the same transcript — each message cut to 64 tokens, a user's to 256 — while the
    # archive keeps every message whole, once
    long_said = " ".join(f"word{i}" for i in range(600)) + " said-tail-7"
    long_output = " ".join(f"line{i}" for i in range(600)) + " output-tail-9"
    messages = [{"role": "user", "content": "Fix the parser in src/parse.py. " + long_said},
                {"role": "assistant", "content": "Reading it. " + long_output},
                {"role": "user", "content": "Now the lexer. " + long_said},
                {"role": "assistant", "content": "Reading src/lex.py. " + long_output},
                {"role": "user", "content": "Next"}]
    model = scripted(create_call(BASE), *[transport_error()] * 3)
    offline = PromptSpy(prompts=[])
    monkeypatch.setattr(extractive_fallback, "_EXTRACTIVE", offline)
    engine = make_engine(model, chunk_tokens=400)
    engine.add_messages("s", messages)
    assert engine.clip_for_trigger(8_000) == 64
    result = engine.commit_for_call("s", ("messages", 1), 8_000, wait=True)
    assert result["status"] == "completed" and "extractive_fallback" in result["route"]
    assert archive_of(engine)["model"]["degraded"] is True
    first, second = model.prompt_text(0), model.prompt_text(1)
    assert model.prompt_text(1) == model.prompt_text(3)  # every retry of the second chunk read the same prompt
    assert _transcript(offline.prompts[-1]) == _transcript(second)  # and so did the offline model
    for prompt, said in ((first, "Fix the parser"), (second, "Now the lexer")):
        user_block = prompt[prompt.index(said):prompt.index("said-tail-7", prompt.index(said))]
        assert "…[clipped " in user_block and 200 < count_tokens(user_block) <= 256 + 20
    for prompt in (first, second):
        assert "output-tail-9" in prompt and "line300 " not in prompt  # the head and tail of 64 tokens only
    stored = engine.storage.sessions.archive_messages("s", "archive_001")
    assert [m["parts"][0]["text"] for m in stored] == [m["content"] for m in messages[:4]]
    assert_each_message_once(engine)


def test_archive_object_records_route_model_and_tokens(make_engine):
    engine, model, result = run_second_commit(make_engine, valid_update_call({}))
    archive = archive_of(engine)
    assert archive["task_id"] == result["task_id"]
    assert archive["model"]["name"]
    covered = engine.storage.sessions.archive_messages("s", "archive_002")
    assert archive["tokens"]["covered"] == sum(m["tokens"] for m in covered)
    assert archive["source_turn_range"]["start_seq"] == 5
    assert [e["archive_id"] for e in archive["expansion"]["archive_index"]] == ["archive_001", "archive_002"]
    folder = engine.storage.sessions.session_dir("s") / "history" / "archive_002"
    on_disk = json.loads((folder / "archive.json").read_text())
    assert on_disk["model"]["route"] == archive["model"]["route"]


# -- the create prompt's own paths (first commit) and the per-chunk retry ---------------------------

FIRST_COMMIT_CASES = [
    ("valid_create", [create_call(BASE)], [*HEAD, *ONE_CHUNK, *TAIL], False),
    ("fenced_create_json_is_repaired_in_validate", [fenced_json_reply({"sections": BASE})],
     [*HEAD, *ONE_CHUNK, *TAIL], False),
    ("broken_create_json_closed_by_repair",
     [invalid_call(json.dumps({"sections": BASE})[:-2] + ",", name=CREATE)], [*HEAD, *ONE_CHUNK, *TAIL], False),
    ("no_call_then_create", [text_reply("Sure!"), create_call(BASE)], [*HEAD, *RETRY_THEN_CREATE, *TAIL], False),
    ("no_call_twice_then_extractive", [text_reply("Sure!"), text_reply("Done.")],
     [*HEAD, *RETRY_THEN_CREATE[:-2], "extractive_fallback", "guard", "merge", *TAIL], True),
    ("transport_errors_on_the_retry_then_extractive", [text_reply("Sure!"), *[transport_error()] * 3],
     [*HEAD, "generate", "validate", "create_retry", "generate", "generate", "generate", "extractive_fallback",
      "guard", "merge", *TAIL], True),
]


@pytest.mark.parametrize(("script", "route", "degraded"), [c[1:] for c in FIRST_COMMIT_CASES],
                         ids=[c[0] for c in FIRST_COMMIT_CASES])
def test_first_commit_paths(make_engine, script, route, degraded):
    model = scripted(*script)
    engine = make_engine(model)
    engine.add_messages("s", FIRST_TURNS)
    engine.commit("s")
    archive = archive_of(engine)
    assert archive["model"]["route"] == route
    assert set(route) <= DRAWN_NODES, "every route name is a node of the drawing"
    assert archive["model"]["degraded"] is degraded
    assert model.calls == len(script)
    assert all(tool_asked(model, i) == CREATE for i in range(model.calls))
    sections = sections_of(engine)
    if degraded:  # the extractive model read the transcript
        assert "src/parser.py" in sections["Files & Context"]
    else:
        assert sections == BASE
    assert_clean(archive["working_summary"]["markdown"])


def test_each_chunk_gets_its_own_create_retry(make_engine):
    """The retry is per chunk: using it on chunk 1 does not send chunk 2 straight to the fallback."""
    model = scripted(
        create_call(BASE),  # chunk 0: create prompt, valid
        text_reply("no"), create_call({"Current State": "Chunk one."}),  # chunk 1: retry used
        text_reply("no"), create_call({"Current State": "Chunk two."}),  # chunk 2: its own retry
    )
    engine = make_engine(model, chunk_tokens=30)  # one message per chunk
    engine.add_messages("s", [*FIRST_TURNS[:1], FIRST_TURNS[3], *SECOND_TURNS])
    engine.commit("s", keep_recent_count=1)
    archive = archive_of(engine)
    assert archive["model"]["route"] == [*HEAD, *ONE_CHUNK, *RETRY_THEN_CREATE, *RETRY_THEN_CREATE, *TAIL]
    assert archive["model"]["degraded"] is False
    assert [tool_asked(model, i) for i in range(5)] == [CREATE, UPDATE, CREATE, UPDATE, CREATE]
    assert sections_of(engine)["Current State"] == "Chunk two."
    assert sections_of(engine)["Files & Context"] == BASE["Files & Context"]


# -- recovery of unescaped quotes, end to end -----------------------------------------------------------

UNESCAPED = ('{"sections": {"Current State": {"op": "UPDATE", "content": "User said "ship it" at 10:05"}, '
             '"Open Issues": {"op": "APPEND", "items": ["Profile the "hot" loop", "Rotate certs"]}}}')


def test_unescaped_quotes_recover_whole_values_never_a_fragment(make_engine):
    engine, model, result = run_second_commit(make_engine, invalid_call(UNESCAPED))
    archive = archive_of(engine)
    assert archive["model"]["route"] == [*HEAD, "generate", "validate", "recover", "guard", "merge", *TAIL]
    assert archive["model"]["degraded"] is False
    sections = sections_of(engine)
    assert sections["Current State"] == 'User said "ship it" at 10:05'
    assert sections["Open Issues"].splitlines()[-2:] == ['- Profile the "hot" loop', "- Rotate certs"]


def test_a_value_without_a_valid_end_is_not_recovered(make_engine):
    """Cut off after an inner quote: nothing of it is stored; the create retry runs instead."""
    cut = '{"sections": {"Current State": {"op": "UPDATE", "content": "User said "ship it'
    engine, model, result = run_second_commit(make_engine, invalid_call(cut), create_call(BASE))
    archive = archive_of(engine)
    assert "create_retry" in archive["model"]["route"]
    assert sections_of(engine)["Current State"] == BASE["Current State"]
    assert "User said" not in archive["working_summary"]["markdown"]


# -- guard notes and model usage --------------------------------------------------------------------------


def with_usage(message: AIMessage, input_tokens: int, output_tokens: int) -> AIMessage:
    message.usage_metadata = {"input_tokens": input_tokens, "output_tokens": output_tokens,
                              "total_tokens": input_tokens + output_tokens}
    return message


def test_guard_notes_are_stored_returned_and_kept_across_chunks(make_engine):
    """Chunk 1's title guard and chunk 2's errors guard both end up in archive.json and in the result."""
    model = scripted(
        create_call(BASE),
        valid_update_call({"Session Title": {"op": "UPDATE", "content": "Cooking class"}}),
        valid_update_call({"Errors & Corrections": {"op": "UPDATE", "content": "- a brand new error"}}),
    )
    engine = make_engine(model, chunk_tokens=1_200)
    engine.add_messages("s", FIRST_TURNS)
    engine.commit("s")
    engine.add_messages("s", [{"role": "user", "content": "Chunk one " + "words " * 700},
                              {"role": "assistant", "content": "Chunk two " + "more " * 700}])
    result = engine.commit("s")
    archive = archive_of(engine)
    assert archive["model"]["route"].count("merge") == 2, "two chunks"
    found = {(n["section"], n["guard"], n["action"]) for n in archive["guard_notes"]}
    assert {("Session Title", "title", "rejected"), ("Errors & Corrections", "errors", "demoted")} <= found
    assert archive["guard_notes_total"] == len(archive["guard_notes"]) == 2
    assert result["guard_notes"] == archive["guard_notes"]


def test_model_usage_sums_every_answered_call_including_a_create_retry(make_engine, monkeypatch):
    monkeypatch.setattr(workmem.nodes.generate, "retry_delay", lambda backoff_s, attempt: 0.0)
    model = scripted(
        with_usage(create_call(BASE), 1000, 100),
        transport_error(),
        with_usage(text_reply("Sure."), 700, 10),
        with_usage(create_call({**BASE, "Current State": "Retried."}), 900, 90),
    )
    engine = make_engine(model)
    engine.add_messages("s", FIRST_TURNS)
    first = engine.commit("s")
    assert archive_of(engine)["model"]["usage"] == {"input_tokens": 1000, "output_tokens": 100, "calls": 1,
                                                   "failed_attempts": 0}
    engine.add_messages("s", SECOND_TURNS)
    second = engine.commit("s")
    usage = archive_of(engine)["model"]["usage"]
    assert usage == {"input_tokens": 1600, "output_tokens": 100, "calls": 2, "failed_attempts": 1}
    assert second["usage"] == usage and first["usage"]["calls"] == 1
    assert "create_retry" in archive_of(engine)["model"]["route"]


def test_guard_decisions_are_logged_at_debug(make_engine, caplog):
    import logging

    with caplog.at_level(logging.DEBUG, logger="workmem.guards"):
        run_second_commit(make_engine, valid_update_call({"Session Title": {"op": "UPDATE", "content": "Cooking"}}))
    assert any("Session Title/title rejected" in r.getMessage() for r in caplog.records)
