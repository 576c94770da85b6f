"""The proxy sessions' conversion (tests/benchmarks/proxy_sessions.py) on small literal trajectories of both formats."""

from __future__ import annotations

import json
import sys

import pytest
from paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

from proxy_sessions import from_bash_blocks, from_tool_calls, session  # noqa: E402

PROMPT = ("<pr_description>\nConsider the following PR description:\nLoader crashes on empty files\nMore.\n"
          "</pr_description>")
DIFF = "diff --git a/app/loader.py b/app/loader.py\n--- a/app/loader.py\n+++ b/app/loader.py\n"


def test_one_bash_block_is_a_tool_call_and_the_next_observation_its_result():
    messages = from_bash_blocks([
        {"role": "system", "content": "Answer with one bash block."},
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": "THOUGHT: look.\n\n```bash\nls -la\n```"},
        {"role": "user", "content": "<returncode>0</returncode>"},
        {"role": "assistant", "content": "THOUGHT: two.\n\n```bash\nls\n```\n```bash\npwd\n```"},
        {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."},
    ])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert messages[2]["content"] == "THOUGHT: look."
    assert json.loads(messages[2]["tool_calls"][0]["function"]["arguments"]) == {"command": "ls -la"}
    assert messages[3]["tool_call_id"] == messages[2]["tool_calls"][0]["id"]
    assert "tool_calls" not in messages[4]  # two blocks: the harness refused it, so it stays text


def test_native_tool_calls_keep_their_ids_and_the_exit_message_answers_the_last_call():
    call = {"index": 0, "id": "call_7", "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "x"}'}}
    record = session({"instance_id": "acme__loader-1", "info": {"submission": DIFF}, "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": None, "tool_calls": [call], "extra": {"response": "dropped"}},
        {"role": "tool", "tool_call_id": "call_7", "content": "ok", "extra": {"raw_output": "dropped"}},
        {"role": "assistant", "content": "Done.", "tool_calls": [{**call, "id": "call_8"}]},
        {"role": "exit", "content": DIFF},
    ]}, "proxy__", "src")
    messages = record["messages"]
    assert messages[2] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_7", "type": "function", "function": {"name": "bash", "arguments": '{"command": "x"}'}}]}
    assert messages[3] == {"role": "tool", "tool_call_id": "call_7", "content": "ok"}
    assert messages[5] == {"role": "tool", "tool_call_id": "call_8", "content": DIFF}
    assert record["id"] == "proxy__acme__loader-1"
    assert record["task"] == "Loader crashes on empty files\nMore."
    assert [(p["kind"], p["text"]) for p in record["probes"]] == [
        ("task_title", "Loader crashes on empty files"), ("file_edited", "app/loader.py")]


def test_a_message_that_answers_no_open_call_is_not_this_shape():
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    with pytest.raises(ValueError, match="answers no open tool call"):  # the exit message of a run without calls
        from_tool_calls([{"role": "user", "content": PROMPT}, {"role": "exit", "content": DIFF}])
    with pytest.raises(ValueError, match="answers no open tool call"):  # a second answer to an answered call
        from_tool_calls([{"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                         {"role": "exit", "content": DIFF}])


def test_content_given_as_parts_is_their_text():
    messages = from_tool_calls([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text",
                                                                                             "text": "b"}]}])
    assert messages == [{"role": "user", "content": "a\nb"}]
