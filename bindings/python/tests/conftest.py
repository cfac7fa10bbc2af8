"""Contexts and servers the tests share."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

HERE = Path(__file__).resolve().parent

FIXTURES = HERE.parent.parent / "fixtures"
"""bindings/fixtures: the table and DSL rules every binding shares."""

OPA_FIXTURES = Path(
    os.environ.get("PORTCULLIS_OPA_FIXTURES", HERE.parents[3] / "shared" / "fixtures")
).resolve()
"""The real OPA-built bundles: $PORTCULLIS_OPA_FIXTURES, else ../shared/fixtures beside the
repository."""


def bundle(name: str) -> Path:
    """A bundle of the shared OPA fixtures' rego-wasm folder."""
    return OPA_FIXTURES / "rego-wasm" / name


def metadata(**extra: Any) -> Dict[str, Any]:
    return {"agent_id": "agent-1", "session_id": "s-1", "timestamp": "2026-01-01T00:00:00Z", **extra}


def input_ctx(*texts: str) -> Dict[str, Any]:
    return {"messages": [{"role": "user", "content": text} for text in texts], "metadata": metadata()}


def tool_call_ctx(tool_name: str, arguments: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return {
        "tool_name": tool_name,
        "arguments": arguments or {},
        "calling_message": {"role": "assistant", "content": f"calling {tool_name}"},
        "metadata": metadata(),
    }


def tool_result_ctx(tool_name: str, content: str) -> Dict[str, Any]:
    return {
        "tool_name": tool_name,
        "arguments": {},
        "content": content,
        "is_error": False,
        "metadata": metadata(),
    }


def output_ctx(content: str) -> Dict[str, Any]:
    return {"response": {"role": "assistant", "content": content}, "metadata": metadata()}


Handler = Callable[[str, Dict[str, Any]], Tuple[int, Any]]


class JsonServer:
    """A real HTTP server on a free port of 127.0.0.1, on a thread of this process:
    ``handle(path, body)`` returns ``(status, json)`` for each POST."""

    def __init__(self, handle: Handler) -> None:
        self.requests: List[Tuple[str, Any]] = []
        self.raw: List[Tuple[Dict[str, str], bytes]] = []
        """Each request's headers (names in lower case) and raw body."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the standard library's name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"null")
                except (ValueError, UnicodeDecodeError):
                    body = raw.decode("utf-8", "replace")
                server.requests.append((self.path, body))
                server.raw.append(({k.lower(): v for k, v in self.headers.items()}, raw))
                status, answer = handle(self.path, body)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def json_server() -> Iterator[Callable[[Handler], JsonServer]]:
    """Starts servers for a test and stops them after it."""
    started: List[JsonServer] = []

    def start(handle: Handler) -> JsonServer:
        server = JsonServer(handle)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A real ``redis-server`` on a free port of 127.0.0.1, without persistence, stopped after
    the test: its ``redis://`` URL. Skips when it cannot be started, unless
    ``PORTCULLIS_REQUIRE_REDIS`` is set (the test command sets it), which fails instead."""
    server = shutil.which("redis-server")
    if server is None:
        if os.environ.get("PORTCULLIS_REQUIRE_REDIS", "0") != "0":
            pytest.fail("redis-server is not installed (scripts/test installs it)")
        pytest.skip("redis-server is not installed")
    port = _free_port()
    process = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
                    connection.sendall(b"PING\r\n")
                    if connection.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("redis-server did not answer within 10 s")
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.kill()
        process.wait()
