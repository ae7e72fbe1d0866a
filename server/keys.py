"""`airlock keys create`: a new API key and its auth-file entry.

The tenant and id are checked by the auth file's own rules before a key exists, the
entry is written with a TOML library (never by pasting strings into TOML), and
`--auth FILE` appends it to the file: under a lock, checked together with what is
already there, written to a 0600 temporary file and moved into place in one step, so
a reader never sees half a file and a bad result never replaces a good one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import tomli_w
from pydantic import ValidationError

from airlock.config_files import describe_problem
from airlock.errors import AuthConfigInvalid, InvalidRequest
from airlock.ids import new_id

from .auth import ApiKeyEntry, generate_api_key, load_auth_config


@dataclass(frozen=True)
class NewKey:
    """A key to hand out once, and the auth-file entry that stores only its hash."""

    key: str
    entry: ApiKeyEntry

    @property
    def toml(self) -> str:
        fields = {"id": self.entry.id, "tenant": self.entry.tenant, "hash": self.entry.hash}
        return "[[keys]]\n" + tomli_w.dumps(fields)


def new_key(tenant: str, key_id: str | None = None) -> NewKey:
    """A fresh key for `tenant`; raises `InvalidRequest` naming the rule a name breaks."""
    key, digest = generate_api_key()
    chosen = key_id if key_id is not None else new_id(f"{tenant}-", random_bytes=5)
    try:
        entry = ApiKeyEntry.model_validate({"id": chosen, "tenant": tenant, "hash": digest})
    except ValidationError as exc:
        # A derived id is only wrong because the tenant is; say that once.
        errors = [e for e in exc.errors() if key_id is not None or e["loc"] != ("id",)]
        problems = "; ".join(describe_problem(error) for error in errors)
        raise InvalidRequest(f"no key created: {problems}") from exc
    return NewKey(key=key, entry=entry)


def append_key(path: Path, new: NewKey) -> None:
    """Add `new`'s entry to the auth file at `path` (created if missing), keeping its text.

    Raises `AuthConfigInvalid` if the file, with the entry added, would not load (for
    example an id that is already taken), leaving the file as it was.
    """
    with _locked(path):
        try:
            old = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            old = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthConfigInvalid(str(path), [f"cannot read the file: {exc}"]) from exc
        if old and not old.endswith("\n"):
            old += "\n"
        _replace(path, old + ("\n" if old else "") + new.toml)


def _replace(path: Path, text: str) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".new")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            load_auth_config(Path(temporary))
        except AuthConfigInvalid as exc:
            # Name the real file, not the temporary one.
            raise AuthConfigInvalid(str(path), exc.problems) from exc
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on a sibling lock file, so two appends never lose one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent / f".{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise AuthConfigInvalid(str(path), [f"cannot write next to the file: {exc}"]) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
