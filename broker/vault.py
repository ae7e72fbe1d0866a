"""The secret vault: named secret values encrypted at rest, each bound to the hosts it may reach.

Holds the vault's format, the key file and AES-GCM; knows nothing of capabilities, runs or
requests (injection checks the host binding `get` returns). Synchronous: callers on the
event loop go through `anyio.to_thread`. OSError and decryption failures leave this module
as `VaultError`; a bad name or host list is `InvalidRequest`. No value ever appears in an
exception, a repr or a log record.

Format of the document, a file on a single server (`data_dir/vault/secrets.json`, 0600, in a
0700 directory, replaced atomically) or a row of a fleet's database (`store.documents`):

    {"version": 1,
     "secrets": {NAME: {"nonce": B64, "ciphertext": B64, "hosts": [HOST, ...],
                        "created_at": UNIX_SECONDS}}}

Each entry has its own random 96-bit nonce; the associated data binds the ciphertext to
the entry's name and sorted hosts, so renaming an entry or widening its hosts in the file
makes it fail to decrypt instead of sending the value somewhere new.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from airlock.errors import InvalidRequest, StoreError, VaultError
from airlock.store import create_private_file, private_file_problem
from airlock.store.documents import Document, FileDocument

from .secret import Secret

FORMAT_VERSION = 1
KEY_BYTES = 32
NONCE_BYTES = 12
KEY_FILE_ENV = "AIRLOCK_VAULT_KEY_FILE"
"""Environment variable naming a key file; without it the key is `data_dir/vault/key`."""

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# One DNS label: letters, digits, inner hyphens. Hosts are stored lowercase, ASCII only.
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_AAD_TAG = "airlock-vault-v1"
_KEY_CHECK = b"airlock vault key check"
"""What `key_check` seals (with the empty name and no hosts, a name no secret may have)."""


def vault_dir(data_dir: Path) -> Path:
    """The directory holding the vault file and the default key file."""
    return data_dir / "vault"


def vault_path(data_dir: Path) -> Path:
    """Where the vault file of a data directory lives."""
    return vault_dir(data_dir) / "secrets.json"


@dataclass(frozen=True)
class SecretInfo:
    """What may be shown about a secret: its name, its hosts and when it was set; no value."""

    name: str
    hosts: tuple[str, ...]
    created_at: float


def load_key(data_dir: Path, env: Mapping[str, str]) -> bytes:
    """The 32-byte vault key.

    With `AIRLOCK_VAULT_KEY_FILE` in `env`, that file must exist; otherwise the key is
    `data_dir/vault/key`, generated from `os.urandom` on first use. Either file holds the
    key in base64 and must not be readable by group or others (VaultError saying
    "chmod 600 FILE" otherwise).
    """
    named = env.get(KEY_FILE_ENV)
    if named:
        path = Path(named)
        if not path.exists():
            raise VaultError(
                f"{KEY_FILE_ENV}={path} does not exist; create it with a base64-encoded "
                f"32-byte key (e.g. `head -c 32 /dev/urandom | base64 > {path}`, then "
                f"`chmod 600 {path}`), or unset {KEY_FILE_ENV} to use {vault_dir(data_dir)}/key"
            )
        return _read_key(path)
    path = vault_dir(data_dir) / "key"
    try:
        if not path.exists():
            _create_key(path)
    except OSError as exc:
        raise VaultError(f"cannot create the vault key {path}: {exc}") from exc
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    try:
        problem = private_file_problem(path, path.stat().st_mode)
        if problem is not None:
            raise VaultError(f"vault key {problem}")
        text = path.read_bytes()
    except OSError as exc:
        raise VaultError(f"cannot read the vault key {path}: {exc}") from exc
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        # Deliberately says nothing about what the file holds.
        raise VaultError(f"vault key {path} does not hold a base64-encoded {KEY_BYTES}-byte key")
    return key


def _create_key(path: Path) -> None:
    # If another process made the key meanwhile, its key is the key.
    create_private_file(path, base64.b64encode(os.urandom(KEY_BYTES)) + b"\n")


def _normalize_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"secret name {name!r} is not allowed: use 1 to 64 of the characters A-Z a-z 0-9 _ . -"
        )
    return name


def _normalize_host(host: str) -> str:
    """Lowercase, no trailing dot; an exact name or `*.` before at least two labels."""
    if not isinstance(host, str):
        raise InvalidRequest(f"host {host!r} is not a string")
    name = host.strip().lower()
    if name.endswith(".") and not name.endswith(".."):
        name = name[:-1]
    if not name.isascii():
        raise InvalidRequest(f"host {host!r} is not ASCII: write it in punycode (xn--...)")
    if any(c in name for c in ":/@?#[] "):
        raise InvalidRequest(
            f"host {host!r} must be a bare host name, without scheme, port, path or user"
        )
    labels = name.split(".")
    if labels[0] == "*":
        if len(labels) < 3:
            raise InvalidRequest(
                f"host {host!r} is too broad: a wildcard needs at least two labels after "
                "`*.` (e.g. `*.example.com`)"
            )
        labels = labels[1:]
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise InvalidRequest(
            f"host {host!r} is not a valid host name: write `api.example.com` or `*.example.com`"
        )
    return name


def _normalize_hosts(hosts: Sequence[str]) -> tuple[str, ...]:
    if isinstance(hosts, str):
        raise InvalidRequest("hosts must be a list of host names, not one string")
    normalized = tuple(sorted({_normalize_host(h) for h in hosts}))
    if not normalized:
        raise InvalidRequest(
            "a secret needs at least one host it may be sent to (e.g. `api.github.com`)"
        )
    return normalized


def _aad(name: str, hosts: tuple[str, ...]) -> bytes:
    # JSON of a list is unambiguous: no choice of name and hosts collides with another.
    return json.dumps([_AAD_TAG, name, sorted(hosts)], separators=(",", ":")).encode()


class Vault:
    """The vault in the file at `where` (or the fleet's document), opened with `key`; `set`,
    `get`, `list`, `remove`.

    The document is read on every call (it is small), so a change made by `airlock secrets
    set` in another process (or on another replica) is seen at once. Writes hold it for one
    writer at a time (a lock file beside the file, or a row lock) and replace it whole.
    Every entry must
    decrypt with this key before `list`, `set` or `remove` go ahead, so a vault is never
    half one key and half another.
    """

    def __init__(self, where: Path | Document, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != KEY_BYTES:
            raise VaultError(f"a vault key is {KEY_BYTES} bytes")
        self._document = FileDocument(where) if isinstance(where, Path) else where
        self._aead = AESGCM(key)

    @property
    def path(self) -> Path:
        """The vault file of a single server (a fleet's vault is no file: VaultError)."""
        if not isinstance(self._document, FileDocument):
            raise VaultError(f"the vault is kept in {self._document.where}, not in a file")
        return self._document.path

    def __repr__(self) -> str:
        return f"Vault({self._document.where!r})"

    def set(self, name: str, value: str, hosts: Sequence[str]) -> None:
        """Store `value` under `name`, to be sent only to `hosts`; replaces an existing entry."""
        name = _normalize_name(name)
        bound = _normalize_hosts(hosts)
        if not isinstance(value, str) or not value:
            raise InvalidRequest(f"the value of secret {name!r} must be a non-empty string")
        try:
            plaintext = value.encode("utf-8")
        except UnicodeEncodeError:
            # `from None`: the codec error carries the whole value.
            raise InvalidRequest(f"the value of secret {name!r} is not valid text") from None
        nonce = os.urandom(NONCE_BYTES)
        ciphertext = self._aead.encrypt(nonce, plaintext, _aad(name, bound))
        entry = {
            "nonce": base64.b64encode(nonce).decode("ascii"),
            "ciphertext": base64.b64encode(ciphertext).decode("ascii"),
            "hosts": list(bound),
            "created_at": time.time(),
        }
        with self._writing() as entries:
            entries[name] = entry

    def get(self, name: str) -> tuple[Secret, tuple[str, ...]] | None:
        """The value of `name` and the hosts it may be sent to; None if there is no such secret."""
        name = _normalize_name(name)
        entry = self._read().get(name)
        if entry is None:
            return None
        hosts = tuple(entry["hosts"])
        return Secret(self._decrypt(name, entry).decode("utf-8")), hosts

    def list(self) -> list[SecretInfo]:
        """Every secret's name, hosts and creation time, by name; never a value."""
        entries = self._read()
        for name, entry in entries.items():
            self._decrypt(name, entry)  # authenticates the hosts shown; the value is dropped
        return [
            SecretInfo(name=name, hosts=tuple(e["hosts"]), created_at=e["created_at"])
            for name, e in sorted(entries.items())
        ]

    def remove(self, name: str) -> bool:
        """Delete `name`; False if there was no such secret."""
        name = _normalize_name(name)
        with self._writing() as entries:
            return entries.pop(name, None) is not None

    def check_key(self) -> None:
        """Refuse a key that is not the one this vault was written with, before any secret
        is needed, and mark the vault with this key when it carries no mark yet (a fleet's
        first replica): every replica after it must bring the same key. VaultError names
        the fix."""
        where = self._document.where
        try:
            with self._document.updating() as update:
                secrets, mark = self._parse(update.current) if update.current else ({}, None)
                if mark is not None:
                    self._check_mark(mark)
                    return
                for name, entry in secrets.items():
                    self._decrypt(name, entry)
                update.replace(_serialize(secrets, self._mark()))
        except (OSError, StoreError) as exc:
            raise VaultError(f"cannot check the vault {where}: {exc}") from exc

    def _mark(self) -> dict[str, str]:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, _KEY_CHECK, _aad("", ()))
        return {
            "nonce": base64.b64encode(nonce).decode("ascii"),
            "ciphertext": base64.b64encode(sealed).decode("ascii"),
        }

    def _check_mark(self, mark: dict[str, Any]) -> None:
        try:
            nonce = base64.b64decode(mark["nonce"], validate=True)
            ciphertext = base64.b64decode(mark["ciphertext"], validate=True)
            if self._aead.decrypt(nonce, ciphertext, _aad("", ())) == _KEY_CHECK:
                return
        except (InvalidTag, binascii.Error, ValueError, KeyError, TypeError):
            pass
        raise VaultError(
            f"this server's vault key is not the key the vault {self._document.where} was "
            f"written with: give every server of the fleet the same key file "
            f"({KEY_FILE_ENV}=FILE, copied from the first server's {KEY_FILE_ENV} or its "
            "data_dir/vault/key)"
        )

    def _decrypt(self, name: str, entry: dict[str, Any]) -> bytes:
        try:
            nonce = base64.b64decode(entry["nonce"], validate=True)
            ciphertext = base64.b64decode(entry["ciphertext"], validate=True)
            return self._aead.decrypt(nonce, ciphertext, _aad(name, tuple(entry["hosts"])))
        except (InvalidTag, binascii.Error, ValueError) as exc:
            raise VaultError(
                f"the vault {self._document.where} cannot be decrypted with this key (entry "
                f"{name!r} fails authentication): the key is not the one the vault was written "
                f"with, or the vault was altered; check {KEY_FILE_ENV} or restore the vault"
            ) from exc

    def _read(self) -> dict[str, dict[str, Any]]:
        """The entries of the file (empty if there is none), each shape-checked."""
        try:
            raw = self._document.read()
        except (OSError, StoreError) as exc:
            raise VaultError(f"cannot read the vault {self._document.where}: {exc}") from exc
        return {} if raw is None else self._parse(raw)[0]

    def _parse(self, raw: bytes) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
        """The entries of a document, each shape-checked, and its key mark if it has one."""
        problem = f"the vault {self._document.where} is not an Airlock vault file"
        try:
            document = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise VaultError(f"{problem} (not JSON)") from exc
        if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
            raise VaultError(f"{problem} of version {FORMAT_VERSION}")
        secrets = document.get("secrets")
        if not isinstance(secrets, dict):
            raise VaultError(f"{problem} (no `secrets` object)")
        for name, entry in secrets.items():
            if not (
                isinstance(name, str)
                and _NAME.fullmatch(name)
                and isinstance(entry, dict)
                and isinstance(entry.get("nonce"), str)
                and isinstance(entry.get("ciphertext"), str)
                and isinstance(entry.get("hosts"), list)
                and all(isinstance(h, str) for h in entry["hosts"])
                and isinstance(entry.get("created_at"), int | float)
            ):
                raise VaultError(f"{problem} (entry {name!r} is malformed)")
        mark = document.get("key_check")
        if mark is not None and not isinstance(mark, dict):
            raise VaultError(f"{problem} (`key_check` is not an object)")
        return secrets, mark

    @contextlib.contextmanager
    def _writing(self) -> Iterator[dict[str, dict[str, Any]]]:
        """Yield the entries to change with the document held for this writer alone, then
        write them back.

        Every existing entry must decrypt with this key first. Nothing is written if the
        body raises or changes nothing.
        """
        where = self._document.where
        try:
            with self._document.updating() as update:
                entries, mark = self._parse(update.current) if update.current else ({}, None)
                if mark is not None:
                    self._check_mark(mark)
                for name, entry in entries.items():
                    self._decrypt(name, entry)
                before = dict(entries)
                yield entries
                if entries != before:
                    update.replace(_serialize(entries, mark))
        except (OSError, StoreError) as exc:
            raise VaultError(f"cannot write the vault {where}: {exc}") from exc


def _serialize(entries: dict[str, dict[str, Any]], mark: dict[str, Any] | None) -> bytes:
    document: dict[str, Any] = {"version": FORMAT_VERSION, "secrets": dict(sorted(entries.items()))}
    if mark is not None:
        document["key_check"] = mark
    return json.dumps(document, indent=2).encode("utf-8") + b"\n"
