"""A throwaway PostgreSQL server for the tests and benchmarks, and a fresh database per test.

`WORKMEM_TEST_DATABASE_URL` names a server to use (CI starts one and exports it); otherwise a
server is started here with the machine's `initdb` / `pg_ctl` on a Unix socket in a temp dir
(as the `postgres` user when running as root: initdb refuses root) and stopped at exit.
`WORKMEM_TEST_POSTGRES=required` turns "no server" into a failure instead of a skip.

    python tests/pg_support.py      start a server, print its URL, stop it on Enter
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

ENV_URL = "WORKMEM_TEST_DATABASE_URL"
ENV_MODE = "WORKMEM_TEST_POSTGRES"
DURABLE_SETTINGS = "-c listen_addresses='' -c max_connections=300 -c shared_buffers=128MB"
SERVER_SETTINGS = f"{DURABLE_SETTINGS} -c fsync=off -c full_page_writes=off"  # tests: a crash loses nothing we keep


def required() -> bool:
    """Whether a missing server must fail the tests (CI) rather than skip them."""
    return os.environ.get(ENV_MODE, "").lower() == "required"


def find_bin(name: str) -> str | None:
    """`initdb` / `pg_ctl` on PATH, else in Debian's versioned folder."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def url_for(socket_dir: str, port: int, dbname: str = "postgres", user: str = "postgres") -> str:
    """A libpq URL over the Unix socket in `socket_dir`."""
    return f"postgresql://{user}@/{dbname}?host={quote(socket_dir, safe='')}&port={port}"


