"""The box's one way out: a relay from 127.0.0.1:`port` inside the box to the run's proxy,
a unix socket in the egress mount, and the run's CA bundle the code trusts.

Started by the entrypoint (runner or browser driver) with the container, before any job is
known; `ready_egress` checks it is still serving when a job with egress comes. A socket
the relay cannot reach is answered with a 502 that says why, never a bare close.

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
import threading
import time

from .codeproc import reap_within
from .privileges import become_sandbox_user

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

READ_CHUNK = 65536
# How long the relay keeps trying the proxy's socket when a connection to it fails in
# a way that can pass (gone for a moment, backlog full): a refusal the code can read
# beats a closed connection it cannot explain.
PROXY_CONNECT_PATIENCE_S = 3.0
PROXY_TRANSIENT = frozenset({errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN, errno.EINTR})
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def start_relay(socket_path: str, port: int) -> int:
    """Listen on 127.0.0.1:`port` and fork the relay that serves it; the relay's pid.

    Started with the container, before any job is known, so a warm call waits for
    nothing: the socket listens before the fork returns. Nothing answers on the proxy
    socket until the host has taken the container and bound the run's proxy there.
    A fork, not a new interpreter: under gVisor starting Python and importing this
    module again costs tens of milliseconds of CPU, paid by every container a pool
    starts while a call runs. The relay keeps only its listening socket (never the
    report channel) and drops to the sandbox user: it holds nothing the code does not
    already have, and having changed credentials without exec it is not dumpable, so
    the code cannot trace it either.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    sys.stdout.flush()
    pid = os.fork()  # safe: the runner has no threads
    if pid == 0:
        try:
            keep_only(listener.fileno())
            become_sandbox_user()
            serve_relay(listener, socket_path)
        finally:
            os._exit(1)
    listener.close()
    return pid


def keep_only(*keep: int) -> None:
    """Close every descriptor but those in `keep`; 0, 1 and 2 become /dev/null."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def ready_egress(egress: dict[str, Any], relay: int | None) -> None:
    """Write the run's CA bundle; refuse the job if the relay is not serving.

    The bundle holds the system roots too, for hosts a policy passes through untouched.
    It is root's, so the code can read it but not change it.
    """
    if relay is None:
        raise RuntimeError("the job has egress but its container was started without it")
    status = reap_within(relay, 0)
    if status is not None:
        raise RuntimeError(f"the egress relay ended before the job (exit status {status})")
    bundle = egress["ca_pem"]
    with contextlib.suppress(OSError), open(SYSTEM_CA_BUNDLE, encoding="utf-8") as f:
        bundle = f.read() + "\n" + bundle
    with open(egress["ca_bundle"], "w", encoding="utf-8") as f:
        f.write(bundle)


def serve_relay(listener: socket.socket, socket_path: str) -> None:
    """Bridge each TCP connection on `listener` to the proxy's unix socket."""
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_bridge, args=(client, socket_path), daemon=True).start()


def _bridge(client: socket.socket, socket_path: str) -> None:
    try:
        upstream = _connect_proxy(socket_path)
    except OSError as exc:
        _refuse(client, f"the egress relay cannot reach Airlock's proxy ({_reason(exc)})")
        return
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _connect_proxy(socket_path: str) -> socket.socket:
    deadline = time.monotonic() + PROXY_CONNECT_PATIENCE_S
    pause = 0.01
    while True:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(socket_path)
        except OSError as exc:
            upstream.close()
            if exc.errno not in PROXY_TRANSIENT or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
        else:
            return upstream


def _reason(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


def _refuse(client: socket.socket, reason: str) -> None:
    """Answer 502 with the reason, the way the proxy answers its own refusals."""
    body = (reason + "\n").encode()
    head = (
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(OSError):
        client.sendall(head + body)
        client.shutdown(socket.SHUT_WR)
        # Read what the client sent before closing: closing over unread data resets the
        # connection, and a reset can discard the answer before the client reads it.
        client.settimeout(PROXY_CONNECT_PATIENCE_S)
        while client.recv(READ_CHUNK):
            pass
    client.close()


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(READ_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
