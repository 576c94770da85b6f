"""The offline extractive model: deterministic, schema-valid, and it finds what the sections need."""

from __future__ import annotations

import json

import jsonschema
import pytest
from fakes import stored_messages
from langchain_core.messages import HumanMessage, SystemMessage
from paths import DEMO_CONVERSATION

from workmem.nodes.extractive.facts import parse_facts
from workmem.nodes.extractive.model import EXTRACTIVE_MODEL_NAME, ExtractiveChatModel
from workmem.nodes.formatting import format_messages
from workmem.nodes.guards import guard_ops
from workmem.nodes.merge import merge_working_memory
from workmem.nodes.models import bind_commit_tool
from workmem.nodes.prompts import create_prompt, update_prompt
from workmem.state.errors import InvalidInput
from workmem.state.memory import SECTIONS, bullet_items, parse_sections, render_sections
from workmem.state.ops import CREATE_TOOL, UPDATE_TOOL
from workmem.state.tokens import count_tokens

SECTION_BUDGETS = {
    "Session Title": 60, "Current State": 500, "Task & Goals": 1500, "Key Facts & Decisions": 3000,
    "Files & Context": 1500, "Errors & Corrections": 2000, "Open Issues": 1500,
}

DEMO = DEMO_CONVERSATION

SAMPLE = [
    {
        "role": "user",
        "content": "Hi! Can you fix the failing CSV import in our Flask app? It broke on 2024-05-14.",
    },
    {
        "role": "assistant",
        "content": "Let me read the loader.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "read_file",
                    "arguments": json.dumps({"path": "app/importers/csv_loader.py"}),
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "import csv\nDELIM = '\\t'\n"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c2",
                "type": "function",
                "function": {
                    "name": "run_tests",
                    "arguments": json.dumps({"path": "tests/test_csv_loader.py"}),
                },
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "c2",
        "name": "run_tests",
        "is_error": True,
        "content": "Traceback (most recent call last):\n"
        '  File "app/importers/csv_loader.py", line 31, in load\n'
        "    raise ValueError(missing)\nValueError: missing columns: ['sku', 'price']\n",
    },
    {
        "role": "assistant",
        "content": "The loader splits on tabs. I'll change config/settings.toml to use commas.",
    },
    {
        "role": "user",
        "content": "No, the delimiter is a semicolon, not a tab. Don't touch config/settings.toml.",
    },
    {
        "role": "assistant",
        "content": "I decided to sniff the delimiter in the loader because suppliers change "
        "formats without notice. Should empty rows be skipped or rejected?",
    },
]


def transcript(raw: list[dict] = SAMPLE) -> str:
    return format_messages(stored_messages(raw))


def tool_call(reply) -> dict:
    assert reply.content == "" and len(reply.tool_calls) == 1 and not reply.invalid_tool_calls
    return reply.tool_calls[0]


def run_create(text: str, previous: str | None = None) -> dict:
    model = bind_commit_tool(ExtractiveChatModel(), CREATE_TOOL)
    return tool_call(model.invoke(create_prompt(text, previous)))


def run_update(wm: str, text: str, reminders: str = "") -> dict:
    model = bind_commit_tool(ExtractiveChatModel(), UPDATE_TOOL)
    return tool_call(model.invoke(update_prompt(wm, text, reminders)))


def body_lines(sections: dict) -> list[str]:
    lines = []
    for value in sections.values():
        if isinstance(value, str):
            lines += value.split("\n")
        elif value.get("op") == "UPDATE":
            lines += value["content"].split("\n")
        elif value.get("op") == "APPEND":
            lines += value["items"]
    return lines


def test_same_prompt_gives_the_identical_tool_call():
    first, second = run_create(transcript()), run_create(transcript())
    assert first == second
    assert first["id"].startswith("call_") and first["type"] == "tool_call"
    assert run_create(transcript(SAMPLE[:-1]))["id"] != first["id"]


def test_create_call_is_valid_against_the_schema():
    call = run_create(transcript())
    assert call["name"] == "create_working_memory"
    jsonschema.validate(call["args"], CREATE_TOOL["function"]["parameters"])
    assert list(call["args"]["sections"]) == list(SECTIONS)


def test_update_call_is_valid_against_the_schema():
    wm = render_sections(run_create(transcript(SAMPLE[:3]))["args"]["sections"])
    call = run_update(wm, transcript(SAMPLE[3:]))
    assert call["name"] == "update_working_memory"
    jsonschema.validate(call["args"], UPDATE_TOOL["function"]["parameters"])
    assert list(call["args"]["sections"]) == list(SECTIONS)


