"""Helper processes of the egress section of `bench.run`: an HTTPS upstream and a client.

Both run as separate processes so that neither shares the interpreter (and its GIL) with
the proxy under test, which runs in the benchmark's own event loop, as it runs in the
server's: on a real deployment the client is the sandbox and the upstream is elsewhere.

    python bench/egress_worker.py upstream CERT KEY
        Serves HTTPS on 127.0.0.1 (a free port, printed as the first stdout line) until
        stdin closes: /small is 100 bytes, /big/N is N bytes streamed in 256 KiB writes.

    python bench/egress_worker.py flood JSON
        Opens connection after connection to a run's proxy with a denied CONNECT, until
        killed, printing a running count every 100 connections.

    python bench/egress_worker.py client JSON
        Runs GETs alternately direct and through the proxy and prints per-request times.
        With "keepalive" false, each request opens a new connection (TCP or unix socket
        and CONNECT, then TLS) on both paths: a first request. With "keepalive" true,
        each path opens one connection first and sends every request on it. The order
        is ABBA (direct first), or BAAB with "proxy_first" true.

Only the standard library is used, so the client's own overhead is the same on both paths:
blocking sockets, `ssl`, and a minimal HTTP/1.1 reader. Every TCP socket sets TCP_NODELAY
(the upstream's too, as production servers do; see bench/run.py).
"""

from __future__ import annotations

import base64
import http.server
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

SMALL_BODY = b"s" * 100
CHUNK = b"b" * (256 * 1024)
RECV_BYTES = 1024 * 1024


# ---- upstream ---------------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        small = self.path == "/small"
        if not small and not self.path.startswith("/big/"):
            self.send_error(404)
            return
        size = len(SMALL_BODY) if small else int(self.path.split("/")[2])
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if small:
            self.wfile.write(SMALL_BODY)
            return
        left = size
        view = memoryview(CHUNK)
        while left > 0:
            n = min(left, len(CHUNK))
            self.wfile.write(view[:n])
            left -= n

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(60)
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        with tls:
            _Handler(tls, client_address, self)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hang up as soon as they have the body


def upstream(cert: str, key: str) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = _Server(context)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdout.write(f"{server.server_address[1]}\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the benchmark closes our stdin
    server.shutdown()


# ---- client -----------------------------------------------------------------------------


def _read_response(sock: ssl.SSLSocket, buffer: bytearray) -> int:
    """Read one response with a Content-Length body; return the body size."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response head: {head!r}")
        head += chunk
    head, _, rest = head.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    if status != 200:
        raise ConnectionError(f"status {status}: {lines[0]} {rest[:300]!r}")
    length = next(
        int(line.split(":", 1)[1])
        for line in lines[1:]
        if line.lower().startswith("content-length")
    )
    got = len(rest)
    view = memoryview(buffer)
    while got < length:
        n = sock.recv_into(view, min(len(buffer), length - got))
        if n == 0:
            raise ConnectionError(f"body cut at {got} of {length} bytes")
        got += n
    return got


def _get(open_tls: Callable[[], ssl.SSLSocket], path: str, host: str, buffer: bytearray) -> float:
    started = time.perf_counter()
    sock = open_tls()
    try:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        sock.sendall(request.encode())
        _read_response(sock, buffer)
    finally:
        sock.close()
    return time.perf_counter() - started


def _get_on(sock: ssl.SSLSocket, path: str, host: str, buffer: bytearray) -> float:
    started = time.perf_counter()
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    _read_response(sock, buffer)
    return time.perf_counter() - started


def client(config: dict[str, Any]) -> None:
    port = config["port"]
    authority = f"localhost:{port}"
    direct_context = ssl.create_default_context(cafile=config["upstream_ca_file"])
    proxy_context = ssl.create_default_context(cadata=config["run_ca_pem"])
    auth = base64.b64encode(f"airlock:{config['token']}".encode()).decode()
    connect = (
        f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
        f"Proxy-Authorization: Basic {auth}\r\n\r\n"
    ).encode()

    def direct() -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return direct_context.wrap_socket(raw, server_hostname="localhost")

    def proxied() -> ssl.SSLSocket:
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.connect(config["socket"])
        raw.sendall(connect)
        head = b""
        while True:
            # Peek, then take exactly the head: the TLS bytes after it are not ours to read.
            peeked = raw.recv(4096, socket.MSG_PEEK)
            if not peeked:
                raise ConnectionError(f"proxy closed during CONNECT: {head!r}")
            end = peeked.find(b"\r\n\r\n")
            if end >= 0:
                head = raw.recv(end + 4)
                break
            time.sleep(0.0001)
        if not head.startswith(b"HTTP/1.1 200"):
            raise ConnectionError(f"CONNECT refused: {head!r}")
        return proxy_context.wrap_socket(raw, server_hostname="localhost")

    buffer = bytearray(RECV_BYTES)
    paths = {"direct": direct, "proxy": proxied}
    kept = {name: paths[name]() for name in paths} if config.get("keepalive") else {}
    times: dict[str, list[float]] = {"direct": [], "proxy": []}
    warmup, count, path = config["warmup"], config["count"], config["path"]
    flip = 1 if config.get("proxy_first") else 0
    for i in range(warmup + count):
        # ABBA order, so a drift in machine load falls on both paths alike; a caller
        # making one request each way per run flips the start from run to run.
        order = ("direct", "proxy") if (i + flip) % 2 == 0 else ("proxy", "direct")
        for name in order:
            if kept:
                elapsed = _get_on(kept[name], path, authority, buffer)
            else:
                elapsed = _get(paths[name], path, authority, buffer)
            if i >= warmup:
                times[name].append(elapsed)
    for sock in kept.values():
        sock.close()
    sys.stdout.write(json.dumps(times) + "\n")


def flood(config: dict[str, Any]) -> None:
    """A run gone wild: connection after connection with a CONNECT the proxy denies."""
    auth = base64.b64encode(f"airlock:{config['token']}".encode()).decode()
    request = (
        "CONNECT denied.example.org:443 HTTP/1.1\r\nHost: denied.example.org:443\r\n"
        f"Proxy-Authorization: Basic {auth}\r\n\r\n"
    ).encode()
    sent = 0
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(10)
                sock.connect(config["socket"])
                sock.sendall(request)
                sock.recv(4096)
        except OSError:
            continue
        sent += 1
        if sent % 100 == 0:
            sys.stdout.write(f"{sent}\n")
            sys.stdout.flush()


def main() -> None:
    if sys.argv[1] == "upstream":
        upstream(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "client":
        client(json.loads(sys.argv[2]))
    elif sys.argv[1] == "flood":
        flood(json.loads(sys.argv[2]))
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
