"""A fault-injecting HTTP proxy in front of the GCS emulator: a storage service that fails some
requests, the way GCS does under load (503 Service Unavailable, 429 Too Many Requests, or a
connection dropped before any answer).

Every request is forwarded unchanged (method, path, query, headers, body) to the emulator, and
its answer returned, except those a `Rule` selects: they are answered with the rule's fault
*without being forwarded*, so the emulator's state is what GCS's would be after a request it
refused before processing it. Selection is by count, not by chance: a rule faults every
`every`-th request it matches (counted from 1, in arrival order), and never the same request
(method, path and query, which include an upload's session id) more than `max_in_a_row` times
in a row, so that retries get through. With `every=1, max_in_a_row=None` a rule fails every
request it matches: a service that stays down.

The emulator builds resumable-upload session URLs and objects' download links (`mediaLink`)
from the `Host` header of the request, which the proxy forwards as it is: upload data goes
through the proxy too, and so do the downloads of objects written through it (and only those).

`flaky_gcs(emulator, rules)` runs the proxy on 127.0.0.1 in a thread of the test process; its
`env` points a subprocess (the CLI) at it. The test process itself keeps talking to the
emulator directly, so tests can check the stored objects without faults.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import re
import sys
import threading
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

from tests.services.gcs import PROJECT, GcsEmulator

DROP = 0  # a Rule's status that drops the connection without an answer

# What the client libraries send (google-cloud-storage, Beam's gcsio), by path:
UPLOADS = r"^/upload/storage/v1/"  # resumable-upload start (POST) and data (PUT)
BATCH = r"^/batch/storage/v1"  # batched deletes (and copies)
COPY = r"/copyTo/|/rewriteTo/"  # server-side object copies
DOWNLOADS = r"[?&]alt=media(&|$)"  # object data reads

# Headers that belong to one connection, not to the request: never forwarded.
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
}


@dataclasses.dataclass(frozen=True)
class Rule:
    """Which requests to fail, and how.

    `method` ("*" for any) and `path` (a regex searched in "PATH?QUERY") select the requests;
    every `every`-th of them is answered with `status` (503, 429, ... or DROP), unless that same
    request already failed `max_in_a_row` times in a row (None: no such limit).
    """

    name: str
    path: str
    method: str = "*"
    every: int = 1
    status: int = 503
    max_in_a_row: int | None = 2

    def matches(self, method: str, target: str) -> bool:
        return self.method in ("*", method) and re.search(self.path, target) is not None


class _Faults:
    """The rules and what they did: requests seen and faults injected, per rule."""

    def __init__(self, rules: tuple[Rule, ...]):
        self.rules = rules
        self.seen: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()
        self.forwarded = 0
        self.log: list[tuple[str, str, str]] = []  # (method, PATH?QUERY, rule name or "")
        self.paused = False
        self._in_a_row: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def decide(self, method: str, target: str) -> Rule | None:
        """The rule whose fault answers this request, or None to forward it."""
        with self._lock:
            rules = () if self.paused else self.rules
            rule = next((r for r in rules if r.matches(method, target)), None)
            key = (method, target)
            if rule is None:
                self.forwarded += 1
                self.log.append((method, target, ""))
                return None
            self.seen[rule.name] += 1
            capped = rule.max_in_a_row is not None and self._in_a_row[key] >= rule.max_in_a_row
            if self.seen[rule.name] % rule.every == 0 and not capped:
                self.injected[rule.name] += 1
                self._in_a_row[key] += 1
                self.log.append((method, target, rule.name))
                return rule
            self._in_a_row.pop(key, None)
            self.forwarded += 1
            self.log.append((method, target, ""))
            return None


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the clients' connection pools expect
    server: "_ProxyServer"

    def _handle(self) -> None:
        body = self._read_body()
        rule = self.server.faults.decide(self.command, self.path)
        if rule is None:
            self._forward(body)
        elif rule.status == DROP:
            self.close_connection = True  # no answer at all: the client sees a reset connection
        else:
            self._refuse(rule)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self, body: bytes) -> None:
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            if body or self.command in ("POST", "PUT", "PATCH"):
                headers["Content-Length"] = str(len(body))
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            self.send_response_only(answer.status, answer.reason)
            for name, value in answer.getheaders():
                if name.lower() not in _HOP_BY_HOP:
                    self.send_header(name, value)
        finally:
            upstream.close()
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _refuse(self, rule: Rule) -> None:
        reason = http.client.responses.get(rule.status, "Error")
        data = json.dumps(
            {
                "error": {
                    "code": rule.status,
                    "message": f"{reason} (injected: {rule.name})",
                    "errors": [{"reason": "backendError", "message": reason}],
                }
            }
        ).encode()
        self.send_response_only(rule.status, reason)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002  (quiet: the test reads the counts)
        pass


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: tuple[str, int], faults: _Faults):
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = upstream
        self.faults = faults

    def handle_error(self, request, client_address):
        """Clients closing their kept-alive connections are no error; anything else is."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclasses.dataclass
class FlakyGcs:
    """A running proxy: its endpoint, the environment of a client using it, and its counts."""

    endpoint: str
    env: dict[str, str]
    faults: _Faults

    @property
    def seen(self) -> Counter[str]:
        """Requests each rule matched."""
        return self.faults.seen

    @property
    def injected(self) -> Counter[str]:
        """Faults each rule injected."""
        return self.faults.injected

    @property
    def forwarded(self) -> int:
        """Requests passed on to the emulator."""
        return self.faults.forwarded

    def client(self):
        """A google-cloud-storage client talking to the emulator through the proxy."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=PROJECT,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.endpoint},
        )

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No rule applies meanwhile (e.g. while a test uploads its inputs through the proxy, or
        downloads what a run wrote through it): requests are passed on, not counted as `seen`."""
        self.faults.paused = True
        try:
            yield
        finally:
            self.faults.paused = False


@contextlib.contextmanager
def flaky_gcs(emulator: GcsEmulator, rules: list[Rule] | tuple[Rule, ...]) -> Iterator[FlakyGcs]:
    """Runs a proxy in front of `emulator` that fails requests by `rules` (first match wins)."""
    target = urllib.parse.urlsplit(emulator.endpoint)
    server = _ProxyServer((target.hostname, target.port), _Faults(tuple(rules)))
    thread = threading.Thread(target=server.serve_forever, name="flaky-gcs", daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        endpoint = f"http://{host}:{port}"
        yield FlakyGcs(endpoint, dict(emulator.env, STORAGE_EMULATOR_HOST=endpoint), server.faults)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
