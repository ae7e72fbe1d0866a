"""Tests of the secret vault and the `Secret` wrapper, on real files."""

from __future__ import annotations

import base64
import copy
import json
import logging
import os
import pickle
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from airlock.broker import KEY_FILE_ENV, Secret, SecretInfo, Vault, load_key, vault_path
from airlock.errors import InvalidRequest, VaultError

VALUE = "ghp_s3cr3t-VALUE-0123456789abcdef"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def key(data_dir: Path) -> bytes:
    return load_key(data_dir, {})


@pytest.fixture
def vault(data_dir: Path, key: bytes) -> Vault:
    return Vault(vault_path(data_dir), key)


# --- Secret -----------------------------------------------------------------------------


def test_secret_reveals_its_value_only_through_reveal() -> None:
    assert Secret(VALUE).reveal() == VALUE


@pytest.mark.parametrize(
    "show",
    [repr, str, lambda s: f"{s}", lambda s: f"{s!r}", lambda s: f"{s:>40}", "{}".format],
    ids=["repr", "str", "fstring", "fstring-repr", "fstring-spec", "str-format"],
)
def test_secret_shows_a_mask_instead_of_its_value(show: object) -> None:
    assert callable(show)
    shown = show(Secret(VALUE))
    assert VALUE not in shown
    assert "Secret('***')" in shown