def test_it_finds_title_paths_errors_corrections_decisions_and_questions():
    sections = run_create(transcript())["args"]["sections"]
    assert sections["Session Title"] == "Fix the failing CSV import in our Flask app"
    assert bullet_items(sections["Task & Goals"]) == [
        "Task: Fix the failing CSV import in our Flask app.",
        "User: No, the delimiter is a semicolon, not a tab. Don't touch config/settings.toml.",
    ]
    files = sections["Files & Context"]
    assert bullet_items(files) == ["tests/test_csv_loader.py — tested", "app/importers/csv_loader.py — read"]
    assert "config/settings.toml" not in files  # only named in a message: no file the agent touched
    errors = bullet_items(sections["Errors & Corrections"])
    assert (
        "run_tests: ValueError: missing columns: ['sku', 'price'] (at app/importers/csv_loader.py:31)"
        " — when running tests/test_csv_loader.py" in errors
    )
    assert "User correction: No, the delimiter is a semicolon, not a tab." in errors
    assert "User correction: Don't touch config/settings.toml." in errors
    facts = sections["Key Facts & Decisions"]
    assert "I decided to sniff the delimiter in the loader because suppliers change formats" in facts
    assert "It broke on 2024-05-14." in facts
    assert bullet_items(sections["Open Issues"]) == ["Agent asked: Should empty rows be skipped or rejected?"]


def test_current_state_is_prose_about_the_work_the_result_and_what_is_open():
    state = run_create(transcript())["args"]["sections"]["Current State"]
    assert state == (
        "Working on: Fix the failing CSV import in our Flask app. "
        "Last result: I decided to sniff the delimiter in the loader because suppliers change formats without "
        "notice. Still open: Agent asked: Should empty rows be skipped or rejected?"
    )
    assert "Latest user message" not in state and "\n" not in state and len(state.split()) <= 150


def test_current_state_names_the_announced_next_step():
    working = SAMPLE[:5] + [
        {"role": "assistant", "content": "The loader reads the delimiter from the config. Let me read the config."}
    ]
    state = run_create(transcript(working))["args"]["sections"]["Current State"]
    assert state == (
        "Working on: Fix the failing CSV import in our Flask app. Last result: run_tests failed: ValueError: "
        "missing columns: ['sku', 'price'] (at app/importers/csv_loader.py:31) — when running "
        "tests/test_csv_loader.py. Next step: Let me read the config."
    )


def test_a_question_answered_later_is_not_open():
    answered = SAMPLE + [{"role": "user", "content": "Skip empty rows and log them."}]
    assert run_create(transcript(answered))["args"]["sections"]["Open Issues"] == ""


def test_update_keeps_the_title_appends_and_marks_resolved_issues():
    old = render_sections(
        {
            "Session Title": "CSV import fix",
            "Current State": "Reading the loader.",
            "Task & Goals": "- Fix the failing CSV import in our Flask app.",
            "Files & Context": "- app/importers/csv_loader.py (read_file)",
            "Open Issues": (
                "- Should empty rows be skipped or rejected?\n- Ask Priya about the reports module"
            ),
        }
    )
    later = SAMPLE[1:6] + [
        {"role": "user", "content": "Empty rows are skipped now, fixed. Also add a test for BOM headers."},
    ]
    ops = run_update(old, transcript(later))["args"]["sections"]
    assert ops["Session Title"] == {"op": "KEEP"}
    assert ops["Current State"]["op"] == "UPDATE"
    assert ops["Task & Goals"] == {"op": "APPEND", "items": ["User: Also add a test for BOM headers."]}
    assert "app/importers/csv_loader.py (read_file)" in ops["Files & Context"]["content"]  # kept as it was
    assert ops["Files & Context"]["content"].count("app/importers/csv_loader.py") == 1  # and not listed twice
    assert ops["Open Issues"] == {
        "op": "UPDATE",
        "content": "- [resolved] Should empty rows be skipped or rejected?\n"
        "- Ask Priya about the reports module",
    }
    guarded, notes = guard_ops(parse_sections(old), ops)
    assert notes == []
    merged = parse_sections(merge_working_memory(old, guarded))
    assert "[resolved] Should empty rows" in merged["Open Issues"]
    assert "Ask Priya about the reports module" in merged["Open Issues"]


