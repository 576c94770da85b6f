"""`workmem eval` on tests/fixtures/locomo_mini.json, checked against values worked out by hand.

How the expected numbers were derived (reading the fixture, not the code's output):

- 40 turns in 3 dated sessions → 43 stored user messages: seq 1 = session-1 note, D1:1–D1:14 = seq
  2–15, seq 16 = session-2 note, D2:1–D2:13 = seq 17–29, seq 30 = session-3 note, D3:1–D3:13 = 31–43.
- trigger ("messages", 11), keep 10: from message n ≥ 11 on, 11 messages are live, so every message from then on
  triggers a commit of exactly one message → 33 commits, archive_001…033
  (seq 1–33), live tail = seq 34–43 = D3:4–D3:13.
- The extractive model keeps, per single-message commit: Key Facts = sentences scoring ≥ 2 (date 2,
  number 1, mid-sentence capitalised name 1): the three session notes, "Her name is Pepper and she is
  3 years old." (D1:3), D1:8 (15 May 2023 … Ingrid), D2:6 (17 June 2023 …); Open Issues = the only
  question, "How is life with Pepper?" (D2:3); Current State = the last covered message, D3:3. Every
  other archived sentence scores ≤ 1 and holds no request, correction or issue word.
  So the evidence turns in the WM are D1:3, D1:8, D2:6, D3:3.
- Search keywords (3+ chars, minus stopwords and the names Nadia/Tomas) and their archived matches
  (porter stems; no keyword matches more than 12 messages, so a match is a top-12 hit):
  Q1 breed dog adopt → D1:3, D1:4; Q2 name teacher glassblowing class → D1:3, D1:6, D1:7, D1:8;
  Q3 adopt pepper → D1:3 …; Q4 riverside charity race → D2:6, D3:1; Q5 sister flying → D2:8;
  Q6 person hiking dolomites teach → D2:10 only ("teaches"; "teacher" has another stem);
  Q7 crafts kiln job studio build → D1:9, D1:6, D2:1; Q8 treats family → nothing;
  Q10 tell sister flying → D1:2, D2:8; Q12 age dog → D1:1 ("ages"), D1:4 — not D1:3.
- Evidence (Q13 adversarial left out): 17 resolved turns + 1 unknown (D9:1); tail: D3:9 (Q6), D3:4
  (Q7, Q9, Q11), D3:6 (Q11) = 5; unreachable: D2:8 in Q6, D1:13 in Q8 → recall@12 15/17.
- Answers: not in the transcript: "7 May 2023" (Q3, the text says "yesterday"), "July 2023" (Q11)
  → ceiling 10/12. In the assembled context (WM + tail): Ingrid, 17 June 2023, running the kiln,
  27 May 2023 (session-2 note), 3 years old → 5/12 ("ice cream" is there, "lavender honey" is not).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest
from fakes import scripted
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from paths import FIXTURES

from workmem.graphs.cli import main
from workmem.graphs.eval.data import load_samples, parse_evidence
from workmem.graphs.eval.metrics import SpanIndex, answer_present, normalize_text, padded, question_keywords
from workmem.graphs.eval.qa import JUDGE_SYSTEM, SUMMARY_SYSTEM, answer_full_context, answer_with_tools, parse_verdict
from workmem.graphs.eval.run import resolve_models, run_eval
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.state.errors import InvalidInput

FIXTURE = FIXTURES / "locomo_mini.json"
SUMMARY = "The two friends caught up about pets, crafts and travel."


def _cats(table: dict[str, Any], field: str) -> dict[str, Any]:
    return {key: row[field] for key, row in table.items()}


class ReaderModel(BaseChatModel):
    """Deterministic stand-in for answer, summary and judge calls.

    Answers with the gold answer when its prompt (question excluded, tool results included) holds it;
    otherwise, when archive tools are bound and it has not searched yet, calls `archive_search` with
    the question's keywords; otherwise says it is not mentioned. Summaries are one fixed sentence.
    Judges CORRECT iff the gold answer occurs in the generated answer.
    """

    golds: dict[str, str]
    summary_calls: int = 0
    searches: int = 0

    @property
    def _llm_type(self) -> str:
        return "reader"

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(tools=list(tools), tool_choice=tool_choice, **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        system = str(messages[0].text)
        if system == SUMMARY_SYSTEM:
            self.summary_calls += 1
            reply = AIMessage(SUMMARY)
        elif system == JUDGE_SYSTEM:
            found = re.search(r"Gold answer: (.*)\nGenerated answer: (.*)", str(messages[-1].text), re.S)
            reply = AIMessage("CORRECT" if answer_present(found.group(1), padded(found.group(2))) else "WRONG")
        else:
            reply = self._answer(messages, kwargs)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _answer(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> AIMessage:
        ask = next(m for m in messages if isinstance(m, HumanMessage) and str(m.text).startswith("Question: "))
        question = str(ask.text).split("\n")[0].removeprefix("Question: ")
        gold = self.golds[question]
        seen = padded("\n".join(str(m.text) for m in messages[1:] if m is not ask))
        if answer_present(gold, seen):
            return AIMessage(gold)
        searched = any(isinstance(m, ToolMessage) for m in messages)
        if kwargs.get("tools") and kwargs.get("tool_choice") != "none" and not searched:
            self.searches += 1
            query = " ".join(question_keywords(question, ("Nadia", "Tomas")))
            return AIMessage("", tool_calls=[{"name": "archive_search", "args": {"query": query},
                                              "id": f"call_{self.searches}", "type": "tool_call"}])
        return AIMessage("It is not mentioned.")


@pytest.fixture(scope="module")
def reader() -> ReaderModel:
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return ReaderModel(golds={q["question"]: q.get("answer", "") for q in data["qa"]})


@pytest.fixture(scope="module")
def results(reader: ReaderModel) -> dict[str, Any]:
    """One run with a commit per message (trigger 11 live messages, keep 10), the reader as answer and judge model."""
    return run_eval(FIXTURE, model=reader, judge=reader, commit_model="extractive", trigger=("messages", 11), keep=10,
                    progress=False)


def test_ingest_commits_every_message_past_the_keep_window(results: dict[str, Any]) -> None:
    sample = results["samples"][0]
    assert (sample["turns"], sample["messages"], sample["commits"], sample["archives"]) == (40, 43, 33, 33)
    assert (sample["live_messages"], sample["commits_failed"]) == (10, 0)
    assert results["config"]["commit_model"] == "workmem-extractive"


def test_evidence_location_per_question(results: dict[str, Any]) -> None:
    where = {q["index"]: [(e["dia_id"], e["where"], e["wm"], e["search"]) for e in q["evidence"]]
             for q in results["questions"]}
    assert 12 not in where  # adversarial: excluded by default
    assert where[0] == [("D1:3", "archived", True, True)]
    assert where[5] == [("D2:8", "archived", True, True), ("D2:10", "archived", True, True),
                        ("D3:9", "tail", False, False)]
    assert where[7] == [("D1:13", "archived", True, False), ("D3:3", "archived", True, False)]
    assert where[8] == [("D3:4", "tail", False, False), ("D9:1", "unknown", False, False)]
    assert where[10] == [("D3:4", "tail", False, False), ("D3:6", "tail", False, False)]
    assert where[11] == [("D1:3", "archived", True, True)]
    assert results["questions"][5]["keywords"] == ["person", "hiking", "dolomites", "teach"]


def test_reachability_table(results: dict[str, Any]) -> None:
    table = results["reachability"]
    assert _cats(table, "questions") == {"1": 2, "2": 4, "3": 1, "4": 5, "overall": 12}
    assert _cats(table, "evidence") == {"1": 5, "2": 5, "3": 2, "4": 5, "overall": 17}
    assert _cats(table, "in_tail") == {"1": 1, "2": 2, "3": 1, "4": 1, "overall": 5}
    # every archived evidence turn is in the WM (the extractive model keeps the dialogue's facts)
    assert _cats(table, "in_wm") == {"1": 4, "2": 3, "3": 1, "4": 4, "overall": 12}
    assert _cats(table, "search_hits") == {"1": 2, "2": 3, "3": 1, "4": 4, "overall": 10}
    assert _cats(table, "archived") == {"1": 4, "2": 3, "3": 1, "4": 4, "overall": 12}
    assert _cats(table, "reachable") == {"1": 5, "2": 5, "3": 2, "4": 5, "overall": 17}
    assert table["overall"]["recall_at_12"] == pytest.approx(17 / 17)
    assert (table["overall"]["unresolved"], table["overall"]["fully_reachable"]) == (1, 12)


def test_retention_and_ceiling(results: dict[str, Any]) -> None:
    table = results["retention"]
    assert _cats(table, "in_context") == {"1": 2, "2": 2, "3": 1, "4": 5, "overall": 10}
    assert _cats(table, "in_transcript") == {"1": 2, "2": 2, "3": 1, "4": 5, "overall": 10}
    assert table["overall"]["retention"] == pytest.approx(10 / 12)  # at the ceiling on this small fixture
    assert table["overall"]["ceiling"] == pytest.approx(10 / 12)


def test_model_accuracy_per_mode(results: dict[str, Any], reader: ReaderModel) -> None:
    modes = results["model"]["modes"]
    assert _cats(modes["full_context"], "correct") == {"1": 2, "2": 2, "3": 1, "4": 5, "overall": 10}
    assert _cats(modes["wm_tail"], "correct") == {"1": 2, "2": 2, "3": 1, "4": 5, "overall": 10}
    assert _cats(modes["wm_tail_tools"], "correct") == {"1": 2, "2": 2, "3": 1, "4": 5, "overall": 10}
    assert _cats(modes["summary_baseline"], "correct") == {"1": 0, "2": 0, "3": 0, "4": 1, "overall": 1}
    tool_calls = sum(q["answers"]["wm_tail_tools"]["tool_calls"] for q in results["questions"])
    assert tool_calls == 2  # one search for each question whose answer is not in WM + tail
    assert reader.summary_calls == 33  # the baseline summarises at the same 33 commit points


def test_token_accounting(results: dict[str, Any]) -> None:
    modes = results["model"]["modes"]
    for table in modes.values():
        overall = table["overall"]
        assert overall["qa_tokens"] == sum(table[k]["qa_tokens"] for k in ("1", "2", "3", "4"))
        assert overall["tokens_per_correct"] == pytest.approx(overall["qa_tokens"] / overall["correct"])
    # the searches cost tokens; the baseline's one-paragraph summary is the cheapest context
    assert modes["wm_tail_tools"]["overall"]["qa_tokens"] > modes["wm_tail"]["overall"]["qa_tokens"]
    assert modes["summary_baseline"]["overall"]["qa_tokens"] < modes["wm_tail"]["overall"]["qa_tokens"]
    assert results["model"]["judge_tokens"] > 0 and results["model"]["baseline_summary_tokens"] > 0
    assert results["model"]["error_count"] == 0


def test_adversarial_questions_on_request() -> None:
    results = run_eval(FIXTURE, trigger=("messages", 11), keep=10, no_model=True, include_adversarial=True,
                       progress=False)
    reach, retention = results["reachability"], results["retention"]
    assert (reach["5"]["evidence"], reach["5"]["in_wm"], reach["5"]["search_hits"]) == (1, 1, 1)
    assert (reach["overall"]["questions"], reach["overall"]["reachable"]) == (13, 18)
    assert "5" not in retention and retention["overall"]["questions"] == 12  # no gold answer string
    assert results["model"] is None


def _workmem_parser() -> argparse.ArgumentParser:
    """The real `workmem` parser, `eval` included."""
    from workmem.graphs import cli

    return cli.build_parser()


def test_cli_eval_no_model_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Default trigger 80 % of the budget: the ~740-token fixture never commits, so everything is in the tail."""
    out = tmp_path / "results.json"
    args = _workmem_parser().parse_args(["eval", "--data", str(FIXTURE), "--no-model", "--json", "--out", str(out),
                                         "--root", str(tmp_path / "root")])
    assert args.func(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text(encoding="utf-8"))["reachability"] == printed["reachability"]
    overall = printed["reachability"]["overall"]
    assert (overall["evidence"], overall["in_tail"], overall["archived"], overall["reachable"]) == (17, 17, 0, 17)
    assert printed["samples"][0]["commits"] == 0
    retention = printed["retention"]["overall"]
    assert (retention["in_context"], retention["in_transcript"]) == (10, 10)
    assert (tmp_path / "root" / "sessions" / "locomo-wm-mini-1").is_dir()
    with pytest.raises(InvalidInput, match="already exists"):  # a second run into the same root
        args.func(args)


