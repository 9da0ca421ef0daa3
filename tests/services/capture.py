"""A local HTTP endpoint that records the REST requests a Google Cloud client sends.

Cloud services that cannot run here (Dataflow, Vertex AI, Cloud Scheduler) are reached with their
real client libraries, pointed at this server with `client_options={"api_endpoint": url}`,
`transport="rest"` and anonymous credentials. The server records every request (method, path,
query, headers, JSON body) and answers it with `respond(request)`, by default the request's own
body plus a `name` (what a create call returns), so the client is satisfied and the test can
assert on exactly what would have been sent.

    with CaptureServer() as server:
        client = JobServiceClient(transport="rest", client_options={"api_endpoint": server.url},
                                  credentials=AnonymousCredentials())
        ...
        (request,) = server.requests
"""

from __future__ import annotations

import dataclasses
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit


@dataclasses.dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any  # the parsed JSON body, or the raw text when it is not JSON, or None


def default_response(request: Request) -> dict[str, Any]:
    """The request's JSON body, with a `name` under the request's path (as a create returns)."""
    body = dict(request.body) if isinstance(request.body, dict) else {}
    body.setdefault("name", request.path.strip("/").split("/", 1)[-1] + "/captured-1")
    return body


class CaptureServer:
    """A threaded HTTP server on 127.0.0.1 (a free port) that records requests."""

    def __init__(self, respond: Callable[[Request], Any] = default_response):
        self.requests: list[Request] = []
        self._respond = respond
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8") if length else ""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                url = urlsplit(self.path)
                request = Request(
                    self.command, url.path, parse_qs(url.query), dict(self.headers), body
                )
                server.requests.append(request)
                try:
                    answer = json.dumps(server._respond(request)).encode("utf-8")
                    status = 200
                except Exception as e:  # the test's responder failed: tell the client
                    answer = json.dumps({"error": {"code": 500, "message": str(e)}}).encode()
                    status = 500
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args):  # keep test output clean
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def localhost_url(self) -> str:
        """The URL with the host name `localhost` (some clients pick REST only for it)."""
        return f"http://localhost:{self._httpd.server_address[1]}"

    def __enter__(self) -> "CaptureServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
