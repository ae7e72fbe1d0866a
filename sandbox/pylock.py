"""The Python lock file: hash-pinned wheels installed into the sandbox image at build time.

Belongs here: reading a lock (pip's requirements format, every entry `name==version` with at
least one `--hash=sha256:`, and a `# requested:` comment naming what the requirements asked
for, the rest being their dependencies), resolving requirements into such a lock for the
image's Python, and fetching the wheels a lock names, each checked against its hashes. Not
here: the image recipe and the build (`sandbox/image.py`).

Everything runs on the build host through pip's own client, outside the sandbox boundary; the
image build then installs from the fetched files with no network. Only wheels are accepted:
an sdist would run its build scripts at image build.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from airlock.errors import ImageUnavailable

from .streaming import run_streaming

Progress = Callable[[str], None]

# The interpreter of Debian bookworm's python3 package, the image's Python. Resolution and
# downloads target it exactly: some releases require e.g. Python >= 3.11.5 and would not
# install there.
IMAGE_PYTHON_VERSION = "3.11.2"
# glibc of bookworm is 2.36; pip accepts only the platform tags it is given, so every
# manylinux level up to that one is listed.
_PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)
_TARGET = (
    "--only-binary=:all:",
    f"--python-version={IMAGE_PYTHON_VERSION}",
    "--implementation=cp",
    "--abi=cp311",
    "--abi=abi3",
    "--abi=none",
    *(f"--platform={platform}" for platform in _PLATFORMS),
)
_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([A-Za-z0-9.+!_-]+)")
_HASH = re.compile(r"--hash[= ]sha256:([0-9a-f]{64})")
# The line `airlock image lock` writes naming what the requirements asked for; the rest of
# the lock is what those need. A comment, so pip and other tools read the lock as before.
_REQUESTED = re.compile(r"^# requested: (.*)$", re.MULTILINE)
_MISMATCH = re.compile(r"^\s+(\S+)==(\S+) from \S+.*:$", re.MULTILINE)
_TAIL_LINES = 15


@dataclass(frozen=True)
class LockEntry:
    """One pinned distribution and the sha256 hashes its file may have."""

    name: str
    version: str
    hashes: frozenset[str]

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class PythonLock:
    """A lock file's text and what it pins; the text is what goes into the image tag."""

    source: str
    text: str
    entries: tuple[LockEntry, ...]
    requested: tuple[LockEntry, ...] = ()
    """The entries the requirements asked for (the rest are their dependencies); empty when
    the lock does not say (written by hand, or by an older `airlock image lock`)."""


def default_lock() -> PythonLock:
    """The lock Airlock ships: data and coding work (numpy, pandas, matplotlib, ...)."""
    text = resources.files("airlock.sandbox").joinpath("python.lock").read_text(encoding="utf-8")
    return parse_lock(text, "sandbox/python.lock (packaged default)")


def read_lock(path: Path) -> PythonLock:
    """Read and check the lock at `path`; ImageUnavailable says what is wrong with it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ImageUnavailable(f"cannot read the Python lock file {path}: {exc}") from exc
    return parse_lock(text, str(path))


def parse_lock(text: str, source: str) -> PythonLock:
    """Check that every entry is pinned with `==` and carries a sha256 hash.

    Options other than `--hash` (an index URL, `-e`, `-r`, a bare URL) are refused: the
    lock names exactly which files go into the image, nothing else.
    """
    entries: list[LockEntry] = []
    seen: set[str] = set()
    for number, logical in _logical_lines(text):
        where = f"Python lock {source}, line {number}"
        head, _, options = logical.partition(" --")
        head = head.split(";", 1)[0].strip()
        options = "--" + options if options else ""
        pin = _PIN.fullmatch(head)
        if pin is None:
            raise ImageUnavailable(
                f"{where}: {logical.split()[0]!r} is not pinned as name==version; pin it "
                "(regenerate the lock with `airlock image lock`)"
            )
        entry = LockEntry(
            name=canonical_name(pin[1]),
            version=pin[3],
            hashes=frozenset(_HASH.findall(options)),
        )
        leftover = _HASH.sub("", options).strip()
        if leftover:
            raise ImageUnavailable(
                f"{where}: {entry.pin} has options besides --hash ({leftover!r}); a lock "
                "holds only name==version and its hashes"
            )
        if not entry.hashes:
            raise ImageUnavailable(
                f"{where}: {entry.pin} has no --hash=sha256:...; every entry needs the hash "
                "of its wheel (regenerate the lock with `airlock image lock`)"
            )
        if entry.name in seen:
            raise ImageUnavailable(f"{where}: {entry.name} is pinned twice; keep one entry")
        seen.add(entry.name)
        entries.append(entry)
    if not entries:
        raise ImageUnavailable(f"Python lock {source} pins nothing; it needs at least one entry")
    return PythonLock(
        source=source, text=text, entries=tuple(entries), requested=_requested(text, entries)
    )


def _requested(text: str, entries: list[LockEntry]) -> tuple[LockEntry, ...]:
    """The entries the `# requested:` line names, in the lock's order; a name it gives that
    the lock does not pin is left out (the line only describes, the entries decide)."""
    line = _REQUESTED.search(text)
    if line is None:
        return ()
    names = {canonical_name(name) for name in line[1].replace(",", " ").split()}
    return tuple(entry for entry in entries if entry.name in names)


def canonical_name(name: str) -> str:
    """PEP 503 normalization: "PyYAML" and "pyyaml", "typing_extensions" and "-" are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Non-empty lines without comments, continuation lines joined, with their first line."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not pending:
            start = number
        continued = line.endswith("\\")
        pending.append(line.removesuffix("\\").strip())
        if continued:
            continue
        joined = " ".join(part for part in pending if part)
        pending = []
        if joined:
            lines.append((start, joined))
    if pending and (joined := " ".join(part for part in pending if part)):
        lines.append((start, joined))
    return lines


