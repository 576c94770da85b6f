"""Which sentences of a coding agent's messages are prose: not a shell command, a code line or a fragment.

An agent's messages mix reasoning with commands, code and the broken ends of clipped blocks. Key Facts and
Current State keep only prose sentences (the commands and code stay in the archive, searchable): a
sentence that opens with a program word and carries shell syntax is a command; one with code syntax
outside its backticks (an assignment, a call with arguments, a `def`, escapes) is code; one that opens
with a lowercase word or a symbol, ends on a comma or colon, or leaves a backtick, quote or bracket
open is a fragment. A ReAct label (`THOUGHT:`) before a sentence is dropped.
"""

from __future__ import annotations

import re

from workmem.nodes.extractive.code_words import COMMAND_WORDS, GLUE_ENDS, THOUGHT_LABELS
from workmem.nodes.extractive.text import alternation

_LABEL_RE = re.compile(rf"^(?:{alternation(THOUGHT_LABELS)})\s*:\s*", re.I)
_COMMAND_RE = re.compile(rf"^(?:{alternation(COMMAND_WORDS)})\s+\S", re.I)
_SHELL_SYNTAX_RE = re.compile(r"&&|\|\||(?<!\|)\|(?!\|)|(?:^|\s)--?[A-Za-z]|\s[12]?>{1,2}\s*\S|\$\(|<<|\\$")
_QUOTED_RE = re.compile(r"`[^`]*`|\"[^\"]*\"")
_CODE_RE = re.compile(  # unmistakable: a statement's opening word, escapes, an arrow, a block opener at the end
    r"^\s*(?:def|class|import|from\s+\S+\s+import|return|raise|elif|else\s*:|try\s*:|except|lambda|with\s.*:$)\b|"
    r"\\[nt\"']|->|[{;:]\s*$|^\s*[#@]"
)
_CODE_HINT_RE = re.compile(r"\w\s*(?:==|!=|\+=|-=|<=|>=|=)\s*[\w\"'(\[{]|\w\([^)]*[,=][^)]*\)")
_PLAIN_WORD_RE = re.compile(r"(?<![\w.])[A-Za-z][a-z]+(?![\w.(])")
MIN_PLAIN_WORDS = 3  # prose has words of its own outside backticks and quotes
CODE_HINT_WORDS = 6  # a line with an assignment or a call needs this many plain words to be prose
HEADING_WORDS = 10
_SYMBOLS_RE = re.compile(r"[(){}\[\]=<>;\\|$&*_\"]")
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_GLUE_END_RE = re.compile(rf"\b(?:{alternation(GLUE_ENDS)})[.!?]?$", re.I)
_OUTPUT_RE = re.compile(
    r"\s*(?:\[?\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}|\[?\d{1,2}:\d{2}:\d{2}\b|"  # 2024-03-14T09:12 …, [09:12:01]
    r"\[?(?:ERROR|WARN(?:ING)?|INFO|DEBUG|FATAL|CRITICAL|TRACE)\b\]?\s*[:\]\-]|"  # ERROR: …, [WARN] …
    r"File \"[^\"]+\", line \d+|at [\w.$<>]+\([^)]*\)\s*$|##\[\w+\])"  # a traceback frame, a Java frame, CI
)


def strip_label(sentence: str) -> str:
    """The sentence without a leading reasoning label (`THOUGHT: `, `Analysis: `)."""
    return _LABEL_RE.sub("", sentence, count=1).strip()


def is_command(sentence: str) -> bool:
    """A shell command written as a sentence (`Echo DONE && git add -A.`, `cd /app && pytest -x`)."""
    text = sentence.strip().rstrip(".")
    return bool(_COMMAND_RE.match(text) and _SHELL_SYNTAX_RE.search(text)) or text.count("&&") >= 2


def plain_words(sentence: str) -> int:
    """Words of the sentence's own (outside backticks and quotes, not identifiers or paths)."""
    return len(_PLAIN_WORD_RE.findall(_QUOTED_RE.sub("x", sentence)))


def is_code(sentence: str) -> bool:
    """A code line: a statement, escapes or a block opener outside backticks and quotes; an assignment or a
    call with few plain words around it; or mostly symbols."""
    bare = _QUOTED_RE.sub("x", sentence.strip().rstrip("."))
    words = plain_words(sentence)
    if _CODE_RE.search(bare):
        return True
    if _CODE_HINT_RE.search(bare) and words < CODE_HINT_WORDS:
        return True
    letters = sum(c.isalpha() for c in bare)
    return len(bare) >= 12 and len(_SYMBOLS_RE.findall(bare)) * 4 > letters


def _unbalanced(text: str) -> bool:
    if text.count("`") % 2 or text.count('"') % 2:
        return True
    stack: list[str] = []
    for char in text:
        if char in _OPENERS:
            stack.append(_OPENERS[char])
        elif char in _OPENERS.values():
            if not stack or stack.pop() != char:
                return True
    return bool(stack)


def is_fragment(sentence: str) -> bool:
    """A broken piece: opens lowercase or with a symbol, ends on a comma, a colon or a word no sentence ends on,
    or leaves a pair open."""
    text = sentence.strip()
    if not text:
        return True
    first = text[0]
    if not (first.isupper() or first.isdigit() or first in "`\"'"):
        return True
    return bool(re.search(r"[,:;]\s*[.!?]?$", text) or _GLUE_END_RE.search(text)) or _unbalanced(text)


def is_heading(sentence: str) -> bool:
    """A heading or label, not a sentence: short, no end punctuation, its words mostly capitalised
    (`Manual Session Resumption Test`, `Step 1: Create a Test Project`)."""
    text = sentence.strip()
    words = [w for w in text.split() if any(c.isalpha() for c in w)]
    if not words or len(words) > HEADING_WORDS or re.search(r"[.!?]$", text):
        return False
    return sum(w[0].isupper() for w in words) * 10 >= len(words) * 6


def is_output_line(line: str) -> bool:
    """A line a program printed, pasted into a message: it opens with a timestamp or a clock time, a log level
    (`ERROR:`, `[WARN]`), a traceback or stack frame, or a CI runner's marker (`##[error]`)."""
    return bool(_OUTPUT_RE.match(line))


def is_prose(sentence: str) -> bool:
    """Neither a command, nor code, nor a fragment, nor a heading, nor pasted output, with words of its own."""
    return plain_words(sentence) >= MIN_PLAIN_WORDS and not (
        is_command(sentence) or is_code(sentence) or is_fragment(sentence) or is_heading(sentence)
        or is_output_line(sentence))