def test_secret_in_a_log_record_shows_the_mask(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("token %s, again %r", Secret(VALUE), Secret(VALUE))
    assert caplog.records[0].getMessage() == "token Secret('***'), again Secret('***')"
    assert VALUE not in caplog.text


def test_secret_in_a_container_repr_hides_the_value() -> None:
    assert VALUE not in repr({"token": Secret(VALUE), "list": [Secret(VALUE)]})


def test_secrets_with_equal_values_are_not_equal() -> None:
    assert Secret(VALUE) != Secret(VALUE)
    s = Secret(VALUE)
    assert s == s


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_secret_refuses_pickling(protocol: int) -> None:
    with pytest.raises(TypeError) as info:
        pickle.dumps(Secret(VALUE), protocol=protocol)
    assert VALUE not in str(info.value)


def test_secret_copies_are_itself_and_it_has_no_dict() -> None:
    s = Secret(VALUE)
    assert copy.copy(s) is s
    assert copy.deepcopy({"k": s})["k"] is s
    assert not hasattr(s, "__dict__")
    with pytest.raises(AttributeError):
        s._value = "other"


def test_secret_wraps_only_strings() -> None:
    with pytest.raises(TypeError):
        Secret(b"bytes")  # type: ignore[arg-type]


# --- key file ---------------------------------------------------------------------------


def test_key_is_generated_once_as_base64_in_a_0600_file_in_a_0700_dir(data_dir: Path) -> None:
    key = load_key(data_dir, {})
    key_file = data_dir / "vault" / "key"
    assert len(key) == 32
    assert mode_of(key_file) == 0o600
    assert mode_of(key_file.parent) == 0o700
    assert base64.b64decode(key_file.read_bytes().strip()) == key
    assert key_file.read_bytes().endswith(b"\n")
    assert load_key(data_dir, {}) == key
    assert [p.name for p in key_file.parent.iterdir()] == ["key"]


def test_key_file_named_by_the_environment_is_used(tmp_path: Path, data_dir: Path) -> None:
    key_file = tmp_path / "vault.key"
    key_file.write_bytes(base64.b64encode(b"k" * 32) + b"\n")
    key_file.chmod(0o600)
    assert load_key(data_dir, {KEY_FILE_ENV: str(key_file)}) == b"k" * 32
    assert not (data_dir / "vault" / "key").exists()


def test_missing_key_file_named_by_the_environment_is_refused(
    tmp_path: Path, data_dir: Path
) -> None:
    missing = tmp_path / "nope.key"
    with pytest.raises(VaultError, match="does not exist"):
        load_key(data_dir, {KEY_FILE_ENV: str(missing)})
    assert not missing.exists()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_key_file_open_to_group_or_others_is_refused_with_chmod_600(
    tmp_path: Path, data_dir: Path, mode: int
) -> None:
    key_file = tmp_path / "vault.key"
    key_file.write_bytes(base64.b64encode(b"k" * 32) + b"\n")
    key_file.chmod(mode)
    with pytest.raises(VaultError, match=f"chmod 600 {key_file}"):
        load_key(data_dir, {KEY_FILE_ENV: str(key_file)})


def test_generated_key_file_loosened_later_is_refused(data_dir: Path) -> None:
    load_key(data_dir, {})
    (data_dir / "vault" / "key").chmod(0o644)
    with pytest.raises(VaultError, match="chmod 600"):
        load_key(data_dir, {})


@pytest.mark.parametrize(
    "content", [b"", b"not base64!!\n", base64.b64encode(b"short") + b"\n"], ids=str
)
def test_key_file_without_a_32_byte_key_is_refused(
    tmp_path: Path, data_dir: Path, content: bytes
) -> None:
    key_file = tmp_path / "vault.key"
    key_file.write_bytes(content)
    key_file.chmod(0o600)
    with pytest.raises(VaultError, match="base64-encoded 32-byte key"):
        load_key(data_dir, {KEY_FILE_ENV: str(key_file)})


# --- vault ------------------------------------------------------------------------------


def test_vault_round_trips_a_value_with_its_hosts(vault: Vault) -> None:
    vault.set("github_token", VALUE, ["api.github.com", "uploads.github.com"])
    got = vault.get("github_token")
    assert got is not None
    secret, hosts = got
    assert isinstance(secret, Secret)
    assert secret.reveal() == VALUE
    assert hosts == ("api.github.com", "uploads.github.com")


def test_vault_reads_what_another_vault_object_wrote(data_dir: Path, key: bytes) -> None:
    Vault(vault_path(data_dir), key).set("a", VALUE, ["example.com"])
    got = Vault(vault_path(data_dir), key).get("a")
    assert got is not None
    assert got[0].reveal() == VALUE


def test_vault_get_of_unknown_name_is_none(vault: Vault) -> None:
    assert vault.get("missing") is None
    vault.set("present", VALUE, ["example.com"])
    assert vault.get("missing") is None


def test_vault_set_replaces_value_and_hosts(vault: Vault) -> None:
    vault.set("t", "first-value", ["a.example.com"])
    vault.set("t", VALUE, ["b.example.com"])
    got = vault.get("t")
    assert got is not None
    assert (got[0].reveal(), got[1]) == (VALUE, ("b.example.com",))


def test_vault_hosts_are_lowercased_deduplicated_and_sorted(vault: Vault) -> None:
    vault.set("t", VALUE, ["API.Example.com.", "b.example.com", "api.example.com", "*.Foo.org"])
    got = vault.get("t")
    assert got is not None
    assert got[1] == ("*.foo.org", "api.example.com", "b.example.com")


def test_vault_file_holds_no_plaintext_and_is_0600_in_a_0700_dir(
    vault: Vault, data_dir: Path
) -> None:
    vault.set("github_token", VALUE, ["api.github.com"])
    raw = vault.path.read_bytes()
    assert VALUE.encode() not in raw
    assert base64.b64encode(VALUE.encode()) not in raw
    assert mode_of(vault.path) == 0o600
    assert mode_of(vault.path.parent) == 0o700
    document = json.loads(raw)
    assert document["version"] == 1
    entry = document["secrets"]["github_token"]
    assert set(entry) == {"nonce", "ciphertext", "hosts", "created_at"}
    assert len(base64.b64decode(entry["nonce"])) == 12
    assert entry["hosts"] == ["api.github.com"]


def test_vault_uses_a_fresh_nonce_for_every_write(vault: Vault) -> None:
    vault.set("a", VALUE, ["example.com"])
    first = json.loads(vault.path.read_bytes())["secrets"]["a"]
    vault.set("a", VALUE, ["example.com"])
    vault.set("b", VALUE, ["example.com"])
    secrets = json.loads(vault.path.read_bytes())["secrets"]
    nonces = {first["nonce"], secrets["a"]["nonce"], secrets["b"]["nonce"]}
    assert len(nonces) == 3
    assert secrets["a"]["ciphertext"] != secrets["b"]["ciphertext"]


def test_vault_write_leaves_no_temporary_files(vault: Vault) -> None:
    vault.set("a", VALUE, ["example.com"])
    vault.set("b", VALUE, ["example.com"])
    vault.remove("a")
    names = sorted(p.name for p in vault.path.parent.iterdir())
    assert names == [".secrets.json.lock", "key", "secrets.json"]


def test_vault_list_shows_names_hosts_and_times_but_no_values(vault: Vault) -> None:
    vault.set("zeta", VALUE, ["z.example.com"])
    vault.set("alpha", VALUE + "-2", ["a.example.com", "b.example.com"])
    listed = vault.list()
    assert [(i.name, i.hosts) for i in listed] == [
        ("alpha", ("a.example.com", "b.example.com")),
        ("zeta", ("z.example.com",)),
    ]
    assert all(isinstance(i, SecretInfo) and i.created_at > 0 for i in listed)
    assert VALUE not in repr(listed)


def test_vault_list_of_a_new_vault_is_empty_and_creates_no_file(vault: Vault) -> None:
    assert vault.list() == []
    assert not vault.path.exists()


def test_vault_remove_reports_whether_there_was_such_a_secret(vault: Vault) -> None:
    vault.set("a", VALUE, ["example.com"])
    assert vault.remove("a") is True
    assert vault.get("a") is None
    assert vault.remove("a") is False
    assert VALUE.encode() not in vault.path.read_bytes()


def test_vault_repr_names_the_path_only(vault: Vault, key: bytes) -> None:
    vault.set("a", VALUE, ["example.com"])
    assert repr(vault) == f"Vault({str(vault.path)!r})"
    assert base64.b64encode(key).decode() not in repr(vault)


def test_vault_opened_with_another_key_cannot_decrypt(vault: Vault) -> None:
    vault.set("github_token", VALUE, ["api.github.com"])
    other = Vault(vault.path, os.urandom(32))
    for call in (lambda: other.get("github_token"), other.list, lambda: other.remove("x")):
        with pytest.raises(VaultError, match="cannot be decrypted with this key") as info:
            call()
        assert VALUE not in str(info.value)
    with pytest.raises(VaultError, match="cannot be decrypted with this key"):
        other.set("another", "value-2", ["example.com"])
    assert set(json.loads(vault.path.read_bytes())["secrets"]) == {"github_token"}


def tamper(path: Path, name: str, field: str, value: object) -> None:
    document = json.loads(path.read_bytes())
    document["secrets"][name][field] = value
    path.write_text(json.dumps(document))


def flip_first_byte(b64: str) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[0] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("hosts", lambda e: ["api.github.com", "evil.example.com"]),
        ("hosts", lambda e: ["evil.example.com"]),
        ("ciphertext", lambda e: flip_first_byte(e["ciphertext"])),
        ("nonce", lambda e: flip_first_byte(e["nonce"])),
        ("ciphertext", lambda e: e["ciphertext"][:-8] + "AAAAAAA="),
    ],
    ids=["hosts-widened", "hosts-replaced", "ciphertext-flipped", "nonce-flipped", "tag-cut"],
)
def test_vault_entry_tampered_in_the_file_fails_to_decrypt(
    vault: Vault, field: str, change: object
) -> None:
    assert callable(change)
    vault.set("github_token", VALUE, ["api.github.com"])
    entry = json.loads(vault.path.read_bytes())["secrets"]["github_token"]
    tamper(vault.path, "github_token", field, change(entry))
    for call in (lambda: vault.get("github_token"), vault.list):
        with pytest.raises(VaultError, match="cannot be decrypted with this key") as info:
            call()
        assert VALUE not in str(info.value)