def with_database(url: str, dbname: str) -> str:
    """The same server URL, another database."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{dbname}"))


@dataclass
class Server:
    """A running server (started here or given): its URL; `stop()` ends it if this process started it."""

    url: str
    data_dir: str | None = None
    pg_ctl: str | None = None
    as_postgres: bool = False
    created: list[str] = field(default_factory=list)

    def create_database(self) -> str:
        """A fresh, empty database (from template0) → its URL."""
        import psycopg

        name = f"wmtest_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING \'UTF8\'')
        self.created.append(name)
        return with_database(self.url, name)

    def drop_database(self, url: str) -> None:
        """Drop a database made by `create_database` (its connections are ended first)."""
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        name = conninfo_to_dict(url)["dbname"]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.created:
            self.created.remove(name)

    def restart(self) -> None:
        """Crash the server (`-m immediate`: no checkpoint, every connection cut) and start it again, as a
        failover or a power cut of the database host does; only for a server this process started."""
        if self.data_dir is None or self.pg_ctl is None:
            raise RuntimeError("only a server started by start_server() can be restarted")
        log = os.path.join(os.path.dirname(self.data_dir), "log")  # else the server writes to our pipe, held open
        _run([self.pg_ctl, "-D", self.data_dir, "-l", log, "-m", "immediate", "-w", "-t", "60", "restart"],
             as_postgres=self.as_postgres)

    def stop(self) -> None:
        """Stop a server this process started and remove its files."""
        if self.data_dir is None or self.pg_ctl is None:
            return
        _run([self.pg_ctl, "-D", self.data_dir, "-m", "immediate", "-w", "stop"], as_postgres=self.as_postgres,
             check=False)
        shutil.rmtree(Path(self.data_dir).parent, ignore_errors=True)
        self.data_dir = None


def _run(cmd: list[str], *, as_postgres: bool, check: bool = True) -> subprocess.CompletedProcess:
    if as_postgres:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)


def start_server(*, durable: bool = False) -> Server:
    """Start a server in a temp dir (`durable`: with fsync, for benchmarks); RuntimeError saying why it could not."""
    initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
    if not initdb or not pg_ctl:
        raise RuntimeError("initdb/pg_ctl not found (apt-get install postgresql)")
    as_postgres = os.geteuid() == 0
    if as_postgres and not shutil.which("runuser"):
        raise RuntimeError("running as root without runuser: initdb refuses root")
    base = tempfile.mkdtemp(prefix="wm-pg-")
    os.chmod(base, 0o755)
    data, sockets = os.path.join(base, "data"), os.path.join(base, "sock")
    os.mkdir(sockets)
    if as_postgres:
        shutil.chown(base, "postgres")
        shutil.chown(sockets, "postgres")
    port = 20000 + os.getpid() % 20000
    try:
        _run([initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8"],
             as_postgres=as_postgres)
        _run([pg_ctl, "-D", data, "-l", os.path.join(base, "log"), "-w", "-t", "60",
              "-o", f"-k {sockets} -p {port} {DURABLE_SETTINGS if durable else SERVER_SETTINGS}", "start"],
             as_postgres=as_postgres)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"could not start PostgreSQL: {exc} {detail}".strip()) from exc
    return Server(url_for(sockets, port), data_dir=data, pg_ctl=pg_ctl, as_postgres=as_postgres)


def server_or_reason() -> tuple[Server | None, str]:
    """The server to test against (given by URL or started here), or None and why not."""
    given = os.environ.get(ENV_URL)
    if given:
        return Server(given), ""
    try:
        return start_server(), ""
    except RuntimeError as exc:
        return None, str(exc)


if __name__ == "__main__":
    server = start_server()
    print(server.url, flush=True)
    try:
        input()
    finally:
        server.stop()


@dataclass
class Backend:
    """One storage backend under test: `file` (a data root) or `postgres` (a fresh database).

    Tests talk to it only through engines and storages it opens, so one test body runs on both."""

    name: str
    root: Path
    url: str | None = None

    @property
    def target(self) -> str:
        """What a child process is given to open the same storage: the root, or the database URL."""
        return self.url or str(self.root)

    def engine(self, *args: Any, **kwargs: Any) -> Any:
        """`WorkingMemoryEngine(*args, **kwargs)` on this backend."""
        from workmem.graphs.engine import WorkingMemoryEngine

        if self.url is None:
            return WorkingMemoryEngine(self.root, *args, **kwargs)
        return WorkingMemoryEngine(None, *args, database_url=self.url, **kwargs)

    def storage(self, **kwargs: Any) -> Any:
        """A storage of its own on this backend (another process would open the same)."""
        return open_target(self.target, **kwargs)

    def set_lease_holder(self, session_id: str, **fields: Any) -> None:
        """Rewrite fields of a session's lease row behind the engine's back (a holder of another process)."""
        sets = ", ".join(f"{k} = %s" if self.url else f"{k} = ?" for k in fields)
        if self.url is None:
            import sqlite3

            conn = sqlite3.connect(self.root / "index.sqlite")
            with conn:
                conn.execute(f"UPDATE leases SET {sets} WHERE session_id = ?", [*fields.values(), session_id])
            conn.close()
            return
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"UPDATE workmem.leases SET {sets} WHERE session_id = %s", [*fields.values(), session_id])

    def patch_task_clock(self, monkeypatch: Any, clock: Callable[[], float]) -> None:
        """Make every task store this backend opens from now on read `clock` instead of the real time."""
        if self.url is None:
            import workmem.state.files.storage
            from workmem.state.files.tasks import TaskStore

            monkeypatch.setattr(workmem.state.files.storage, "TaskStore", functools.partial(TaskStore, clock=clock))
        else:
            import workmem.state.postgres.storage
            from workmem.state.postgres.tasks import PgTaskStore

            monkeypatch.setattr(workmem.state.postgres.storage, "PgTaskStore",
                                functools.partial(PgTaskStore, clock=clock))


def open_target(target: str, **kwargs: Any) -> Any:
    """`open_storage` of a root path or a `postgresql://` URL (what child processes are given)."""
    from workmem.state.storage import open_storage

    if target.startswith(("postgresql://", "postgres://")):
        return open_storage(database_url=target, **kwargs)
    return open_storage(target, **kwargs)