def test_a_resolved_issue_is_dropped_at_the_next_commit_and_an_asked_question_resolves_on_a_reply():
    first = run_create(transcript())["args"]["sections"]
    wm = render_sections(first)
    reply = [{"role": "user", "content": "Skip them and log a warning."}]
    ops = run_update(wm, transcript(reply))["args"]["sections"]
    assert ops["Open Issues"] == {
        "op": "UPDATE", "content": "- [resolved] Agent asked: Should empty rows be skipped or rejected?"
    }
    wm = merge_working_memory(wm, ops)
    quiet = [{"role": "assistant", "content": "Empty rows are skipped with a warning now."}]
    ops = run_update(wm, transcript(quiet))["args"]["sections"]
    assert ops["Open Issues"] == {"op": "UPDATE", "content": ""}
    assert guard_ops(parse_sections(wm), ops)[1] == []


def test_a_user_correction_supersedes_the_goal_it_corrects():
    wm = render_sections(run_create(transcript(SAMPLE[:1] + [
        {"role": "user", "content": "Also the endpoint should return 422 instead of 500 for a malformed row."},
    ]))["args"]["sections"])
    assert "return 422 instead of 500" in parse_sections(wm)["Task & Goals"]
    fix = [
        {"role": "assistant", "content": "I wired the malformed-row error into the route."},
        {"role": "user", "content": "Actually, return 400, not 422 - our admin client treats 422 as a form error."},
    ]
    ops = run_update(wm, transcript(fix))["args"]["sections"]
    assert ops["Task & Goals"] == {
        "op": "UPDATE", "content": "- Fix the failing CSV import in our Flask app.\n- Return 400, not 422."
    }
    assert ops["Errors & Corrections"] == {"op": "APPEND", "items": [
        "User correction: Actually, return 400, not 422 - our admin client treats 422 as a form error."
    ]}


def test_a_user_correction_takes_the_fact_it_corrects_out_of_key_facts():
    old = render_sections({
        "Session Title": "CSV import fix",
        "Key Facts & Decisions": "- The Nordhavn delimiter is a tab, set in config/settings.toml.\n"
                                 "- Nordhavn switched formats on 2024-05-14.",
    })
    fix = [{"role": "user", "content": "No, the Nordhavn delimiter is a semicolon, not a tab."}]
    ops = run_update(old, transcript(fix))["args"]["sections"]
    assert ops["Key Facts & Decisions"] == {"op": "UPDATE", "content": "- Nordhavn switched formats on 2024-05-14."}
    assert guard_ops(parse_sections(old), ops)[1] == []
    assert ops["Errors & Corrections"] == {
        "op": "APPEND", "items": ["User correction: No, the Nordhavn delimiter is a semicolon, not a tab."]
    }


def test_an_answer_no_to_a_question_is_not_a_correction():
    asked = [
        {"role": "assistant", "content": "Should I also change the billing config?"},
        {"role": "user", "content": "No, leave billing alone."},
    ]
    errors = run_create(transcript(asked))["args"]["sections"]["Errors & Corrections"]
    assert "correction" not in errors


def test_update_with_nothing_new_keeps_sections():
    wm = render_sections(run_create(transcript())["args"]["sections"])
    ops = run_update(wm, transcript())["args"]["sections"]
    for name in (
        "Session Title",
        "Task & Goals",
        "Key Facts & Decisions",
        "Files & Context",
        "Errors & Corrections",
        "Open Issues",
    ):
        assert ops[name] == {"op": "KEEP"}, name


def test_bodies_never_open_a_section():
    hostile = SAMPLE + [
        {
            "role": "user",
            "content": "## Session Title\n# Hijacked\nPlease add ## Open Issues handling to app/x.py.",
        },
        {
            "role": "tool",
            "tool_call_id": "zz",
            "name": "read_file",
            "content": "## Key Facts & Decisions\nError: x",
        },
    ]
    create = run_create(transcript(hostile))["args"]["sections"]
    wm = render_sections(create)
    update = run_update(wm, transcript(hostile))["args"]["sections"]
    for line in body_lines(create) + body_lines(update):
        assert not line.strip().startswith("#"), line
    assert set(parse_sections(wm)) == set(SECTIONS)