def test_vault_entry_renamed_in_the_file_fails_to_decrypt(vault: Vault) -> None:
    vault.set("github_token", VALUE, ["api.github.com"])
    document = json.loads(vault.path.read_bytes())
    document["secrets"]["other"] = document["secrets"].pop("github_token")
    vault.path.write_text(json.dumps(document))
    with pytest.raises(VaultError, match="cannot be decrypted with this key"):
        vault.get("other")


@pytest.mark.parametrize(
    "content",
    [b"not json", b"[]", b'{"version": 2, "secrets": {}}', b'{"version": 1}'],
    ids=["not-json", "list", "version-2", "no-secrets"],
)
def test_vault_file_that_is_not_a_vault_is_refused(vault: Vault, content: bytes) -> None:
    vault.path.parent.mkdir(parents=True, exist_ok=True)
    vault.path.write_bytes(content)
    with pytest.raises(VaultError, match="is not an Airlock vault file"):
        vault.get("a")


@pytest.mark.parametrize(
    "name", ["", "a" * 65, "has space", "slash/name", "new\nline", "ünï"], ids=repr
)
def test_vault_refuses_bad_names(vault: Vault, name: str) -> None:
    with pytest.raises(InvalidRequest, match="A-Z a-z 0-9"):
        vault.set(name, VALUE, ["example.com"])


@pytest.mark.parametrize(
    "hosts",
    [
        [],
        ["https://api.github.com"],
        ["api.github.com:443"],
        ["api.github.com/path"],
        ["*"],
        ["*.com"],
        ["api.*.example.com"],
        ["bad_label.example.com"],
        ["bücher.example"],
        "api.github.com",
    ],
    ids=repr,
)
def test_vault_refuses_bad_hosts_without_echoing_the_value(vault: Vault, hosts: list[str]) -> None:
    with pytest.raises(InvalidRequest) as info:
        vault.set("t", VALUE, hosts)
    assert VALUE not in str(info.value)
    assert not vault.path.exists()


def test_vault_refuses_an_empty_value(vault: Vault) -> None:
    with pytest.raises(InvalidRequest, match="non-empty"):
        vault.set("t", "", ["example.com"])


def test_vault_refuses_a_key_of_the_wrong_size(tmp_path: Path) -> None:
    with pytest.raises(VaultError, match="32 bytes"):
        Vault(tmp_path / "v.json", b"short")


def test_vault_concurrent_writers_lose_no_update(data_dir: Path, key: bytes) -> None:
    names = [f"secret_{i}" for i in range(16)]

    def write(name: str) -> None:
        Vault(vault_path(data_dir), key).set(name, VALUE, ["example.com"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(write, names))
    assert [i.name for i in Vault(vault_path(data_dir), key).list()] == sorted(names)
