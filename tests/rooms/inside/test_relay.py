"""The in-sandbox relay (sandbox/inside/relay.py `serve_relay`), run on the host in a process
of its own.

The relay bridges the code's TCP connections to the proxy's unix socket. When that socket
cannot be reached, the code must read a 502 that says why, never a connection closed
without a response; a socket that turns up within the relay's patience is used.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# The entrypoint listens, then forks the relay with that socket; here a process does the
# same minus the fork and the drop to the sandbox user (which need root).
SERVE = """
import socket, sys
from airlock.sandbox.inside import relay
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
relay.serve_relay(listener, sys.argv[1])
"""


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    path = tmp_path / "proxy.sock"
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        yield path, int(process.stdout.readline())
    finally:
        process.kill()
        process.wait()
        process.stdout.close()


def _ask(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        return answer


def test_an_unreachable_proxy_is_a_502_naming_the_reason(relay: tuple[Path, int]) -> None:
    _, port = relay
    answer = _ask(port, b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 502 ")
    assert body == b"the egress relay cannot reach Airlock's proxy (ENOENT)\n"


def test_a_proxy_socket_that_appears_late_is_still_reached(relay: tuple[Path, int]) -> None:
    path, port = relay
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    appeared = threading.Event()

    def serve() -> None:
        # Bound only after the client has connected to the relay, and a moment later,
        # so the relay's first attempt finds no socket.
        appeared.wait(30)
        time.sleep(0.3)
        listener.bind(str(path))
        listener.listen(1)
        conn, _ = listener.accept()
        with conn:
            request = conn.recv(65536)
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n" + request[:7])

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        appeared.set()
        s.sendall(b"CONNECT x:443 HTTP/1.1\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    server.join(30)
    listener.close()
    assert answer == b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\nCONNECT"
