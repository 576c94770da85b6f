"""LangChain tools `archive_search` and `archive_expand`, bound to an engine and a session."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool

from workmem.graphs.agent.binding import readable_session, resolve_engine
from workmem.graphs.context.search_results import MAX_CONTEXT, format_hits
from workmem.graphs.context.tool_results import MAX_READ_TOKENS
from workmem.state.archive_object import EXPAND_TOOL_NAME, READ_TOOL_NAME, SEARCH_TOOL_NAME
from workmem.state.errors import WorkmemError
from workmem.state.tokens import count_tokens

if TYPE_CHECKING:
    from workmem.graphs.engine import WorkingMemoryEngine

MAX_EXPAND_CHARS = 20_000

# Sent with every agent call, so they are hand-written and short (the pydantic form of the same arguments
# costs twice the tokens: `anyOf` with null, defaults, bounds); the system note says when to search, and
# the engine checks every argument (a bad one comes back to the model as the tool's error text).
SEARCH_DESCRIPTION = "Search archived messages: 2-3 keywords, or an exact name or id."
EXPAND_DESCRIPTION = "Read archived messages: an archive_id, or start_seq..end_seq."
SEARCH_ARGS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "archive_id": {"type": "string"},
        "context": {"type": "integer", "description": f"0-{MAX_CONTEXT} neighbours"},
    },
    "required": ["query"],
}
READ_DESCRIPTION = "Read a tool result by ref: offset and limit in chars, or query; no ref: query all, or list."
READ_ARGS: dict[str, Any] = {
    "type": "object",
    "properties": {"ref": {"type": "string"}, "offset": {"type": "integer"}, "limit": {"type": "integer"},
                   "query": {"type": "string"}},
}
EXPAND_ARGS: dict[str, Any] = {
    "type": "object",
    "properties": {"archive_id": {"type": "string"}, "start_seq": {"type": "integer"},
                   "end_seq": {"type": "integer"}},
}


def binds_tools(model: Any) -> bool:
    """False for a chat model that cannot take tools (its `bind_tools` is `BaseChatModel`'s, which raises)."""
    from langchain_core.language_models import BaseChatModel

    return not isinstance(model, BaseChatModel) or type(model).bind_tools is not BaseChatModel.bind_tools


def schema_tokens(tools: Sequence[Any]) -> int:
    """Tokens of tool schemas as a provider receives them: `json.dumps` of each tool's OpenAI form."""
    return sum(count_tokens(json.dumps(t if isinstance(t, dict) else convert_to_openai_tool(t))) for t in tools)


def format_expansion(found: dict[str, Any], max_chars: int = MAX_EXPAND_CHARS) -> str:
    """An expansion as text, cut at `max_chars` with a note on how to read the rest."""
    if not found["message_count"]:
        return "No messages in that range."
    head = f"{found['archive_id']}: {found['abstract']}\n" if found["archive_id"] else ""
    head += f"messages #{found['start_seq']}-#{found['end_seq']} ({found['message_count']}):\n\n"
    content = found["content"]
    if len(content) > max_chars:
        how = (f"{READ_TOOL_NAME}(ref=\"seq:{found['start_seq']}\", offset=…) reads a long tool result by windows"
               if found["message_count"] == 1 else "call archive_expand with start_seq/end_seq to read a smaller range")
        content = content[:max_chars] + f"\n\n[cut: {len(content) - max_chars} more characters; {how}]"
    return head + content


# what a tool answers as text instead of failing the agent's run: workmem's typed errors, the file system's, and
# SQLite's own (a search index damaged in a way no check names yet)
TOOL_ERRORS = (WorkmemError, OSError, sqlite3.Error)


def tool_error(exc: BaseException, engine: Any) -> ToolException:
    """An error of a tool call as the text the model gets: workmem's typed errors and the file system's own
    (`OSError`: a damaged file, a full disk) alike, with paths shown inside the data root (never its absolute
    path, which says nothing to the model and much about the host)."""
    text = str(exc) if isinstance(exc, WorkmemError) else f"storage error: {exc}"
    root = getattr(engine, "root", None)
    if root is not None:
        text = text.replace(str(root) + os.sep, "").replace(str(root), "the data root")
    return ToolException(text)


def _refuse(unknown: dict[str, Any]) -> None:
    """An argument the schema does not name comes back to the model as the tool's error text."""
    if unknown:
        raise ToolException(f"unknown argument(s) {sorted(unknown)}; see the tool's parameters")


def make_archive_tools(
    engine: WorkingMemoryEngine | Callable[[], WorkingMemoryEngine],
    session_id: str | None = None,
    *,
    default_session_id: str | None = None,
    max_expand_chars: int = MAX_EXPAND_CHARS,
) -> list[BaseTool]:
    """`archive_search` and `archive_expand` for one session (None: the run's session, see `readable_session`).

    The argument schemas are hand-written (`SEARCH_ARGS`, `EXPAND_ARGS`); the engine checks the values.
    Errors such as an unknown archive id or a bad argument come back to the model as the tool's answer,
    not as exceptions.
    Both tools are async-capable (`ainvoke` runs the engine in a worker thread).
    """

    def _session() -> str:
        return readable_session(resolve_engine(engine), session_id, default=default_session_id)

    def archive_search(query: Any = None, archive_id: Any = None, context: Any = 0,
                       **unknown: Any) -> tuple[str, list[dict[str, Any]]]:
        _refuse(unknown)
        bound = None
        try:
            bound = resolve_engine(engine)
            hits = bound.archive_search(_session(), query, archive_id=archive_id, context=context)
        except TOOL_ERRORS as exc:
            raise tool_error(exc, bound) from exc
        return format_hits(query, hits), hits

    def archive_expand(archive_id: Any = None, start_seq: Any = None, end_seq: Any = None, **unknown: Any) -> str:
        _refuse(unknown)
        bound = None
        try:
            bound = resolve_engine(engine)
            found = bound.archive_expand(_session(), archive_id, start_seq=start_seq, end_seq=end_seq, previews=True)
        except TOOL_ERRORS as exc:
            raise tool_error(exc, bound) from exc
        return format_expansion(found, max_expand_chars)

    async def aarchive_search(**args: Any) -> tuple[str, list[dict[str, Any]]]:
        return await asyncio.to_thread(lambda: archive_search(**args))

    async def aarchive_expand(**args: Any) -> str:
        return await asyncio.to_thread(lambda: archive_expand(**args))

    search = StructuredTool.from_function(archive_search, coroutine=aarchive_search, name=SEARCH_TOOL_NAME,
                                          description=SEARCH_DESCRIPTION, args_schema=SEARCH_ARGS,
                                          response_format="content_and_artifact", handle_tool_error=True)
    expand = StructuredTool.from_function(archive_expand, coroutine=aarchive_expand, name=EXPAND_TOOL_NAME,
                                          description=EXPAND_DESCRIPTION, args_schema=EXPAND_ARGS,
                                          handle_tool_error=True)
    return [search, expand]


def format_read(found: dict[str, Any]) -> str:
    """What the read tool answers: a window with where it lies, the windows around matches, or the list."""
    if "results" in found:
        if not found["results"]:
            return "No large tool results in this session."
        return "\n".join(f"{r['ref']} · {r['tool'] or 'tool'} · {r['kind']} · {r['chars']:,} chars, {r['tokens']:,} "
                         f"tokens" + (f" · {r['archive_id']}" if r.get("archive_id") else "") for r in found["results"])
    if "matches" in found:
        if not found["matches"]:
            return f"No match of {found['query']!r}."
        return "\n\n".join(f"[{m['ref']} chars {m['offset']:,}-{m['end']:,}]\n{m['text']}" for m in found["matches"])
    head = (f"[{found['ref']} · {found['tool'] or 'tool'} · chars {found['offset']:,}-{found['end']:,} of "
            f"{found['chars']:,}]")
    more = (f"\n[{found['chars'] - found['end']:,} more characters: offset={found['end']}]"
            if found["end"] < found["chars"] else "")
    return f"{head}\n{found['text']}{more}"


def make_tool_result_reader(
    engine: WorkingMemoryEngine | Callable[[], WorkingMemoryEngine],
    session_id: str | None = None,
    *,
    default_session_id: str | None = None,
    max_tokens: int | Callable[[str], int] = MAX_READ_TOKENS,
) -> BaseTool:
    """`read_tool_result` for one session (None: the run's session): reads a large tool result by reference,
    live or archived, one window of at most `max_tokens` tokens at a time (a callable of the session: decided
    per call).
    Bad arguments come back to the model as the tool's answer. Async-capable."""

    def read_tool_result(ref: Any = None, offset: Any = None, limit: Any = None, query: Any = None,
                         **unknown: Any) -> str:
        _refuse(unknown)
        bound = None
        try:
            bound = resolve_engine(engine)
            session = readable_session(bound, session_id, default=default_session_id)
            cap = max_tokens(session) if callable(max_tokens) else max_tokens
            found = bound.read_tool_result(session, ref, offset=offset, limit=limit, query=query, max_tokens=cap)
        except TOOL_ERRORS as exc:
            raise tool_error(exc, bound) from exc
        return format_read(found)

    async def aread_tool_result(**args: Any) -> str:
        return await asyncio.to_thread(lambda: read_tool_result(**args))

    return StructuredTool.from_function(read_tool_result, coroutine=aread_tool_result, name=READ_TOOL_NAME,
                                        description=READ_DESCRIPTION, args_schema=READ_ARGS, handle_tool_error=True)