def test_cli_tables_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert main(["eval", "--data", str(FIXTURE), "--no-model", "--limit-questions", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Evidence reachability" in text and "Answer retention" in text and "QA accuracy skipped" in text
    assert json.loads(out.read_text(encoding="utf-8"))["reachability"]["overall"]["questions"] == 3
    assert main(["eval", "--data", str(tmp_path / "missing.json"), "--no-model", "--out", str(out)]) == 2
    assert "cannot read" in capsys.readouterr().err


# --- the rules, case by case ---------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "text", "expected"), [
    ("Ingrid", "the teacher is called Ingrid.", True),
    ("7 May 2023", "on 17 May, 2023", False),  # word boundaries: 17 is not 7
    ("17 June 2023", "[session 2 — 17 June, 2023]", True),  # punctuation ignored
    ("running the kiln", "a job running a kiln", True),  # articles ignored
    ("lavender honey, ice cream", "ice cream then lavender honey", True),  # list: every item
    ("lavender honey, ice cream", "ice cream only", False),
    ("cat", "category", False),
    ("", "anything", False),
])
def test_answer_present(answer: str, text: str, expected: bool) -> None:
    assert answer_present(answer, padded(text)) is expected


def test_normalize_text() -> None:
    assert normalize_text("The Blue-Bowl, at 1:56 PM!") == "blue bowl at 1 56 pm"


