"""`langgraph dev --config studio.json` serves the commit graph offline: a real server, a real run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from paths import REPO

from workmem.state.memory import SECTIONS

LANGGRAPH = shutil.which("langgraph", path=str(Path(sys.executable).parent)) or shutil.which("langgraph")
FALLBACK_NODES = {"recover", "create_retry", "extractive_fallback", "guard", "merge", "persist"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.allow_hosts(["127.0.0.1"]),
    pytest.mark.skipif(LANGGRAPH is None, reason="langgraph-cli is not installed (pip install -e '.[studio]')"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


@pytest.fixture
def server(tmp_path):
    """A `langgraph dev` process on a free loopback port, stopped by its pid afterwards."""
    port = _free_port()
    env = {**os.environ, "WORKMEM_HOME": str(tmp_path / "wm"), "LANGGRAPH_CLI_NO_ANALYTICS": "1",
           "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false"}
    env.pop("WORKMEM_MODEL", None)
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [LANGGRAPH, "dev", "--config", "studio.json", "--no-browser", "--no-reload", "--port", str(port)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            if process.poll() is not None:
                break
            try:
                if _get(f"{base}/ok").get("ok"):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.25)
        assert process.poll() is None, (tmp_path / "server.log").read_text(errors="replace")[-3000:]
        yield base, tmp_path / "wm"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_commit_graph_runs_in_langgraph_dev(server):
    base, root = server
    conversation = json.loads((REPO / "graphs/demo/data/demo_conversation.json").read_text())["messages"][:40]
    assistant = _post(f"{base}/assistants/search", {"graph_id": "commit"})[0]

    out = _post(f"{base}/runs/wait", {"assistant_id": assistant["assistant_id"], "input": {
        "session_id": "studio-sample", "keep_recent_count": 10, "messages": conversation}})

    assert out["status"] == "completed", out
    headers = [line[3:] for line in out["working_memory"].splitlines() if line.startswith("## ")]
    assert headers == list(SECTIONS)
    assert out["route"][0] == "take_lease" and out["route"][-1] == "release_lease" and "persist" in out["route"]
    assert (root / "sessions/studio-sample/history/archive_001/.done").exists()
    assert (root / "studio.sqlite").exists()

    graph = _get(f"{base}/assistants/{assistant['assistant_id']}/graph")
    nodes = {node["id"] for node in graph["nodes"]}
    assert FALLBACK_NODES <= nodes
    labels = {edge.get("data") for edge in graph["edges"]}
    assert {"malformed", "no_usable_call", "fallback", "recovered"} <= labels


def test_agent_graph_is_served(server):
    base, _ = server
    assistants = _post(f"{base}/assistants/search", {"graph_id": "agent"})
    assert assistants and assistants[0]["graph_id"] == "agent"


def test_two_runs_on_one_thread_through_the_sdk_report_only_themselves(server):
    """A reused Studio thread: the second run's output holds its own route and no stale archive id."""
    from langgraph_sdk import get_sync_client

    base, root = server
    client = get_sync_client(url=base)
    thread = client.threads.create()
    messages = [{"type": "human", "content": "The staging port is 5433."}, {"role": "assistant", "content": "Noted."}]

    first = client.runs.wait(thread["thread_id"], "commit", input={"session_id": "sdk", "messages": messages})
    second = client.runs.wait(thread["thread_id"], "commit", input={"session_id": "sdk", "keep": "messages:0"})

    assert first["status"] == "completed" and first["archive_id"] == "archive_001"
    assert second["status"] == "skipped" and second["reason"] == "no_messages"
    assert second["route"] == ["take_lease", "slice_turns", "report", "release_lease"]
    assert not second.get("archive_id") and not second.get("working_memory")
    schema = client.assistants.get_schemas(client.assistants.search(graph_id="commit")[0]["assistant_id"])
    properties = schema["input_schema"]["properties"]
    assert schema["input_schema"]["required"] == ["session_id"]
    assert all(properties[name].get("description") for name in ("session_id", "keep", "messages"))
    assert (root / "sessions/sdk/history/archive_001/.done").exists()
