"""A real HTTP(S) upstream for the egress tests: a threaded stdlib server on 127.0.0.1
that records each request (imported as `upstream`; its fixtures are in conftest.py).

The certificate comes from a `trustme` CA, so the proxy verifies it as it would any
server's.
"""

from __future__ import annotations

import gzip
import http.server
import json
import socket
import ssl
import threading
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import trustme


@dataclass(frozen=True)
class Seen:
    """One request as the upstream received it."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 20
    server: _Server

    def _answer(self) -> None:
        body = self._read_body()
        owner = self.server.owner
        owner.record(Seen(self.command, self.path, tuple(self.headers.items()), body))
        if self.path.startswith("/api/hold"):
            # Released by the test (or by close()): a request that is in flight on purpose.
            owner.release.wait(30)
        echoed = None
        page = owner.pages.get(self.path.split("?")[0])
        if page is not None:
            # A page for the browser tests: (content type, body, extra headers).
            kind, payload, extra = page
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in extra:
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        more: list[tuple[str, str]] = []
        if self.path.startswith("/api/gzecho"):
            # The same, compressed whatever the request asked for and readable from any
            # page (CORS *): what a scrubber that reads only identity bodies would miss.
            payload = gzip.compress(json.dumps({"headers": dict(self.headers.items())}).encode())
            more = [("Content-Encoding", "gzip"), ("Access-Control-Allow-Origin", "*")]
        elif self.path.startswith("/api/echo"):
            # An upstream that hands the request's credentials back, as echo services do.
            echoed = self.headers.get("Authorization", "")
            payload = json.dumps({"headers": dict(self.headers.items())}).encode()
        elif self.path.startswith("/api/big/"):
            payload = b"x" * int(self.path.split("/")[3].split("?")[0])
        else:
            # Never header values: only facts the sandbox chose itself.
            payload = json.dumps(
                {"ok": True, "method": self.command, "path": self.path, "got": len(body)}
            ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if echoed is not None:
            self.send_header("X-Echo-Authorization", echoed)
        for name, value in more:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    # Handler threads are joined on close, after their sockets were shut down.
    daemon_threads = False
    block_on_close = True

    def __init__(self, owner: Upstream) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(20)
        context = self.owner.tls_context
        if context is None:
            self.owner.track(request)
            _Handler(request, client_address, self)
            return
        try:
            tls = context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        with tls:
            self.owner.track(tls)
            self.owner.handshakes.append(tls.session_reused)
            _Handler(tls, client_address, self)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up mid-request are part of these tests


class Upstream:
    """A threaded stdlib HTTP(S) server on 127.0.0.1 that records each request.

    It answers JSON describing the method and path only (never a header value), except
    `/api/echo`, which hands the request's headers back in its body and its Authorization
    in a header, and `/api/gzecho`, which hands them back gzip-compressed whatever the
    request accepts, with CORS `*`; it serves `/api/big/<n>` as n bytes, and holds `/api/hold` until
    `release` is set.
    """

    def __init__(self, cert: trustme.LeafCert | None) -> None:
        self.tls_context: ssl.SSLContext | None = None
        if cert is not None:
            self.tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            cert.configure_cert(self.tls_context)
        self.seen: list[Seen] = []
        self.pages: dict[str, tuple[str, bytes, tuple[tuple[str, str], ...]]] = {}
        """Paths served as given (content type, body, extra headers) instead of JSON."""
        self.handshakes: list[bool | None] = []
        """One entry per TLS connection accepted: whether it resumed an earlier session."""
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._server = _Server(self)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def paths(self) -> list[str]:
        with self._lock:
            return [s.path for s in self.seen]

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        with self._lock:
            for sock in self._sockets:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        self._thread.join(10)


def start_upstream(ca: trustme.CA | None) -> Upstream:
    """An upstream serving TLS with a leaf of `ca` for localhost and 127.0.0.1, or plain
    HTTP without one."""
    return Upstream(ca.issue_cert("localhost", "127.0.0.1") if ca is not None else None)