@pytest.mark.parametrize(("question", "expected"), [
    ("What is Nadia's sister's job?", ["sister", "job"]),
    ("When did they go there?", []),
    ("Which instruments, paintings, sculptures, novels, recipes and gardens did Tomas mention to Amira?",
     ["instruments", "paintings", "sculptures", "recipes", "gardens", "mention"]),  # the 6 longest
])
def test_question_keywords(question: str, expected: list[str]) -> None:
    assert question_keywords(question, ("Nadia", "Tomas")) == expected


def test_span_index_needs_a_distinctive_run() -> None:
    turns = {"a": "we went to the lake by the old mill today",
             "b": "we went to the lake by the old mill yesterday",
             "c": "short turn here", "d": "ok sure"}
    spans = SpanIndex(turns)
    shared = padded("we went to the lake by the old mill")
    assert not spans.present("a", shared)  # every 6-word run of it is also in b
    assert spans.present("a", padded("went to the lake by the old mill today"))
    assert spans.present("c", padded("- short turn here."))
    assert spans.spans("d") == []  # under 3 words: never counted


def test_parse_evidence_and_verdicts() -> None:
    assert parse_evidence(["D8:6; D9:17", "D30:05", "D8:6"]) == ["D8:6", "D9:17", "D30:5"]
    assert parse_evidence(None) == []
    assert parse_verdict("CORRECT") and parse_verdict("label: correct.")
    assert not parse_verdict("INCORRECT") and not parse_verdict("WRONG, not CORRECT") and not parse_verdict("?")


