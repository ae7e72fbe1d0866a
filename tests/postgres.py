"""A real PostgreSQL cluster for tests: Debian's postgresql 15, run as its own OS user, in a
temporary directory, on a free 127.0.0.1 port (imported as `postgres`; the fixtures are in
conftest.py).

Standard library only, so `.ci/run` starts the cluster with the same code before the
virtualenv exists: `python3 tests/postgres.py start DIR` prints the cluster's URL and
`python3 tests/postgres.py stop DIR` stops it. The tests use the cluster named by
`AIRLOCK_TEST_POSTGRES_URL` when it is set and start their own otherwise; each test gets a
fresh database of its own (`fresh_database`), so no test sees another's rows.

PostgreSQL refuses to run as root, so as root every server command runs through
`runuser -u postgres`; the superuser is `airlock` with a random password (scram-sha-256 on
TCP), so the URL carries a real credential as a user's would.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BIN = Path("/usr/lib/postgresql/15/bin")
URL_VARIABLE = "AIRLOCK_TEST_POSTGRES_URL"
_USER = "airlock"
_OS_USER = "postgres"


class PostgresMissing(RuntimeError):
    """The PostgreSQL server binaries are not installed."""


@dataclass(frozen=True)
class Cluster:
    """A running cluster: its URL (database `postgres`) and, if we started it, its directory."""

    url: str
    directory: Path | None = None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _as_server_user(args: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", _OS_USER, "--", *args]
    return args


def _run(args: list[str]) -> None:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stdout}{done.stderr}")


def start(directory: Path) -> Cluster:
    """Initialise and start a cluster under `directory` (which must not hold one yet)."""
    if not (BIN / "initdb").exists():
        raise PostgresMissing(
            f"PostgreSQL is not installed ({BIN / 'initdb'} is missing); "
            "install it with: apt-get install -y postgresql"
        )
    directory.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(18)
    (directory / "pwfile").write_text(password + "\n")
    if os.geteuid() == 0:
        shutil.chown(directory, _OS_USER, _OS_USER)
        shutil.chown(directory / "pwfile", _OS_USER, _OS_USER)
    data = directory / "data"
    _run(
        _as_server_user(
            [
                str(BIN / "initdb"),
                "-D",
                str(data),
                "-U",
                _USER,
                "--pwfile",
                str(directory / "pwfile"),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--no-instructions",
            ]
        )
    )
    (directory / "pwfile").unlink()
    port = _free_port()
    options = f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c max_connections=200"
    _run(
        _as_server_user(
            [
                str(BIN / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(directory / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
    )
    url = f"postgresql://{_USER}:{password}@127.0.0.1:{port}/postgres"
    (directory / "url").write_text(url + "\n")
    return Cluster(url=url, directory=directory)


def stop(directory: Path) -> None:
    """Stop the cluster started under `directory` (fast shutdown; nothing to keep)."""
    _run(
        _as_server_user(
            [str(BIN / "pg_ctl"), "-D", str(directory / "data"), "-m", "fast", "-w", "stop"]
        )
    )


def psql(url: str, sql: str) -> str:
    """Run `sql` against `url` with the cluster's own client; return its unaligned output."""
    done = subprocess.run(
        [str(BIN / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"psql failed: {done.stderr.strip()}")
    return done.stdout


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


def fresh_database(cluster: Cluster) -> str:
    """Create an empty database of a new name on `cluster`; return its URL."""
    name = "t_" + secrets.token_hex(8)
    psql(cluster.url, f"CREATE DATABASE {name}")
    return with_database(cluster.url, name)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        sys.stderr.write("usage: python3 tests/postgres.py start|stop DIR\n")
        return 2
    directory = Path(argv[1])
    if argv[0] == "start":
        sys.stdout.write(start(directory).url + "\n")
    else:
        stop(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
