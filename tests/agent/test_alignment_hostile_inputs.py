"""Review of issue 14: hostile and messy uses of the middleware's alignment.

Each test runs a real `create_agent` with a scripted model on a real root and checks what is stored
(once, nothing lost) and what the model is shown (the thread's own view, tool groups whole)."""

from __future__ import annotations

from typing import Any

from engine_helpers import ask, call, pairing_problems, prompt_texts, read_file, stored, texts, thread
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine


def step_back_to(agent: Any, name: str, texts_at: list[str]) -> dict[str, Any]:
    """The config of the thread's checkpoint whose messages read `texts_at`."""
    return next(s.config for s in agent.get_state_history(thread(name))
                if [m.text for m in s.values.get("messages", [])] == texts_at)


# -- edits and ids -------------------------------------------------------------------------------------


def test_an_update_state_edit_of_a_stored_message_reaches_the_model_and_the_log(root):
    """`update_state` replacing a message by id (LangGraph's way to edit one, e.g. to redact a secret) must
    change what the model sees; the stored old version is hidden, the new one stored once."""
    model = scripted("The password is hunter2.", "Understood.", "Fine.")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        first = agent.invoke(ask("What is the password?"), thread("edit"))
        answer = first["messages"][-1]
        agent.update_state(thread("edit"), {"messages": [AIMessage(content="The password is [redacted].",
                                                                   id=answer.id)]})
        agent.invoke(ask("Say it again."), thread("edit"))
        assert prompt_texts(model) == ["What is the password?", "The password is [redacted].", "Say it again."]
        assert "hunter2" not in " ".join(m.text for m in engine.assemble("edit")["messages"])
        agent.invoke(ask("Thanks."), thread("edit"))
        log = texts(stored(engine, "edit"))
        assert log.count("The password is [redacted].") == 1 and log.count("Say it again.") == 1


def test_an_empty_user_message_is_skipped_and_the_thread_goes_on(root):
    """A user message with no content (a front end's empty send) is nothing to store or send — it must not stop
    the run, nor, being in the checkpointed state, every later run of the thread."""
    model = scripted("A1", "A2", "A3")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        for text in ("first question", "", "third question"):
            agent.invoke({"messages": [HumanMessage(content=text)]}, thread("empty"))
        assert texts(stored(engine, "empty")) == ["first question", "A1", "A2", "third question", "A3"]
        assert prompt_texts(model) == ["first question", "A1", "A2", "third question"]


def test_a_client_reusing_one_message_id_per_request_loses_no_message(root):
    """A front end that numbers messages per request (`id="msg-0"` every turn) and sends only the new one:
    an id match whose content differs is not the stored message."""
    model = scripted("A1", "A2", "A3")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)])
        for text in ("first question", "second question", "third question"):
            agent.invoke({"messages": [HumanMessage(content=text, id="msg-0")]}, thread("ids"))
        assert texts(stored(engine, "ids")) == ["first question", "A1", "second question", "A2",
                                                "third question", "A3"]
        assert prompt_texts(model) == ["first question", "A1", "second question", "A2", "third question"]


def test_a_fork_that_asks_the_same_question_again_keeps_its_question_in_view(root):
    """Regenerating an answer by forking from an earlier checkpoint and asking the same question: on the
    fork's next turn the model must still see the question its answer replies to."""
    model = scripted("A1", "A2", "A3", "A2, second take.", "Follow-up answer.")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        for text in ("Q1", "Q2", "Q3"):
            agent.invoke(ask(text), thread("regen"))
        agent.invoke(ask("Q2"), step_back_to(agent, "regen", ["Q1", "A1"]))
        agent.invoke(ask("Follow-up?"), thread("regen"))  # the thread's tip is the fork now
        assert prompt_texts(model) == ["Q1", "A1", "Q2", "A2, second take.", "Follow-up?"]
        engine.commit("regen", keep=("messages", 0))
        archived = engine.archive_expand("regen", "archive_001")["content"]
        assert "Q2" in archived and "A2, second take." in archived


def test_a_client_with_stable_user_ids_and_fresh_answer_ids_sees_every_answer(root):
    """A stateless client keeping its own ids for user messages and re-sending the answers as plain dicts:
    the answers between two id-matched questions must stay in the model's view."""
    model = scripted("A1", "A2", "A3")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)])
        history: list[Any] = []
        for i in range(3):
            history.append(HumanMessage(content=f"Q{i}", id=f"user-{i}"))
            out = agent.invoke({"messages": history}, thread("stable"))
            history.append({"role": "assistant", "content": out["messages"][-1].text})
        assert texts(stored(engine, "stable")) == ["Q0", "A1", "Q1", "A2", "Q2", "A3"]
        assert prompt_texts(model) == ["Q0", "A1", "Q1", "A2", "Q2"]