def test_bad_data_names_the_field() -> None:
    with pytest.raises(InvalidInput, match="conversation"):
        load_samples({"qa": []})
    with pytest.raises(InvalidInput, match=r"qa\[0\]\.category"):
        load_samples({"conversation": {}, "qa": [{"question": "why?"}]})
    with pytest.raises(InvalidInput, match="threshold"):
        run_eval(FIXTURE, threshold=0, no_model=True, progress=False)
    # a sample whose sessions hold no turn is named, not evaluated into "session not found"
    with pytest.raises(InvalidInput, match=r"data\[0\]\.conversation.*holds no turns"):
        load_samples({"sample_id": "s1", "conversation": {"speaker_a": "A", "session_1": []}, "qa": []})


def test_resolve_models() -> None:
    offline = resolve_models(None, None, None, no_model=True, env={"WORKMEM_MODEL": "openai:gpt-x"})
    assert offline.answer is None and isinstance(offline.commit, ExtractiveChatModel)
    assert resolve_models(None, None, None, env={"WORKMEM_MODEL": "extractive"}).answer is None
    reader = ReaderModel(golds={})
    both = resolve_models(reader, None, None, env={})
    assert both.answer is reader and both.judge is reader and both.commit is reader
    with pytest.raises(InvalidInput, match="cannot answer"):
        resolve_models("extractive", None, None, env={})


