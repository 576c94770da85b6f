"""Step-level grounding: could the agent see, at each step, what its next action is built from?

For each recorded assistant step of a session, its *grounds* are the code-like tokens of its text and tool-call
arguments whose first occurrence in the session is a tool message before the step, and that no system or user
message before it holds. A ground is *seen* when a message the chat model received for that step holds it (the
system message included; bound tool schemas excluded); a ground found only in the memory message (workmem's working
memory, a summariser's summary) counts as unseen and is reported apart. *Recent* grounds are those in the tool
messages since the previous assistant message. An unseen ground is also counted by its *distance*: how many messages
before the step the newest message holding it lies (at most 10, 11 to 40, more than 40).

- Tokens of a text: identifiers of 6+ characters (`[A-Za-z_][A-Za-z0-9_]{5,}`) holding an underscore, a digit or a
  lower-upper pair, and numbers of 3–6 digits not inside a word or a dotted number.
- A message's text: its content, plus for each tool call its name and its JSON-decoded arguments — every key and
  value, recursively, non-strings as `str()`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{5,}")
_NUMBER = re.compile(r"(?<![\w.])\d{3,6}(?![\w.])")
_LOWER_UPPER = re.compile(r"[a-z][A-Z]")
_DIGIT = re.compile(r"\d")
DISTANCES = ((10, "≤10"), (40, "11–40"), (None, ">40"))  # buckets of an unseen ground's distance, in messages


def tokens_of(text: str) -> set[str]:
    """The grounding tokens of a text."""
    out = {w for w in _WORD.findall(text) if "_" in w or _DIGIT.search(w) or _LOWER_UPPER.search(w)}
    out.update(_NUMBER.findall(text))
    return out


def _flat(value: Any) -> Iterable[str]:
    """Every key and value of decoded arguments, recursively, non-strings as `str()`."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _flat(item)
    elif isinstance(value, list):
        for item in value:
            yield from _flat(item)
    else:
        yield value if isinstance(value, str) else str(value)


def _decoded(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def recorded_text(message: dict[str, Any]) -> str:
    """The text of a recorded (OpenAI-style) message: content, tool-call names and decoded arguments."""
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    pieces = [content or ""]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        pieces.append(str(function.get("name") or ""))
        pieces.extend(_flat(_decoded(function.get("arguments"))))
    return "\n".join(pieces)


def sent_text(message: Any) -> str:
    """The text of a LangChain message a chat model received: its text, tool-call names and arguments."""
    pieces = [message.text]
    for call in getattr(message, "tool_calls", None) or []:
        pieces.append(str(call.get("name") or ""))
        pieces.extend(_flat(call.get("args")))
    return "\n".join(pieces)


@dataclass
class Step:
    """One recorded assistant step and what it is built from."""

    index: int  # position in the session's messages
    grounds: set[str]
    recent: set[str]
    holders: dict[str, int] = field(default_factory=dict)  # each ground → the newest earlier message holding it


def steps_of(messages: Sequence[dict[str, Any]]) -> list[Step]:
    """Every assistant step of a recorded session, with its grounds and recent grounds."""
    first_role: dict[str, str] = {}
    said: set[str] = set()  # tokens of system and user messages so far
    since_last: set[str] = set()  # tokens of tool messages since the previous assistant message
    newest: dict[str, int] = {}  # each token → the newest message so far holding it
    steps = []
    for i, message in enumerate(messages):
        role = message.get("role")
        tokens = tokens_of(recorded_text(message))
        if role == "assistant":
            grounds = {t for t in tokens if first_role.get(t) == "tool" and t not in said}
            steps.append(Step(i, grounds, grounds & since_last, {t: newest[t] for t in grounds}))
            since_last = set()
        elif role == "tool":
            since_last |= tokens
        if role in ("system", "user"):
            said |= tokens
        for t in tokens:
            first_role.setdefault(t, role)
            newest[t] = i
    return steps


def distance_bucket(distance: int) -> str:
    """The bucket of an unseen ground lying `distance` messages before its step."""
    return next(name for most, name in DISTANCES if most is None or distance <= most)


@dataclass
class Tally:
    """Grounding summed over steps: grounds, unseen ones, those seen only in the memory, blind calls."""

    steps: int = 0
    with_grounds: int = 0
    grounds: int = 0
    recent: int = 0
    unseen: int = 0
    recent_unseen: int = 0
    memory_only: int = 0
    blind_calls: int = 0
    blind_input: int = 0  # the whole input (messages and schemas) of each blind call
    unseen_by_distance: dict[str, int] = field(default_factory=lambda: {name: 0 for _, name in DISTANCES})
    unseen_examples: list[tuple[int, str]] = field(default_factory=list)

    def add(self, step: Step, seen: set[str], memory: set[str], call_input: int) -> None:
        """Count one step the chat model saw `seen` for (`memory`: tokens only its memory message holds)."""
        self.steps += 1
        self.with_grounds += bool(step.grounds)
        self.grounds += len(step.grounds)
        self.recent += len(step.recent)
        missing = step.grounds - seen
        self.unseen += len(missing)
        self.recent_unseen += len(step.recent - seen)
        self.memory_only += len(missing & memory)
        for token in missing:
            self.unseen_by_distance[distance_bucket(step.index - step.holders[token])] += 1
        if missing:
            self.blind_calls += 1
            self.blind_input += call_input
            if len(self.unseen_examples) < 20:
                self.unseen_examples.append((step.index, sorted(missing)[0]))

    def merge(self, other: Tally) -> None:
        """Add another tally's counts."""
        for name in ("steps", "with_grounds", "grounds", "recent", "unseen", "recent_unseen", "memory_only",
                     "blind_calls", "blind_input"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for bucket, count in other.unseen_by_distance.items():
            self.unseen_by_distance[bucket] += count

    @property
    def seen_share(self) -> float:
        """Grounds seen (memory-only ones count as unseen)."""
        return 1 - self.unseen / self.grounds if self.grounds else 1.0

    @property
    def recent_seen_share(self) -> float:
        """Recent grounds seen."""
        return 1 - self.recent_unseen / self.recent if self.recent else 1.0


def seen_tokens(prompt: Sequence[Any], is_memory: Any) -> tuple[set[str], set[str]]:
    """(tokens of the messages a call was sent, the memory message excepted; tokens of its memory message)."""
    seen: set[str] = set()
    memory: set[str] = set()
    for message in prompt:
        (memory if is_memory(message) else seen).update(tokens_of(sent_text(message)))
    return seen, memory
