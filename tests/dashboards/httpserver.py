"""A local HTTP server that records each request and answers through a checker, so tests see exactly
what a client sent (method, path, headers, JSON) and the client sees what the real API would answer."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


# (request) → (status, JSON body); a checker raising AssertionError answers 400 with the reason
Checker = Callable[[Request], tuple[int, Any]]


class Recorder:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.requests: list[Request] = []
        self.problems: list[str] = []
        self.lock = threading.Lock()

    def handle(self, request: Request) -> tuple[int, Any]:
        with self.lock:
            self.requests.append(request)
        try:
            return self.checker(request)
        except AssertionError as exc:
            with self.lock:
                self.problems.append(f"{request.method} {request.path}: {exc}")
            return 400, {"message": f"bad request: {exc}"}


@contextmanager
def serving(checker: Checker) -> Iterator[tuple[str, Recorder]]:
    """Yields (base URL, recorder) of a server on 127.0.0.1; stopped on exit."""
    recorder = Recorder(checker)

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            status, payload = recorder.handle(request)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
