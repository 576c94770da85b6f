"""workmem: working memory for long LLM agent sessions.

The public API, loaded lazily (PEP 562) so that `import workmem` — and `import workmem.state.memory` —
does not pay for LangChain until a name that needs it is used.
"""

from __future__ import annotations

import logging
from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# A library logs, the application decides where to: silent until logging is configured.
logging.getLogger("workmem").addHandler(logging.NullHandler())

_EXPORTS: dict[str, str] = {
    "WorkingMemoryEngine": "workmem.graphs.engine",
    "WorkingMemoryMiddleware": "workmem.graphs.agent.middleware",
    "make_archive_tools": "workmem.graphs.agent.tools",
    "commit_node": "workmem.graphs.agent.commit_node",
    "build_commit_graph": "workmem.graphs.commit",
    "compile_commit_graph": "workmem.graphs.commit",
    "demo_conversation": "workmem.graphs.demo.run",
    "WorkmemError": "workmem.state.errors",
    "InvalidInput": "workmem.state.errors",
    "SessionNotFound": "workmem.state.errors",
    "ArchiveNotFound": "workmem.state.errors",
    "CommitInProgress": "workmem.state.errors",
    "CommitFailed": "workmem.state.errors",
    "DataRootNotFound": "workmem.state.errors",
    "ArchiveConflict": "workmem.state.errors",
    "CorruptLine": "workmem.state.errors",
    "ContextOverflow": "workmem.state.errors",
    "DatabaseUnavailable": "workmem.state.errors",
    "StorageError": "workmem.state.errors",
    "DamagedFile": "workmem.state.errors",
    "UnsupportedFormat": "workmem.state.errors",
}

__all__ = [
    "ArchiveConflict",
    "ArchiveNotFound",
    "CommitFailed",
    "CommitInProgress",
    "ContextOverflow",
    "CorruptLine",
    "DamagedFile",
    "DatabaseUnavailable",
    "DataRootNotFound",
    "InvalidInput",
    "SessionNotFound",
    "StorageError",
    "UnsupportedFormat",
    "WorkingMemoryEngine",
    "WorkingMemoryMiddleware",
    "WorkmemError",
    "__version__",
    "build_commit_graph",
    "commit_node",
    "compile_commit_graph",
    "demo_conversation",
    "make_archive_tools",
]

if TYPE_CHECKING:
    from workmem.graphs.agent.commit_node import commit_node
    from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
    from workmem.graphs.agent.tools import make_archive_tools
    from workmem.graphs.commit import build_commit_graph, compile_commit_graph
    from workmem.graphs.demo.run import demo_conversation
    from workmem.graphs.engine import WorkingMemoryEngine
    from workmem.state.errors import (
        ArchiveConflict,
        ArchiveNotFound,
        CommitFailed,
        CommitInProgress,
        ContextOverflow,
        CorruptLine,
        DamagedFile,
        DatabaseUnavailable,
        DataRootNotFound,
        InvalidInput,
        SessionNotFound,
        StorageError,
        UnsupportedFormat,
        WorkmemError,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'workmem' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
