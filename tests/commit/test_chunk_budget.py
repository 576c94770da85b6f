"""The chunk budget bounds the whole prompt a model reads, not only its transcript.

A prompt is the system prompt + the current working memory (or the previous memory) + its size
warnings + the chunk's transcript; with a large WM, a transcript of `chunk_tokens` alone would make
the prompt far larger than the budget.
"""

from __future__ import annotations

from typing import Any

import pytest
from fakes import create_call, long_session, scripted, valid_update_call
from langchain_core.outputs import ChatGeneration, ChatResult

from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.nodes.formatting import HEADER_RE
from workmem.nodes.prompts import create_system_prompt, update_system_prompt
from workmem.nodes.slice_turns import MIN_TRANSCRIPT_TOKENS, WM_GROWTH_TOKENS, prompt_overhead, transcript_budget
from workmem.state.memory import TABLE_TOTAL, render_sections
from workmem.state.tokens import count_tokens

CHUNK_TOKENS = 10_000

FIRST_TURNS = [
    {"role": "user", "content": "Please fix the CSV parser in src/parser.py, Nordhavn feeds fail."},
    {"role": "assistant", "content": "The parser hard-codes a comma delimiter."},
]


def big_memory() -> dict[str, str]:
    """A v2 working memory of ~4 000 tokens: long bulleted sections (two of them oversized)."""

    def bullets(topic: str, n: int) -> str:
        return "\n".join(f"- {topic} {i}: supplier Nordhavn-{i} sends semicolon files on 2024-03-{i % 28 + 1:02d}, "
                         f"decided to keep parser_{i}.py because the 2023 audit relied on it." for i in range(n))

    return {"Session Title": "Fix the CSV parser", "Current State": "Reading src/parser.py.",
            "Task & Goals": "- Fix delimiter detection in src/parser.py",
            "Key Facts & Decisions": bullets("Fact", 40), "Files & Context": bullets("File", 30),
            "Errors & Corrections": "- ValueError: missing columns in test_brightline",
            "Open Issues": bullets("Issue", 24)}


class PromptRecorder(ExtractiveChatModel):
    """Answers the first call with `first`, later ones extractively; records every prompt."""

    first: Any = None
    prompts: list[list[Any]] = []

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.prompts.append(list(messages))
        if self.first is not None and len(self.prompts) == 1:
            return ChatResult(generations=[ChatGeneration(message=self.first)])
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def prompt_tokens(prompt: list[Any]) -> int:
    return sum(count_tokens(m.text) for m in prompt)


def transcript_seqs(prompt: list[Any]) -> list[int]:
    text = "\n".join(m.text for m in prompt)
    return [int(h.group(1)) for line in text.splitlines() if (h := HEADER_RE.match(line))]


@pytest.mark.parametrize("model_kind", ["scripted_keep", "extractive"])
def test_every_prompt_fits_the_chunk_budget_over_a_large_working_memory(make_engine, model_kind):
    """Each prompt of a multi-chunk commit over a ~4k-token WM stays within `chunk_tokens`; only a chunk
    made of one message that alone exceeds the budget (clipped, never split) may go over."""
    if model_kind == "scripted_keep":
        model = scripted(create_call(big_memory()), *[valid_update_call({})] * 40)
    else:  # the extractive model also grows the WM from chunk to chunk
        model = PromptRecorder(first=create_call(big_memory()), prompts=[])
    engine = make_engine(model, chunk_tokens=CHUNK_TOKENS, clip_tokens=8_000, memory_budget=TABLE_TOTAL)
    engine.add_messages("s", FIRST_TURNS)
    assert engine.commit("s")["status"] == "completed"
    assert count_tokens(engine.working_memory("s")["working_summary"]["markdown"]) > 3_500

    huge = "rows: " + " ".join(f"value{i}" for i in range(12_000))
    second = long_session(80)
    second.insert(100, {"role": "user", "content": huge})  # one message larger than the budget, even clipped
    engine.add_messages("s", second)
    assert engine.commit("s")["status"] == "completed"

    prompts = model.prompts[1:]
    assert len(prompts) >= 3
    lone_oversized = 0
    for prompt in prompts:
        if prompt_tokens(prompt) > CHUNK_TOKENS:
            assert len(transcript_seqs(prompt)) == 1, "only a single oversized message may exceed the budget"
            lone_oversized += 1
    assert lone_oversized == 1
    seqs = [s for p in prompts for s in transcript_seqs(p)]
    assert seqs == list(range(3, 3 + len(second)))  # every covered message seen once, in order


def test_transcript_budget_leaves_room_for_the_prompt_around_it():
    empty, wm = prompt_overhead(""), render_sections(big_memory())
    assert empty >= max(count_tokens(update_system_prompt()), count_tokens(create_system_prompt()))
    assert transcript_budget(24_000, "") == 24_000 - empty - WM_GROWTH_TOKENS
    # the WM is counted whether it is sent as the current (update) or the previous (create) memory
    assert prompt_overhead(wm) >= empty + count_tokens(wm)
    legacy = ("A free-form summary of the session. " * 400).strip()
    assert prompt_overhead(legacy) >= empty + count_tokens(legacy)
    assert transcript_budget(24_000, wm) == 24_000 - prompt_overhead(wm) - WM_GROWTH_TOKENS


def test_transcript_budget_has_a_floor_so_commits_move_forward():
    """A quarter of the budget, at least 1 000 tokens, all of a budget smaller than that."""
    wm = render_sections(big_memory())
    huge_wm = wm * 6  # larger than the whole default budget
    assert prompt_overhead(huge_wm) > 24_000
    assert transcript_budget(24_000, huge_wm) == 6_000
    assert transcript_budget(4_000, wm) == MIN_TRANSCRIPT_TOKENS == 1_000
    assert transcript_budget(2_000, "") == 1_000
    assert transcript_budget(300, "") == 300