def test_tool_loop_stops_after_four_rounds_and_errors_are_data() -> None:
    @tool
    def archive_search(query: str) -> str:
        """Search the archive."""
        return f"no hit for {query}"

    def call(i: int) -> AIMessage:
        return AIMessage("", tool_calls=[{"name": "archive_search", "args": {"query": f"q{i}"}, "id": f"c{i}",
                                          "type": "tool_call"}])

    model = scripted(*[call(i) for i in range(4)], "not mentioned")
    answer = answer_with_tools(model, [], [archive_search], "Where?")
    assert (answer.text, answer.tool_calls, answer.error) == ("not mentioned", 4, None)
    assert [b.get("tool_choice") for b in model.bound] == [None, None, None, None, "none"]
    assert answer.tokens > 0
    failed = answer_full_context(scripted(RuntimeError("endpoint down")), "A: hi", "Where?")
    assert failed.text == "" and failed.error == "RuntimeError: endpoint down"


def test_long_generator_is_deterministic_and_loads() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_long_locomo", FIXTURE.parent / "make_long_locomo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = module.build(600)
    assert data == module.build(600)
    sample = load_samples(data)[0]
    assert (len(sample.turns), len(sample.sessions)) == (600, 20)
    dia_ids = {t.dia_id for t in sample.turns}
    assert all(e in dia_ids for q in sample.qa for e in q.evidence)
    assert {q.category for q in sample.qa} == {1, 2, 4, 5}


def test_cli_eval_whose_commits_fail_exits_2_naming_the_cause(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits that fail (a model that became unavailable mid-run, say): the results are still written, then one
    error line names the first cause. (A commit model missing its key is refused before the run starts.)"""
    from workmem.graphs.runner import CommitRunner

    def failing(self, session_id, keep, **kwargs):
        return {"status": "failed", "task_id": "t1", "archive_id": None,
                "reason": "model 'openai:gpt-4.1-mini' is unavailable: set OPENAI_API_KEY"}

    monkeypatch.setattr(CommitRunner, "start", failing)
    out = tmp_path / "r.json"
    code = main(["eval", "--data", str(FIXTURE), "--no-model", "--trigger", "tokens:200", "--keep", "turns:2",
                 "--limit-questions", "2", "--no-search-recall", "--out", str(out), "--root", str(tmp_path / "root")])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "OPENAI_API_KEY" in lines[0], err
    assert f"results in {out}" in lines[0]
    results = json.loads(out.read_text(encoding="utf-8"))
    assert results["config"]["keep"] == "turns:2" and results["config"]["threshold"] == 200
    assert results["samples"][0]["commits_failed"] == results["samples"][0]["commits"] > 0