def test_a_fork_from_an_archived_checkpoint_does_not_see_the_main_branch(root):
    """The fork's state holds stored (archived) messages, so the state decides the tail: the main branch's
    later live messages are not the fork's."""
    model = scripted("A1", "A2", "A3", "Fork answer.")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        for text in ("Q1", "Q2", "Q3"):
            agent.invoke(ask(text), thread("arch"))
        assert engine.commit("arch", keep=("messages", 4))["status"] == "completed"  # archives Q1, A1
        agent.invoke(ask("Fork question?"), step_back_to(agent, "arch", ["Q1", "A1"]))
        shown = prompt_texts(model)
        assert shown[-1] == "Fork question?"
        assert not {"Q2", "A2", "Q3", "A3"} & set(shown), shown


def test_a_fork_from_a_checkpoint_an_older_archive_holds_stores_nothing_twice(root):
    """Forking at messages the first of two commits archived: they are the archive's, not new (only the newest
    archive and the live messages can anchor by id, so the older archives are searched by id)."""
    model = scripted("A1", "A2", "A3", "Fork answer.")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        for text in ("Q1", "Q2", "Q3"):
            agent.invoke(ask(text), thread("old"))
        assert engine.commit("old", keep=("messages", 4))["status"] == "completed"  # archive_001: Q1, A1
        assert engine.commit("old", keep=("messages", 2))["status"] == "completed"  # archive_002: Q2, A2
        agent.invoke(ask("Fork question?"), step_back_to(agent, "old", ["Q1", "A1"]))
        assert texts(stored(engine, "old")) == ["Q1", "A1", "Q2", "A2", "Q3", "A3", "Fork question?",
                                                 "Fork answer."]
        assert prompt_texts(model)[-1] == "Fork question?" and "Q3" not in prompt_texts(model)


def test_a_damaged_older_archive_does_not_stop_a_run_that_searches_the_archives(root, caplog):
    """Searching every archive must not make one damaged archive block the thread: the run goes on, says so,
    and aligns as it would without the search."""
    model = scripted("A1", "A2", "A3", "Fork answer.")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        for text in ("Q1", "Q2", "Q3"):
            agent.invoke(ask(text), thread("damaged"))
        engine.commit("damaged", keep=("messages", 4))
        engine.commit("damaged", keep=("messages", 2))
        next(root.rglob("archive_001/messages.jsonl")).unlink()
        agent.invoke(ask("Fork question?"), step_back_to(agent, "damaged", ["Q1", "A1"]))
        assert [m["parts"][0]["text"] for m in engine.live_messages("damaged")][-2:] == ["Fork question?",
                                                                                       "Fork answer."]
        assert "the archives cannot be searched" in caplog.text and "archive_001" in caplog.text


def test_a_message_put_in_front_of_the_history_is_stored_and_shown(root):
    """`update_state` rewriting the history as [REMOVE_ALL, note, *kept] (what a summarising middleware does): the
    note precedes every stored message the state holds, and is still new — stored once and in the model's view."""
    from langchain_core.messages import RemoveMessage
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    model = scripted("A0", "A1", "A2")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine, commit_mode="sync")],
                             checkpointer=InMemorySaver())
        agent.invoke(ask("Q0 the deploy key is K-77"), thread("front"))
        old = agent.invoke(ask("Q1"), thread("front"))["messages"]
        note = HumanMessage("NOTE: the deploy key is K-77.", id="note")
        agent.update_state(thread("front"), {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), note, *old[2:]]})
        agent.invoke(ask("Q2 what is the key?"), thread("front"))
        assert texts(stored(engine, "front")) == ["Q0 the deploy key is K-77", "A0", "Q1", "A1",
                                                   "NOTE: the deploy key is K-77.", "Q2 what is the key?", "A2"]
        assert prompt_texts(model)[-4:] == ["NOTE: the deploy key is K-77.", "Q1", "A1", "Q2 what is the key?"]
        assert engine.hidden("front") == {1, 2}


