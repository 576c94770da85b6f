"""Where an evaluation stores its sessions: scratch space, removed afterwards.

Files: the given root, else a temporary directory. PostgreSQL (`database_url`): a schema of its own,
`workmem_eval_<random>`, dropped at the end, so an evaluation never meets or leaves sessions in the
database's real schema.
"""

from __future__ import annotations

import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from workmem.state.storage import drop_database_schema, open_storage

SCHEMA_PREFIX = "workmem_eval_"


def scratch_storage(stack: ExitStack, root: str | Path | None, database_url: str | None, prefix: str) -> dict[str, Any]:
    """The engine keywords of an evaluation's storage (`root=`, or `database_url=` + `database_schema=`); what
    is temporary is removed when `stack` closes (register it before the engine, so it closes after)."""
    if database_url is None:
        path = Path(root) if root is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        return {"root": path}
    open_storage(database_url=database_url).close()  # the database's own schema holds pg_trgm, never the scratch one
    schema = f"{SCHEMA_PREFIX}{uuid.uuid4().hex[:12]}"
    stack.callback(drop_database_schema, database_url, schema)
    return {"database_url": database_url, "database_schema": schema}