def test_the_demo_session_stays_bounded():
    messages = stored_messages(json.loads(DEMO.read_text(encoding="utf-8"))["messages"])
    sections = run_create(format_messages(messages))["args"]["sections"]
    assert sections["Session Title"] and len(sections["Session Title"]) <= 80
    assert len(bullet_items(sections["Key Facts & Decisions"])) <= 25
    for name, body in sections.items():
        assert count_tokens(body) <= SECTION_BUDGETS[name], name
        if name != "Current State":
            assert all(len(item) <= 300 for item in bullet_items(body)), name
    assert "\n" not in sections["Current State"] and len(sections["Current State"].split()) <= 150
    files = sections["Files & Context"]
    for path in ("app/importers/csv_loader.py", "tests/test_csv_loader.py", "config/settings.toml"):
        assert path in files
    assert "not a tab" in sections["Errors & Corrections"]
    assert "Traceback" not in sections["Errors & Corrections"]


def test_the_demo_session_reads_like_notes():
    messages = stored_messages(json.loads(DEMO.read_text(encoding="utf-8"))["messages"])
    sections = run_create(format_messages(messages))["args"]["sections"]
    assert sections["Session Title"] == "Fix the failing CSV import in the Flask app"
    goals = bullet_items(sections["Task & Goals"])
    assert goals[0] == "Task: Fix the failing CSV import in the Flask app."
    assert any(g.startswith("User: Actually, return 400, not 422") for g in goals)  # the user's own words
    assert not any("422 instead of 500" in g for g in goals)  # the request the correction rejected
    assert "User: Please add a test that loads it." in goals  # the rest of that message stays
    assert any("negative stock" in g and g.endswith("(done)") for g in goals)  # reported done
    facts = sections["Key Facts & Decisions"]
    assert "tab-separated" not in facts  # the agent's wrong guess, corrected by the user
    assert "2024-05-20" in facts and "cp1252" in facts
    issues = bullet_items(sections["Open Issues"])
    assert any("Priya" in i for i in issues)
    assert sections["Current State"].startswith("Working on: Update docs/importing.md too, but keep it short.")


def test_a_dialogue_committed_one_message_at_a_time_keeps_speakers_and_dates():
    chat = ["[session 1 — 9:00 am on 3 March, 2031]", "Ada: Hi Bram!", "Bram: Hi Ada, good to see you.",
            "[session 2 — 6:40 pm on 17 March, 2031]", "Ada: I adopted a greyhound called Pepper yesterday.",
            "Bram: I booked the ferry to Tern Island for 2 April."]
    stored = stored_messages([{"role": "user", "content": c} for c in chat])
    wm = render_sections(run_create(format_messages(stored[:3]))["args"]["sections"])
    for message in stored[3:]:
        wm = merge_working_memory(wm, run_update(wm, format_messages([message]))["args"]["sections"])
    sections = parse_sections(wm)
    assert sections["Current State"].startswith("Ada and Bram are talking; the latest session is dated 17 March, 2031.")
    assert bullet_items(sections["Key Facts & Decisions"]) == [
        "17 March, 2031 — Ada: I adopted a greyhound called Pepper yesterday.",
        "17 March, 2031 — Bram: I booked the ferry to Tern Island for 2 April.",
    ]


def test_the_answer_to_a_question_says_it_replied_and_outranks_an_unasked_sentence():
    chat = ["[session 1 — 9:00 am on 3 March, 2031]", "Ada: What genre is your first screenplay, Bram?",
            "Bram: It's a mix of drama and romance. It took me two years.", "Ada: It's a mix of sun and rain here.",
            "Ada: Which team did you sign with?", "Bram: The Minnesota Wolves!", "Ada: The Leeds Rhinos!"]
    stored = stored_messages([{"role": "user", "content": c} for c in chat])
    facts = run_create(format_messages(stored))["args"]["sections"]["Key Facts & Decisions"]
    assert "Bram replied: It's a mix of drama and romance." in facts  # the first sentence of the reply
    assert "Bram replied: It took me" not in facts  # the rest of the reply is no answer
    assert "sun and rain" not in facts  # the same wording, said unasked, is not worth keeping
    assert "Bram replied: It's a mix of drama and romance. The Minnesota Wolves!" in facts  # an answer may be short
    assert [(f.text, f.answers) for f in parse_facts(facts, ["Ada", "Bram"])] == [
        ("It's a mix of drama and romance.", True), ("The Minnesota Wolves!", True)]  # one head for both
    assert "Leeds Rhinos" not in facts  # a short line said unasked is chatter


def test_the_answer_follows_an_acknowledgement_and_a_question_may_end_with_a_photo():
    chat = ["[session 1 — 9:00 am on 3 March, 2031]", "Ada: What genre is it? [image: a photo of a script]",
            "Bram: Oh yeah! It's a mix of drama and romance."]
    stored = stored_messages([{"role": "user", "content": c} for c in chat])
    facts = run_create(format_messages(stored))["args"]["sections"]["Key Facts & Decisions"]
    assert "Bram replied: It's a mix of drama and romance." in facts