def fetch_wheels(lock: PythonLock, cache: Path, progress: Progress) -> list[Path]:
    """The wheel of every lock entry, each checked against its hashes, as paths in `cache`.

    pip downloads into `cache` (kept between builds, so an unchanged lock downloads nothing)
    and checks the hashes itself; each file is then hashed again here before it is used.
    """
    cache.mkdir(parents=True, exist_ok=True)
    progress(f"fetching {len(lock.entries)} wheels pinned by {lock.source} (cached in {cache})")
    with tempfile.NamedTemporaryFile("w", suffix=".lock", encoding="utf-8") as requirements:
        requirements.write(lock.text)
        requirements.flush()
        _pip(
            [
                "download",
                "--require-hashes",
                "--no-deps",
                *_TARGET,
                f"--dest={cache}",
                f"--requirement={requirements.name}",
            ],
            lock,
            progress,
        )
    return [_cached_wheel(entry, cache) for entry in lock.entries]


def _cached_wheel(entry: LockEntry, cache: Path) -> Path:
    prefix = f"{entry.name.replace('-', '_')}-{entry.version}-"
    candidates = [
        path
        for path in cache.iterdir()
        if path.name.endswith(".whl")
        and canonical_name(path.name).startswith(canonical_name(prefix))
    ]
    for path in candidates:
        if _sha256(path) in entry.hashes:
            return path
    raise ImageUnavailable(
        f"no wheel of {entry.pin} in {cache} matches the hashes in the lock "
        f"({len(candidates)} candidate(s)); delete {cache} and build again"
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_lock(requirements: Path, progress: Progress) -> str:
    """A lock pinning `requirements` and all they depend on, for the image's Python.

    pip resolves against the image's Python version and platform (not the host's), wheels
    only, and reports the file it chose for each distribution with its sha256.
    """
    with tempfile.TemporaryDirectory(prefix="airlock-lock-") as scratch:
        report = Path(scratch) / "report.json"
        _pip(
            [
                "install",
                "--dry-run",
                "--ignore-installed",
                f"--target={scratch}/target",
                f"--report={report}",
                *_TARGET,
                f"--requirement={requirements}",
            ],
            None,
            progress,
        )
        chosen = json.loads(report.read_text(encoding="utf-8"))["install"]
    chosen.sort(key=lambda item: canonical_name(item["metadata"]["name"]))
    requested = [canonical_name(item["metadata"]["name"]) for item in chosen if item["requested"]]
    lines = [
        f"# Generated by `airlock image lock {requirements.name}` for CPython "
        f"{IMAGE_PYTHON_VERSION}",
        "# on manylinux x86_64, the sandbox image's Python. Every entry is pinned to one wheel",
        "# by its sha256; the image build refuses anything else.",
        # What the agent is told the image offers; the rest are dependencies of these.
        f"# requested: {' '.join(requested)}",
    ]
    for item in chosen:
        digest = item["download_info"]["archive_info"]["hashes"]["sha256"]
        lines.append(
            f"{canonical_name(item['metadata']['name'])}=={item['metadata']['version']} \\\n"
            f"    --hash=sha256:{digest}"
        )
    return "\n".join(lines) + "\n"


def _pip(args: list[str], lock: PythonLock | None, progress: Progress) -> None:
    argv = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    output: list[str] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def on_line(line: str) -> None:
        output.append(line)
        if line.startswith(("Collecting", "Saved", "File was already", "Downloading")):
            progress(f"pip: {line.strip()}")

    status, tail = run_streaming(argv, on_line, env=env, tail_lines=_TAIL_LINES)
    if status == 0:
        return
    text = "\n".join(output)
    last = "\n".join(f"  {line}" for line in tail)
    mismatched = _MISMATCH.findall(text) if "DO NOT MATCH THE HASHES" in text else []
    if mismatched:
        names = ", ".join(f"{name}=={version}" for name, version in mismatched)
        raise ImageUnavailable(
            f"hash mismatch in {lock.source if lock else 'the lock'}: the wheel of {names} "
            "does not match the hash the lock pins; the file changed or the lock is wrong. "
            f"Check the entry (regenerate it with `airlock image lock`). pip said:\n{last}"
        )
    raise ImageUnavailable(
        f"pip {args[0]} failed with exit status {status}; check that the package "
        f"index is reachable and every pin has a wheel for CPython {IMAGE_PYTHON_VERSION} "
        f"on manylinux x86_64. Last output:\n{last}"
    )