def test_the_archived_messages_kept_after_a_note_put_in_front_are_not_stored_again(root):
    """With `trim_state=False` the state keeps archived messages after a note put in front; once the note (stored
    last) is the first id match, those messages still are the archive's — also after a later commit made another
    archive the newest."""
    from langchain_core.messages import RemoveMessage
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    model = scripted(*[f"A{i}" for i in range(9)])
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine, trim_state=False)],
                             checkpointer=InMemorySaver())
        for text in ("Q0", "Q1", "Q2", "Q3"):
            agent.invoke(ask(text), thread("note"))
        engine.commit("note", keep=("messages", 6))  # archive_001: Q0, A0 (still in the state)
        kept = agent.get_state(thread("note")).values["messages"]
        note = HumanMessage("NOTE: we deploy to staging.", id="note")
        agent.update_state(thread("note"), {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), note, *kept]})
        agent.invoke(ask("Q4"), thread("note"))
        engine.commit("note", keep=("messages", 7))  # archive_002: Q1, A1
        agent.invoke(ask("Q5"), thread("note"))
        assert texts(stored(engine, "note")) == ["Q0", "A0", "Q1", "A1", "Q2", "A2", "Q3", "A3",
                                                  "NOTE: we deploy to staging.", "Q4", "A4", "Q5", "A5"]


def test_a_client_reusing_an_id_for_new_words_after_a_commit_loses_none(root):
    """An id an archive holds with other words is an edit, not the archived message: a client sending `msg-0`
    with every request still has each request stored once."""
    model = scripted("A1", "A2", "A3", "A4")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine, trim_state=False)],
                             checkpointer=InMemorySaver())
        for i, text in enumerate(("first question", "second question", "third question", "fourth question")):
            agent.invoke({"messages": [HumanMessage(text, id="msg-0")]}, thread("reuse"))
            if i == 1:
                engine.commit("reuse", keep=("messages", 0))
        assert texts(stored(engine, "reuse")) == ["first question", "A1", "second question", "A2",
                                                   "third question", "A3", "fourth question", "A4"]


def test_a_replayed_turn_shows_its_question_once(root):
    """Replaying a turn from its input checkpoint gives the question a fresh id; it is matched to its stored copy
    by fingerprint, and the model sees it once, in its place (not also pinned as if archived)."""
    model = scripted("A1", "A2", "A2, regenerated.")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        agent.invoke(ask("Q1"), thread("replay"))
        agent.invoke(ask("Q2"), thread("replay"))
        before_q2 = next(s.config for s in agent.get_state_history(thread("replay"))
                         if s.next == ("__start__",) and len(s.values["messages"]) == 2)
        agent.invoke(None, before_q2)
        assert [m.text for m in model.prompts[-1] if not m.additional_kwargs.get("workmem")] == ["Q1", "A1", "Q2"]
        assert texts(stored(engine, "replay")) == ["Q1", "A1", "Q2", "A2", "A2, regenerated."]


# -- stateless clients -----------------------------------------------------------------------------------


def test_a_client_sending_only_new_turns_that_repeats_its_first_turn_stores_it_each_time(root):
    """A client that sends only new turns and repeats an identical turn stores it twice. When the session
    holds only that first turn, the state [question, this run's identical reply] looked like the whole live
    run at the start of the state, and both were taken as stored: two of three turns were lost."""
    model = scripted("Hello!", "Hello!", "Hello!")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)])
        for _ in range(3):
            agent.invoke({"messages": [{"role": "user", "content": "hi"}]}, thread("rep"))
        assert texts(stored(engine, "rep")) == ["hi", "Hello!"] * 3
        assert prompt_texts(model) == ["hi", "Hello!", "hi", "Hello!", "hi"]


def test_a_stateless_client_after_a_keep_0_commit_with_a_repeated_reply_stores_once(root):
    """After `engine.commit(sid)` (keep 0) the live run is empty and the newest archived message anchors the
    state; when its text ("Done.") occurred earlier, the earliest occurrence must not win."""
    model = scripted("Done.", "Done.", "Sure.")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)])
        history: list[dict[str, str]] = []
        for i, text in enumerate(("Do the first thing.", "Do the next thing.", "More?")):
            history.append({"role": "user", "content": text})
            out = agent.invoke({"messages": history}, thread("k0"))
            history.append({"role": "assistant", "content": out["messages"][-1].text})
            if i == 1:
                assert engine.commit("k0")["status"] == "completed"
        assert texts(stored(engine, "k0")) == [m["content"] for m in history]


