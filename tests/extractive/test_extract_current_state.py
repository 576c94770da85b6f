"""Session Title and Current State: the first request, the work / result / next step, a dialogue's date."""

from __future__ import annotations

from fakes import stored_messages

from workmem.nodes.extractive.current_state import SESSION_DATE_RE, current_state, title
from workmem.nodes.extractive.transcript import lines_of, parse_transcript
from workmem.nodes.formatting import format_messages


def read(*raw: tuple[str, str]):
    msgs = parse_transcript(format_messages(stored_messages([{"role": r, "content": c} for r, c in raw])))
    return msgs, lines_of(msgs)


def test_title_is_the_first_request_and_skips_date_notes():
    msgs, _ = read(("user", "[2031-03-03 standup]"), ("user", "Hi! Can you migrate the billing jobs to Celery?"))
    assert title(msgs, "") == "Migrate the billing jobs to Celery"
    msgs, _ = read(("user", "The nightly export keeps timing out at 02:00."))
    assert title(msgs, "") == "The nightly export keeps timing out at 02:00"
    assert title([], "") == ""


def test_a_dialogue_is_titled_by_who_talks():
    msgs, _ = read(("user", "Ada: Hi Bram!"), ("user", "Bram: Hi Ada."), ("user", "Ada: How was the trip?"),
                   ("user", "Bram: Windy."))
    assert title(msgs, "") == "Conversation between Ada and Bram"


def test_current_state_says_work_result_and_next_step():
    msgs, lines = read(
        ("user", "Please make the export resumable."),
        ("assistant", "Added a checkpoint file to export.py. Let me run the nightly job by hand."),
    )
    assert current_state(msgs, lines, ["Make the export resumable."], []) == (
        "Working on: Make the export resumable. Last result: Added a checkpoint file to export.py. "
        "Next step: Let me run the nightly job by hand."
    )


def test_current_state_falls_back_to_the_first_open_issue():
    msgs, lines = read(("user", "Please make the export resumable."), ("assistant", "The job writes 3 files."))
    state = current_state(msgs, lines, [], ["User asked: Which bucket?"])
    assert state == ("Working on: Make the export resumable. Last result: The job writes 3 files. "
                     "Still open: User asked: Which bucket?")


def test_a_dialogue_state_records_the_session_date_for_the_next_commit():
    msgs, lines = read(("user", "[session 2 — 6:40 pm on 17 March, 2031]"), ("user", "Bram: Any news?"),
                       ("user", "Ada: I booked the ferry to Tern Island."), ("user", "Ada: It leaves at 9."),
                       ("user", "Bram: Great, see you there!"))
    state = current_state(msgs, lines, [], [])
    assert state == ("Bram and Ada are talking; the latest session is dated 17 March, 2031. "
                     "Last said, by Bram: Great, see you there!")
    assert SESSION_DATE_RE.search(state).group(1) == "17 March, 2031"


def test_known_speakers_are_read_back_from_a_dialogue_state():
    from workmem.nodes.extractive.current_state import known_speakers

    assert known_speakers("Bram and Ada are talking; the latest session is dated 17 March, 2031.") == ["Bram", "Ada"]
    assert known_speakers("Ann, Bo and Cy are talking.") == ["Ann", "Bo", "Cy"]
    assert known_speakers("Working on: Fix the import.") == []


def test_a_date_note_alone_still_dates_the_state():
    msgs, lines = read(("user", "[session 3 — 9:00 am on 2 April, 2031]"))
    assert current_state(msgs, lines, [], [], ["Ada", "Bram"]) == (
        "Ada and Bram are talking; the latest session is dated 2 April, 2031."
    )
    assert current_state(msgs, lines, [], []) == "The latest session is dated 2 April, 2031."
