"""LoCoMo-format conversations for `workmem eval`: loading, validation, and the messages ingest stores.

The public LoCoMo format: a sample (or a list of samples) with `conversation` — `speaker_a`,
`speaker_b`, `session_<n>` lists of `{speaker, dia_id, text}` (optionally `blip_caption` for a shared
image) and `session_<n>_date_time` — and `qa` items `{question, answer | adversarial_answer,
evidence: [dia_id], category}`.

What ingest stores, one user message per turn: `"<speaker>: <text>"` (a shared image adds
` [image: <caption>]`), and at the start of each dated session a separate user message
`"[session <n> — <date_time>]"`, so every session date is one message the commit can keep and the
search can find, and every turn maps to exactly one stored seq.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workmem.state.errors import InvalidInput

CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ADVERSARIAL = 5
_SESSION_KEY = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D(\d+):0*(\d+)")
_SAFE = re.compile(r"[^a-z0-9._-]+")


@dataclass(frozen=True)
class Turn:
    """One dialogue turn: who said it, its id (`D<session>:<n>`) and its text (caption included)."""

    dia_id: str
    speaker: str
    text: str

    @property
    def content(self) -> str:
        """The stored message text: `"<speaker>: <text>"`."""
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True)
class Session:
    """One dated session of the conversation."""

    number: int
    date: str
    turns: tuple[Turn, ...]

    @property
    def note(self) -> str | None:
        """The date note stored before the session's first turn (None when the session has no date)."""
        return f"[session {self.number} — {self.date}]" if self.date else None


@dataclass(frozen=True)
class QAItem:
    """One question: gold answer (None for adversarial items), evidence dia ids, category."""

    index: int
    question: str
    answer: str | None
    evidence: tuple[str, ...]
    category: int
    adversarial_answer: str | None = None


@dataclass(frozen=True)
class Sample:
    """One LoCoMo conversation and its questions."""

    sample_id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]
    qa: tuple[QAItem, ...] = field(default=())

    @property
    def turns(self) -> list[Turn]:
        """Every turn, in conversation order."""
        return [t for s in self.sessions for t in s.turns]

    @property
    def session_id(self) -> str:
        """The workmem session id this sample is ingested under (a plain id)."""
        return ("locomo-" + _SAFE.sub("-", self.sample_id.lower())).strip("-.")[:128]


def load_samples(data: str | Path | dict[str, Any] | list[Any]) -> list[Sample]:
    """LoCoMo samples from a file path, one sample dict, or a list of sample dicts."""
    if isinstance(data, (str, Path)):
        path = Path(data)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidInput("data", str(path), f"cannot read a LoCoMo JSON file: {exc}") from exc
        except RecursionError as exc:
            raise InvalidInput("data", str(path), "cannot read a LoCoMo JSON file: nested too deeply") from exc
    raw = [data] if isinstance(data, dict) else data
    if not isinstance(raw, list) or not raw:
        raise InvalidInput("data", type(data).__name__, "must be a LoCoMo sample or a non-empty list of samples")
    samples = [parse_sample(item, i) for i, item in enumerate(raw)]
    first: dict[str, Sample] = {}
    for sample in samples:  # each sample is evaluated in a session of its own, named after its id
        other = first.setdefault(sample.session_id, sample)
        if other is not sample:
            raise InvalidInput("data", sample.sample_id, f"names the same session as sample {other.sample_id!r} "
                                                         f"({sample.session_id}): give the samples distinct ids")
    return samples


def parse_sample(item: Any, position: int = 0) -> Sample:
    """One sample dict → `Sample`; a missing or malformed field raises `InvalidInput` naming it."""
    if not isinstance(item, dict) or not isinstance(item.get("conversation"), dict):
        raise InvalidInput(f"data[{position}].conversation", None, "must be an object")
    conv = item["conversation"]
    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY.fullmatch(k)))
    sessions = [_session(conv, n, position) for n in numbers]
    speakers = tuple(dict.fromkeys([str(conv[k]) for k in ("speaker_a", "speaker_b") if conv.get(k)]
                                   + [t.speaker for s in sessions for t in s.turns]))
    qa_raw = item.get("qa", [])
    if not isinstance(qa_raw, list):
        raise InvalidInput(f"data[{position}].qa", type(qa_raw).__name__, "must be a list")
    qa = tuple(_qa(q, i, position) for i, q in enumerate(qa_raw))
    sample_id = str(item.get("sample_id") or f"sample-{position}")
    if not any(s.turns for s in sessions):
        raise InvalidInput(f"data[{position}].conversation", sample_id, "holds no turns: nothing to evaluate")
    return Sample(sample_id, speakers, tuple(s for s in sessions if s.turns), qa)


def _session(conv: dict[str, Any], n: int, position: int) -> Session:
    turns_raw = conv[f"session_{n}"]
    where = f"data[{position}].conversation.session_{n}"
    if not isinstance(turns_raw, list):
        raise InvalidInput(where, type(turns_raw).__name__, "must be a list of turns")
    turns = []
    for i, t in enumerate(turns_raw):
        if not isinstance(t, dict) or not isinstance(t.get("speaker"), str) or not t.get("dia_id"):
            raise InvalidInput(f"{where}[{i}]", t, "a turn needs speaker and dia_id")
        text = str(t.get("text") or "").strip()
        caption = str(t.get("blip_caption") or "").strip()
        if caption:
            text = f"{text} [image: {caption}]".strip()
        if text:  # a turn with neither text nor caption stores nothing (its dia id stays unmapped)
            turns.append(Turn(normalize_dia_id(str(t["dia_id"])), t["speaker"].strip(), text))
    return Session(n, str(conv.get(f"session_{n}_date_time") or "").strip(), tuple(turns))


def _qa(q: Any, index: int, position: int) -> QAItem:
    where = f"data[{position}].qa[{index}]"
    if not isinstance(q, dict) or not isinstance(q.get("question"), str) or not q["question"].strip():
        raise InvalidInput(f"{where}.question", q, "must be a non-empty string")
    category = q.get("category")
    if isinstance(category, bool) or not isinstance(category, int):
        raise InvalidInput(f"{where}.category", category, "must be an integer (1–5)")
    answer = q.get("answer")
    adversarial = q.get("adversarial_answer")
    return QAItem(index, q["question"].strip(), None if answer is None else str(answer),
                  tuple(parse_evidence(q.get("evidence"))), category,
                  None if adversarial is None else str(adversarial))


def normalize_dia_id(raw: str) -> str:
    """`D3:07` → `D3:7`; anything else is returned stripped."""
    found = _DIA_ID.fullmatch(raw.strip())
    return f"D{int(found.group(1))}:{int(found.group(2))}" if found else raw.strip()


def parse_evidence(raw: Any) -> list[str]:
    """Evidence dia ids of a QA item; tolerates `"D8:6; D9:17"` strings and zero-padded numbers."""
    items = raw if isinstance(raw, list) else [raw] if isinstance(raw, str) else []
    out: list[str] = []
    for item in items:
        for piece in re.split(r"[;,\s]+", str(item)):
            if piece and normalize_dia_id(piece) not in out:
                out.append(normalize_dia_id(piece))
    return out


def category_name(category: int) -> str:
    """`4` → `4 single-hop` (the numbering of the public LoCoMo file)."""
    return f"{category} {CATEGORY_NAMES.get(category, 'other')}"
