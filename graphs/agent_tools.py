"""LangChain tools `archive_search` and `archive_expand`, bound to an engine and a session (SPEC §7)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import BaseModel, Field

from workmem.graphs.binding import resolve_engine, session_from_run
from workmem.graphs.search_results import MAX_CONTEXT, format_hits
from workmem.state.archive_object import EXPAND_TOOL_NAME, SEARCH_TOOL_NAME
from workmem.state.errors import WorkmemError

if TYPE_CHECKING:
    from workmem.graphs.engine import WorkingMemoryEngine

MAX_EXPAND_CHARS = 20_000

SEARCH_DESCRIPTION = (
    "Search the archived (older, summarised) messages of this conversation. Give 2-3 distinctive keywords, "
    "a name, or an exact identifier such as a file path; the text is matched literally (no regex or query "
    "syntax), best matches first, at most 12. Use it before saying something is unknown or was never "
    "discussed, then call archive_expand to read the surrounding messages."
)
EXPAND_DESCRIPTION = (
    "Read archived messages verbatim: a whole archive by its id (e.g. 'archive_002', as shown by "
    "archive_search), or a range of message numbers with start_seq and end_seq (the '#12' in a search hit)."
)


class SearchArgs(BaseModel):
    """Arguments of `archive_search`."""

    query: str = Field(description="2-3 keywords or an exact identifier, matched literally")
    archive_id: str | None = Field(default=None, description="only search this archive, e.g. 'archive_002'")
    context: int = Field(default=0, ge=0, le=MAX_CONTEXT,
                         description="also show this many messages before and after each match (0-3)")


class ExpandArgs(BaseModel):
    """Arguments of `archive_expand`."""

    archive_id: str | None = Field(default=None, description="the archive to read, e.g. 'archive_002'")
    start_seq: int | None = Field(default=None, description="first message number of a range to read")
    end_seq: int | None = Field(default=None, description="last message number of a range to read")


def format_expansion(found: dict[str, Any], max_chars: int = MAX_EXPAND_CHARS) -> str:
    """An expansion as text, cut at `max_chars` with a note on how to read the rest."""
    if not found["message_count"]:
        return "No messages in that range."
    head = f"{found['archive_id']}: {found['abstract']}\n" if found["archive_id"] else ""
    head += f"messages #{found['start_seq']}-#{found['end_seq']} ({found['message_count']}):\n\n"
    content = found["content"]
    if len(content) > max_chars:
        content = (content[:max_chars] + f"\n\n[cut: {len(content) - max_chars} more characters; call "
                   "archive_expand with start_seq/end_seq to read a smaller range]")
    return head + content


def make_archive_tools(
    engine: WorkingMemoryEngine | Callable[[], WorkingMemoryEngine],
    session_id: str | None = None,
    *,
    default_session_id: str | None = None,
    max_expand_chars: int = MAX_EXPAND_CHARS,
) -> list[BaseTool]:
    """`archive_search` and `archive_expand` for one session (None: the run's session, see `session_from_run`).

    Errors such as an unknown archive id come back to the model as the tool's answer, not as exceptions.
    Both tools are async-capable (`ainvoke` runs the engine in a worker thread).
    """

    def _session() -> str:
        return session_from_run(session_id, default=default_session_id)

    def archive_search(query: str, archive_id: str | None = None, context: int = 0) -> tuple[str, list[dict[str, Any]]]:
        try:
            hits = resolve_engine(engine).archive_search(_session(), query, archive_id=archive_id, context=context)
        except WorkmemError as exc:
            raise ToolException(str(exc)) from exc
        return format_hits(query, hits), hits

    def archive_expand(archive_id: str | None = None, start_seq: int | None = None,
                       end_seq: int | None = None) -> str:
        try:
            found = resolve_engine(engine).archive_expand(_session(), archive_id, start_seq=start_seq,
                                                          end_seq=end_seq)
        except WorkmemError as exc:
            raise ToolException(str(exc)) from exc
        return format_expansion(found, max_expand_chars)

    async def aarchive_search(query: str, archive_id: str | None = None,
                              context: int = 0) -> tuple[str, list[dict[str, Any]]]:
        return await asyncio.to_thread(archive_search, query, archive_id, context)

    async def aarchive_expand(archive_id: str | None = None, start_seq: int | None = None,
                              end_seq: int | None = None) -> str:
        return await asyncio.to_thread(archive_expand, archive_id, start_seq, end_seq)

    search = StructuredTool.from_function(archive_search, coroutine=aarchive_search, name=SEARCH_TOOL_NAME,
                                          description=SEARCH_DESCRIPTION, args_schema=SearchArgs,
                                          response_format="content_and_artifact", handle_tool_error=True)
    expand = StructuredTool.from_function(archive_expand, coroutine=aarchive_expand, name=EXPAND_TOOL_NAME,
                                          description=EXPAND_DESCRIPTION, args_schema=ExpandArgs,
                                          handle_tool_error=True)
    return [search, expand]