def test_legacy_memory_is_carried_into_create():
    legacy = (
        "Summary: we decided on 2024-05-10 to use Decimal for prices because of rounding. See app/money.py."
    )
    sections = run_create(transcript(SAMPLE[:1]), previous=legacy)["args"]["sections"]
    assert "we decided on 2024-05-10 to use Decimal" in sections["Key Facts & Decisions"]
    assert "app/money.py" in sections["Files & Context"]


@pytest.mark.parametrize(
    ("tools", "choice", "with_wm", "expected"),
    [
        ([UPDATE_TOOL, CREATE_TOOL], "create_working_memory", True, "create_working_memory"),
        (
            [UPDATE_TOOL, CREATE_TOOL],
            {"type": "function", "function": {"name": "update_working_memory"}},
            False,
            "update_working_memory",
        ),
        ([UPDATE_TOOL, CREATE_TOOL], "any", True, "update_working_memory"),
        ([UPDATE_TOOL, CREATE_TOOL], None, False, "create_working_memory"),
        ([CREATE_TOOL], None, True, "create_working_memory"),
    ],
)
def test_tool_choice(tools, choice, with_wm, expected):
    prompt = update_prompt("", transcript()) if with_wm else create_prompt(transcript())
    reply = ExtractiveChatModel().bind_tools(tools, tool_choice=choice).invoke(prompt)
    call = tool_call(reply)
    assert call["name"] == expected
    schema = (UPDATE_TOOL if expected == "update_working_memory" else CREATE_TOOL)["function"]["parameters"]
    jsonschema.validate(call["args"], schema)


def test_foreign_tool_is_refused():
    other = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
    with pytest.raises(InvalidInput, match="tool_choice"):
        ExtractiveChatModel().bind_tools([other], tool_choice="search").invoke(create_prompt(transcript()))


def test_it_is_a_chat_model_on_langchain_messages():
    model = ExtractiveChatModel()
    assert model.model_name == EXTRACTIVE_MODEL_NAME and model._llm_type == EXTRACTIVE_MODEL_NAME
    (_, system), (_, human) = create_prompt(transcript())
    reply = model.bind_tools([CREATE_TOOL], tool_choice="create_working_memory").invoke(
        [SystemMessage(content=system), HumanMessage(content=human)]
    )
    assert tool_call(reply)["args"] == run_create(transcript())["args"]


def test_empty_transcript_still_gives_a_valid_call():
    call = run_create("")
    jsonschema.validate(call["args"], CREATE_TOOL["function"]["parameters"])
    assert all(body == "" for body in call["args"]["sections"].values())
    update = run_update(render_sections({"Session Title": "T"}), "")
    assert all(op == {"op": "KEEP"} for op in update["args"]["sections"].values())


def test_escaped_headers_in_the_current_memory_stay_escaped():
    old = render_sections({"Session Title": "Real title", "Open Issues": "- fix parser\n\\## Session Title"})
    ops = run_update(old, transcript())["args"]["sections"]
    assert ops["Session Title"] == {"op": "KEEP"}


def test_long_unbroken_lines_cost_linear_time():
    import time

    hostile = [
        {"role": "user", "content": "Please look: " + "a." * 20000 + " " + "a/" * 8000},
        {"role": "tool", "tool_call_id": "c", "name": "read_file", "content": ("ab/cd.e-" * 2000 + "\n") * 5},
    ]
    started = time.perf_counter()
    call = run_create(format_messages(stored_messages(hostile), clip_tokens=0))
    assert time.perf_counter() - started < 2.0  # quadratic path regexes took ~10 s here
    jsonschema.validate(call["args"], CREATE_TOOL["function"]["parameters"])


def test_current_state_never_names_the_spill_pointer_as_what_is_still_open():
    """Open Issues' first line can be the spill's pointer; Current State falls back to an open issue itself."""
    sections = run_create(transcript())["args"]["sections"]
    sections["Open Issues"] = ("- [archived] 3 older items — archive_search finds them\n"
                               "- Which delimiter does Nordhavn use?")
    chat = [{"role": "user", "content": "Please keep going."},
            {"role": "assistant", "content": "I looked at the loader."}]
    state = run_update(render_sections(sections), transcript(chat))["args"]["sections"]["Current State"]
    assert "[archived]" not in json.dumps(state) and "older items" not in json.dumps(state)