def test_a_commit_completing_while_a_stateless_history_is_aligned_duplicates_nothing(root, monkeypatch):
    """The live messages are read first and the newest archive only when no id anchors the state; a
    background commit that completes in between makes the archive newer than the live snapshot (its last
    message is inside the snapshot), and the live run was never found after it: everything stored again."""
    model = scripted(*(f"Answer {i}." for i in range(5)))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)])
        history: list[dict[str, str]] = []

        def turn(i: int) -> None:
            history.append({"role": "user", "content": f"Question {i}?"})
            out = agent.invoke({"messages": history}, thread("race"))
            history.append({"role": "assistant", "content": out["messages"][-1].text})

        for i in range(3):
            turn(i)
        sessions = engine.storage.sessions
        before_commit = sessions.live_messages("race")
        assert engine.commit("race", keep=("messages", 2))["status"] == "completed"
        # every read of the next run happened just before the commit ended; the archive is read after it
        monkeypatch.setattr(sessions, "live_messages", lambda sid: before_commit)
        turn(3)
        monkeypatch.undo()
        assert texts(stored(engine, "race")) == [m["content"] for m in history]


def test_forget_then_a_stateless_client_starting_over_stores_each_message_once(root):
    """`forget()` deletes the session; the middleware's cache of the newest archived message must not
    survive it (a new archive_001 is another archive)."""
    model = scripted(*(f"Answer {i}." for i in range(8)))
    with WorkingMemoryEngine(root, durable=False) as engine:
        middleware = WorkingMemoryMiddleware(engine)
        agent = create_agent(model, middleware=[middleware])

        def conversation(questions: range, commit_after: int) -> list[dict[str, str]]:
            history: list[dict[str, str]] = []
            for i in questions:
                history.append({"role": "user", "content": f"Question {i}?"})
                out = agent.invoke({"messages": history}, thread("again"))
                history.append({"role": "assistant", "content": out["messages"][-1].text})
                if i == commit_after:
                    engine.commit("again")
            return history

        conversation(range(3), 1)
        assert middleware.forget("again")["deleted"]
        history = conversation(range(3, 7), 4)
        assert texts(stored(engine, "again")) == [m["content"] for m in history]


def test_a_chat_ui_that_resends_only_the_visible_text_stores_each_message_once(root):
    """Most chat front ends re-send the user/assistant texts but not the agent's tool calls and results:
    the stored tool traffic is skipped, not taken for a divergence (the first build stored the whole
    history again each turn: 16 messages became 28 after 4 turns)."""
    script = [step for i in range(4) for step in (call("read_file", {"path": f"f{i}.py"}), f"Read f{i}.py.")]
    model = scripted(*script)
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[read_file], middleware=[WorkingMemoryMiddleware(engine)])
        history: list[dict[str, str]] = []
        for i in range(4):
            history.append({"role": "user", "content": f"Read f{i}.py"})
            out = agent.invoke({"messages": history}, thread("ui"))
            history.append({"role": "assistant", "content": out["messages"][-1].text})
        assert engine.session_info("ui")["total_message_count"] == 16
        assert prompt_texts(model).count("Read f0.py") == 1
        for prompt in model.prompts:
            assert pairing_problems(prompt) == []


def test_a_stateless_client_retrying_a_request_does_not_duplicate_forever(root):
    """A request that timed out on the client is sent again; the first attempt's answer was stored, the
    retry's answer differs. The first answer, which the client never saw, is skipped: nothing snowballs."""
    model = scripted("A0", "A1", "A1, retried.", "A2", "A3")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)])
        history = [{"role": "user", "content": "Q0"}]
        out = agent.invoke({"messages": history}, thread("retry"))
        history += [{"role": "assistant", "content": out["messages"][-1].text}, {"role": "user", "content": "Q1"}]
        agent.invoke({"messages": history}, thread("retry"))  # the reply never reached the client
        out = agent.invoke({"messages": history}, thread("retry"))
        history.append({"role": "assistant", "content": out["messages"][-1].text})
        before = engine.session_info("retry")["total_message_count"]
        for text in ("Q2", "Q3"):
            history.append({"role": "user", "content": text})
            out = agent.invoke({"messages": history}, thread("retry"))
            history.append({"role": "assistant", "content": out["messages"][-1].text})
        assert engine.session_info("retry")["total_message_count"] == before + 4
