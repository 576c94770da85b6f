"""The replay's grounding measure (tests/benchmarks/grounding.py) on small literal sessions."""

from __future__ import annotations

import json
import sys

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

from grounding import Tally, distance_bucket, seen_tokens, steps_of, tokens_of  # noqa: E402


def call(name: str, **args: object) -> dict:
    return {"id": name, "type": "function", "function": {"name": "bash", "arguments": json.dumps(args)}}


# 0 system, 1 user, 2 assistant, 3 tool, 4 assistant, 5 tool, 6 assistant (filler to 17), 18 assistant
SESSION = [
    {"role": "system", "content": "You fix bugs. Known: system_token_1."},
    {"role": "user", "content": "Fix parse_config in cfg_loader.py, issue 4242."},
    {"role": "assistant", "content": "", "tool_calls": [call("c1", command="grep -n parse_config cfg_loader.py")]},
    {"role": "tool", "tool_call_id": "c1",
     "content": "12: def parse_config(raw_text):\n13:   return load_yaml(raw_text)"},
    {"role": "assistant", "content": "It calls load_yaml.",
     "tool_calls": [call("c2", command="sed -n 1,40p yaml_io.py")]},
    {"role": "tool", "tool_call_id": "c2", "content": "def load_yaml(raw_text):\n    return safeLoad(raw_text, 31337)"},
    *[{"role": "assistant", "content": f"step {i}"} for i in range(6, 18)],
    {"role": "assistant", "content": "Patch safeLoad and raw_text at line 31337, not system_token_1 or 4242."},
]


def test_tokens_are_code_like_identifiers_and_bare_numbers() -> None:
    text = "parse_config cfgLoader v2beta plain_ lowercase Uppercase 12 4242 1234567 3.14159 x4242"
    assert tokens_of(text) == {"parse_config", "cfgLoader", "v2beta", "plain_", "4242"}


def test_grounds_come_first_from_a_tool_message_and_never_from_what_the_user_or_system_said() -> None:
    steps = {s.index: s for s in steps_of(SESSION)}
    assert steps[2].grounds == set()  # parse_config was the user's word first
    assert steps[4].grounds == steps[4].recent == {"load_yaml"}  # yaml_io: its own word first
    assert steps[18].grounds == {"safeLoad", "raw_text", "31337"}
    assert steps[18].recent == set()  # no tool message since the step before
    assert steps[18].holders == {"safeLoad": 5, "raw_text": 5, "31337": 5}  # the newest message holding each


def test_unseen_grounds_are_counted_by_how_far_back_they_lie() -> None:
    steps = {s.index: s for s in steps_of(SESSION)}
    prompt = [SystemMessage(content=SESSION[0]["content"]), HumanMessage(content="[Session History Summary] safeLoad"),
              AIMessage(content="step 17")]
    seen, memory = seen_tokens(prompt, lambda m: m.text.startswith("[Session History Summary]"))
    tally = Tally()
    tally.add(steps[18], seen, memory - seen, call_input=500)
    assert tally.unseen == 3 and tally.memory_only == 1 and tally.blind_calls == 1 and tally.blind_input == 500
    assert tally.unseen_by_distance == {"≤10": 0, "11–40": 3, ">40": 0}  # 13 messages back
    near = Tally()
    near.add(steps[4], set(), set(), call_input=100)
    assert near.unseen_by_distance == {"≤10": 1, "11–40": 0, ">40": 0}
    tally.merge(near)
    assert tally.unseen_by_distance == {"≤10": 1, "11–40": 3, ">40": 0} and tally.blind_calls == 2
    assert [distance_bucket(d) for d in (1, 10, 11, 40, 41)] == ["≤10", "≤10", "11–40", "11–40", ">40"]


def test_a_ground_in_view_is_seen() -> None:
    steps = {s.index: s for s in steps_of(SESSION)}
    prompt = [ToolMessage(content=SESSION[5]["content"], tool_call_id="c2")]
    seen, memory = seen_tokens(prompt, lambda m: False)
    tally = Tally()
    tally.add(steps[18], seen, memory, call_input=300)
    assert tally.unseen == 0 and tally.blind_calls == 0 and tally.seen_share == 1.0
    assert sum(tally.unseen_by_distance.values()) == 0
