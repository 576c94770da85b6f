"""A scripted OpenAI-compatible server on loopback, for the real-model path offline (tests start it)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Reply = tuple[int, dict[str, Any]]


class Stub:
    """A scripted OpenAI-compatible server: each POST takes the next (status, body) and is recorded."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.handler: Callable[[dict[str, Any]], Reply] | None = None  # when set: answers every request
        self.requests: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                stub.requests.append(
                    {
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": json.loads(self.rfile.read(length) or b"{}"),
                    }
                )
                if stub.handler is not None:
                    status, body = stub.handler(stub.requests[-1]["body"])
                else:
                    status, body = stub.replies.pop(0) if stub.replies else (500, {"error": {"message": "empty"}})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def tool_call_reply(self, arguments: str, name: str = "update_working_memory") -> None:
        self.replies.append(tool_call(arguments, name))


def tool_call(arguments: str, name: str) -> Reply:
    """A 200 chat completion whose one tool call is `name(arguments)`."""
    call = {"id": "call_stub", "type": "function", "function": {"name": name, "arguments": arguments}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return 200, {"id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "stub-model",
                 "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


@pytest.fixture
def stub() -> Iterator[Stub]:
    """A started stub server, shut down after the test."""
    server = Stub()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
