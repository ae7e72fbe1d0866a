"""The browser box's gate: only connections for what the page asked reach the relay.

Chromium opens connections of its own in the page's browser context too (a preconnect to
its search engine as the context starts, for one), which the page never asked for and
which would otherwise reach the run's proxy and its records. The gate is the page's
context's proxy: it reads the first line of each connection (`CONNECT host:port` or an
absolute `http://` request) and passes it on to the relay only when the page asked for
that host and port: the driver admits every authority of a request it lets go
(Fetch.requestPaused, before the request leaves) and of every websocket the page opens,
over a pipe. Anything else is answered 403 in the box. Not a security boundary: the proxy
decides every request the gate passes, and a compromised renderer could dial the relay
itself; the gate keeps Chromium's own calls out of the run's egress.

Belongs here: the gate process and admitting an authority to it. Does not belong here:
which requests are the page's (`browser_page`), the relay (`runner`).

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from urllib.parse import urlsplit

from .privileges import become_sandbox_user
from .relay import keep_only, pump

MAX_HEAD_LINE = 8192
READ_TIMEOUT_S = 10.0
# A websocket's authority arrives as an event, which may trail the connection by a little.
ADMIT_GRACE_S = 0.5
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_REFUSED = b"not a request of the page: stopped in the box\n"
REFUSAL = (
    b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_REFUSED), _REFUSED)
)


def authority_of(url: str) -> tuple[str, int] | None:
    """(host, port) a request for `url` connects to, or None when it names none."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    return parts.hostname.lower(), port


def _requested(line: bytes) -> tuple[str, int] | None:
    """(host, port) of a proxy request line, or None when it is not one."""
    words = line.decode("latin-1").split(" ")
    if len(words) != 3:
        return None
    method, target = words[0], words[1]
    if method == "CONNECT":
        return authority_of(f"https://{target}")
    if target.lower().startswith("http://"):
        return authority_of(target)
    return None


class Gate:
    """The gate's process (`start`) and the driver's end of its pipe (`admit`)."""

    def __init__(self, relay_port: int) -> None:
        self.relay_port = relay_port
        self.port = 0
        self._admitted: set[tuple[str, int]] = set()
        self._pipe = -1

    def start(self) -> int:
        """Listen on a free loopback port, fork the gate; its pid (the port is `port`)."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        read_end, self._pipe = os.pipe()
        sys.stdout.flush()
        pid = os.fork()  # safe: the driver has no threads
        if pid == 0:
            try:
                keep_only(read_end, listener.fileno())
                become_sandbox_user()
                _Serving(self.relay_port).serve(listener, read_end)
            finally:
                os._exit(1)
        os.close(read_end)
        listener.close()
        return pid

    def admit(self, url: str) -> None:
        """Let connections for `url`'s host and port through from now on."""
        found = authority_of(url)
        if found is None or found in self._admitted:
            return
        self._admitted.add(found)
        with contextlib.suppress(OSError):
            os.write(self._pipe, f"{found[0]} {found[1]}\n".encode())


class _Serving:
    """The gate's side: what the page asked for, and a thread per connection."""

    def __init__(self, relay_port: int) -> None:
        self.relay_port = relay_port
        self.admitted: set[tuple[str, int]] = set()
        self.changed = threading.Condition()

    def serve(self, listener: socket.socket, pipe: int) -> None:
        threading.Thread(target=self._read_admissions, args=(pipe,), daemon=True).start()
        while True:
            client, _ = listener.accept()
            threading.Thread(target=self._pass, args=(client,), daemon=True).start()

    def _read_admissions(self, pipe: int) -> None:
        rest = b""
        while chunk := os.read(pipe, 4096):
            *lines, rest = (rest + chunk).split(b"\n")
            with self.changed:
                for line in lines:
                    host, _, port = line.decode().rpartition(" ")
                    self.admitted.add((host, int(port)))
                self.changed.notify_all()

    def _pass(self, client: socket.socket) -> None:
        with client:
            client.settimeout(READ_TIMEOUT_S)
            head = b""
            with contextlib.suppress(OSError):
                while b"\r\n" not in head and len(head) < MAX_HEAD_LINE:
                    chunk = client.recv(MAX_HEAD_LINE)
                    if not chunk:
                        return
                    head += chunk
            wanted = _requested(head.split(b"\r\n", 1)[0])
            with self.changed:
                admitted = wanted is not None and self.changed.wait_for(
                    lambda: wanted in self.admitted, timeout=ADMIT_GRACE_S
                )
            if not admitted:
                with contextlib.suppress(OSError):
                    client.sendall(REFUSAL)
                return
            client.settimeout(None)
            self._bridge(client, head)

    def _bridge(self, client: socket.socket, head: bytes) -> None:
        try:
            relay = socket.create_connection(("127.0.0.1", self.relay_port))
        except OSError:
            return
        with relay:
            relay.sendall(head)
            back = threading.Thread(target=pump, args=(relay, client), daemon=True)
            back.start()
            pump(client, relay)
            back.join()
