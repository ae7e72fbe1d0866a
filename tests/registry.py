"""A real container registry for tests: Debian's docker-registry 2.8 (the distribution
project's), on a free 127.0.0.1 port, storing into a temporary directory, with a config file
written here (imported as `registry`; the fixtures are in conftest.py).

Standard library only, so `.ci/run` starts the registry with the same code before the
virtualenv exists: `python3 tests/registry.py start DIR` prints the registry's address
(`127.0.0.1:PORT`) and `python3 tests/registry.py stop DIR` stops it. The tests use the
registry named by `AIRLOCK_TEST_REGISTRY` when it is set and start their own otherwise. The
Debian package's own service (port 5000, /var/lib/docker-registry) is never used.

Docker talks plain HTTP to registries on 127.0.0.0/8 (its default insecure range), so no
certificate is involved. Readiness is the registry's own "listening on" line, which it logs
after binding the port: its output goes through a small relay (this file, `relay LOG`) that
appends it to DIR/registry.log and says "ready" on a pipe the starter reads with a deadline,
so nothing polls and the registry never writes to a pipe whose reader is gone.
"""

from __future__ import annotations

import os
import secrets
import selectors
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BINARY = Path("/usr/bin/docker-registry")
ADDRESS_VARIABLE = "AIRLOCK_TEST_REGISTRY"
_READY = b"ready\n"
_LISTENING = "listening on "
_START_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 30.0
# The processes this interpreter started, by directory, so that `stop` reaps them.
_started: dict[Path, tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]] = {}


class RegistryMissing(RuntimeError):
    """The registry binary is not installed."""


@dataclass(frozen=True)
class Registry:
    """A running registry: its address and, if we started it, its directory."""

    address: str
    directory: Path | None = None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _config(directory: Path, port: int) -> str:
    # Deletion on, so a test may remove what it pushed; no access log (one line per request).
    return (
        "version: 0.1\n"
        "log:\n  level: info\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {directory / 'storage'}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: {secrets.token_hex(16)}\n"
    )


def start(directory: Path) -> Registry:
    """Write a config under `directory` and start a registry on it; return when it listens."""
    if not BINARY.exists():
        raise RegistryMissing(
            f"the container registry is not installed ({BINARY} is missing); "
            "install it with: apt-get install -y docker-registry"
        )
    directory.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    config = directory / "config.yml"
    config.write_text(_config(directory, port))
    relay = subprocess.Popen(
        [sys.executable, __file__, "relay", str(directory / "registry.log")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert relay.stdin is not None and relay.stdout is not None
    server = subprocess.Popen(
        [str(BINARY), "serve", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=relay.stdin,
        stderr=relay.stdin,
        start_new_session=True,
    )
    relay.stdin.close()
    (directory / "pid").write_text(f"{server.pid}\n")
    with selectors.DefaultSelector() as selector:
        selector.register(relay.stdout, selectors.EVENT_READ)
        ready = selector.select(_START_TIMEOUT_S) and relay.stdout.readline() == _READY
    relay.stdout.close()
    if not ready:
        server.kill()
        server.wait()
        log = (directory / "registry.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"docker-registry did not start within {_START_TIMEOUT_S} s:\n{log}")
    _started[directory] = (server, relay)
    address = f"127.0.0.1:{port}"
    (directory / "address").write_text(address + "\n")
    return Registry(address=address, directory=directory)


def stop(directory: Path) -> None:
    """Stop the registry started under `directory` and wait until it has exited."""
    children = _started.pop(directory, None)
    if children is not None:
        for process in children:
            process.terminate()
            process.wait(_STOP_TIMEOUT_S)
        return
    # Started by another process (`.ci/run`): wait on a pidfd, which signals the exit.
    pid = int((directory / "pid").read_text())
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        os.kill(pid, signal.SIGTERM)
        with selectors.DefaultSelector() as selector:
            selector.register(pidfd, selectors.EVENT_READ)
            if not selector.select(_STOP_TIMEOUT_S):
                raise RuntimeError(f"docker-registry (pid {pid}) did not stop on SIGTERM")
    finally:
        os.close(pidfd)


def _relay(log_path: Path) -> int:
    """Copy the registry's output to the log; say "ready" once on stdout, then close it."""
    ready_sent = False
    with log_path.open("ab") as log:
        for line in sys.stdin.buffer:
            log.write(line)
            log.flush()
            if not ready_sent and _LISTENING in line.decode(errors="replace"):
                sys.stdout.buffer.write(_READY)
                sys.stdout.close()
                ready_sent = True
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop", "relay"):
        sys.stderr.write("usage: python3 tests/registry.py start|stop DIR\n")
        return 2
    if argv[0] == "relay":
        return _relay(Path(argv[1]))
    directory = Path(argv[1])
    if argv[0] == "start":
        sys.stdout.write(start(directory).address + "\n")
    else:
        stop(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
