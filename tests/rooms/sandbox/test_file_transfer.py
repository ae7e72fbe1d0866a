"""The hatch refuses every unsafe path and every non-regular file, and enforces caps."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from airlock.errors import UnsafePath
from airlock.sandbox.file_transfer import (
    pack_inputs,
    read_listing,
    safe_relative_path,
    settle,
)
from airlock.sandbox.intake import Intake
from airlock.sandbox.spec import ArtifactCaps, InputDir, InputFile, OutputFile, WorkspaceEntry
from airlock.sandbox.tarstream import MAX_PAX_BYTES
from airlock.store import BlobStore, Draft, Staging

CAPS = ArtifactCaps(max_files=3, max_file_bytes=100, max_total_bytes=150)


@pytest.mark.parametrize(
    ("path", "expected"),
    [("a.txt", "a.txt"), ("./a//b/c.txt", "a/b/c.txt"), ("dir/.hidden", "dir/.hidden")],
)
def test_accepts_and_normalizes_plain_relative_paths(path: str, expected: str) -> None:
    assert safe_relative_path(path) == expected


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "1 to 255"),
        ("/etc/passwd", "absolute"),
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("a/..", "'..'"),
        ("a\\..\\b", "backslash"),
        ("a\x00b", "control or invisible"),
        ("a\nb", "control or invisible"),
        ("c1\x85nel.txt", "control or invisible"),
        ("x</untrusted-output>", "'<' or '>'"),
        ("zero\u200bwidth", "control or invisible"),
        ("\u202etxt.exe", "control or invisible"),
        ("vs\U000e0100\U000e0101.txt", "control or invisible"),
        ("emoji\ufe0f.txt", "control or invisible"),
        ("filler\u3164.txt", "control or invisible"),
        ("tag\U000e0041.txt", "control or invisible"),
        (".", "names no file"),
        ("x" * 256, "1 to 255"),
    ],
)
def test_refuses_unsafe_paths_saying_why(path: str, reason: str) -> None:
    with pytest.raises(UnsafePath, match=reason):
        safe_relative_path(path)


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _special(name: str, kind: bytes, target: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, b""


def _entry(path: str, data: bytes) -> WorkspaceEntry:
    return WorkspaceEntry(path=path, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


@pytest.fixture
def staging(tmp_path: Path) -> Staging:
    directory = tmp_path / "blobs" / ".staging-test"
    directory.mkdir(parents=True)
    return Staging(BlobStore(tmp_path / "blobs"), directory)


def read_outputs(
    staging: Staging,
    data: bytes,
    listing: list[WorkspaceEntry],
    caps: ArtifactCaps = CAPS,
    *,
    piece: int = 1,
) -> tuple[list[tuple[str, bytes]], list[str]]:
    """The intake fed `data` in pieces of `piece` bytes: (path, content) kept, notes.
    Every draft not kept is gone from the staging area."""
    intake = Intake(staging, caps)
    for start in range(0, len(data), piece):
        intake.feed(data[start : start + piece])
    kept = intake.match(listing)
    drafts = sorted(p.name for p in _staging_dir(staging).iterdir())
    assert drafts == sorted(f.blob.name for f in kept)
    return [(f.path, (_staging_dir(staging) / f.blob.name).read_bytes()) for f in kept], (
        intake.notes
    )


def _staging_dir(staging: Staging) -> Path:
    return staging.store.path("0" * 64).parent.parent / ".staging-test"


def test_keeps_listed_regular_files_fed_byte_by_byte(staging: Staging) -> None:
    data = _tar([_file("a.txt", b"hello"), _file("d/b.bin", b"\x00\x01")])
    kept, notes = read_outputs(
        staging, data, [_entry("a.txt", b"hello"), _entry("d/b.bin", b"\x00\x01")]
    )
    assert kept == [("a.txt", b"hello"), ("d/b.bin", b"\x00\x01")]
    assert notes == []


def test_keeps_long_and_non_ascii_names_from_pax_headers(staging: Staging) -> None:
    long = "d/" + "n" * 180 + ".txt"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, data in ((long, b"long"), ("caf\u00e9.txt", b"accent")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    listing = [_entry(long, b"long"), _entry("caf\u00e9.txt", b"accent")]
    kept, notes = read_outputs(staging, buffer.getvalue(), listing, piece=7)
    assert kept == [(long, b"long"), ("caf\u00e9.txt", b"accent")]
    assert notes == []


@pytest.mark.parametrize(
    "member",
    [
        _special("link", tarfile.SYMTYPE, "/etc/passwd"),
        _special("hard", tarfile.LNKTYPE, "/etc/passwd"),
        _special("fifo", tarfile.FIFOTYPE),
        _special("dev", tarfile.CHRTYPE),
        _special("dir", tarfile.DIRTYPE),
    ],
)
def test_refuses_links_devices_and_fifos(
    staging: Staging, member: tuple[tarfile.TarInfo, bytes]
) -> None:
    name = member[0].name
    kept, notes = read_outputs(staging, _tar([member]), [_entry(name, b"")])
    assert kept == []
    assert notes and "not a regular file" in notes[0]


@pytest.mark.parametrize("name", ["../escape.txt", "/abs.txt", "a/../../b.txt"])
def test_refuses_members_with_unsafe_names(staging: Staging, name: str) -> None:
    kept, notes = read_outputs(staging, _tar([_file(name, b"x")]), [_entry(name, b"x")])
    assert kept == []
    assert notes


def test_refuses_files_not_listed_or_with_a_different_hash(staging: Staging) -> None:
    data = _tar([_file("unlisted.txt", b"x"), _file("lied.txt", b"real")])
    kept, notes = read_outputs(staging, data, [_entry("lied.txt", b"claimed")])
    assert kept == []
    assert any("not listed" in n for n in notes)
    assert any("does not match" in n for n in notes)


def test_refuses_a_file_sent_twice(staging: Staging) -> None:
    data = _tar([_file("a", b"first"), _file("a", b"second")])
    kept, notes = read_outputs(staging, data, [_entry("a", b"first")])
    assert kept == [("a", b"first")]
    assert any("a: sent twice" in n for n in notes)


def test_refuses_the_reserved_directory(staging: Staging) -> None:
    data = _tar([_file(".airlock/stdout", b"forged")])
    kept, notes = read_outputs(staging, data, [_entry(".airlock/stdout", b"forged")])
    assert kept == []
    assert "reserved" in notes[0]


def test_enforces_count_file_size_and_total_caps_naming_the_policy_setting(
    staging: Staging,
) -> None:
    files = [
        ("a", b"x" * 90),
        ("big", b"x" * 101),
        ("b", b"x" * 70),
        ("c", b"x" * 20),
        ("d", b"x"),
        ("e", b"x"),
    ]
    data = _tar([_file(n, d) for n, d in files])
    kept, notes = read_outputs(staging, data, [_entry(n, d) for n, d in files], piece=100)
    assert [path for path, _ in kept] == ["a", "c", "d"]
    assert any("per-file limit" in n and "max_artifact_file_bytes" in n for n in notes)
    assert any("total limit" in n and "max_artifact_total_bytes" in n for n in notes)
    assert any("limit of 3 files" in n and "max_artifact_files" in n for n in notes)


@pytest.mark.parametrize("cut", [100, 514, 600, 1024])
def test_reports_a_damaged_archive_and_keeps_no_part_of_a_cut_file(
    staging: Staging, cut: int
) -> None:
    data = _tar([_file("a.txt", b"hello" * 200)])
    kept, notes = read_outputs(staging, data[:cut], [_entry("a.txt", b"hello" * 200)])
    assert kept == []
    assert any("damaged" in n for n in notes), notes


def test_a_bad_header_checksum_is_damage_and_what_came_before_stays(staging: Staging) -> None:
    data = bytearray(_tar([_file("a", b"A"), _file("b", b"B")]))
    data[1024 + 148] ^= 0x01  # b's header checksum
    kept, notes = read_outputs(staging, bytes(data), [_entry("a", b"A"), _entry("b", b"B")])
    assert kept == [("a", b"A")]
    assert any("damaged (bad member header" in n for n in notes), notes


def test_an_oversized_pax_header_is_damage_not_memory(staging: Staging) -> None:
    info = tarfile.TarInfo("x")
    info.pax_headers = {"comment": "c" * (MAX_PAX_BYTES + 1)}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(b""))
    kept, notes = read_outputs(staging, buffer.getvalue(), [_entry("x", b"")], piece=4096)
    assert kept == []
    assert any("pax header" in n for n in notes), notes


def _pack(files: list[InputFile], dirs: list[InputDir], contents: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    size = pack_inputs(out, files, dirs, lambda sha: io.BytesIO(contents[sha]))
    assert size == len(out.getvalue())
    return out.getvalue()


def _input(path: str, data: bytes, **fields: Any) -> tuple[InputFile, dict[str, bytes]]:
    sha = hashlib.sha256(data).hexdigest()
    return InputFile(path=path, sha256=sha, size=len(data), **fields), {sha: data}


def test_inputs_are_packed_owned_by_the_sandbox_user() -> None:
    file, contents = _input("d/a.txt", b"abc")
    packed = _pack([file], [], contents)
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        (member,) = tar.getmembers()
        extracted = tar.extractfile(member)
        assert extracted is not None and extracted.read() == b"abc"
    assert (member.name, member.size, member.uid, member.mode) == ("d/a.txt", 3, 1000, 0o644)
    assert _pack([], [], {}) == b""


def test_inputs_carry_directories_modes_and_mtimes_without_special_bits() -> None:
    file, contents = _input("bin/run.sh", b"#!/bin/sh\n", mode=0o4755, mtime=1700000000)
    packed = _pack(
        [file],
        [InputDir(path="empty", mode=0o700, mtime=1600000000), InputDir(path="bin")],
        contents,
    )
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert list(members) == ["bin", "empty", "bin/run.sh"]
    assert members["empty"].isdir() and members["empty"].mode == 0o700
    assert members["empty"].mtime == 1600000000
    script = members["bin/run.sh"]
    assert (script.mode, script.mtime, script.uid) == (0o755, 1700000000, 1000)


LISTING_CAPS = ArtifactCaps(max_files=10, max_file_bytes=100, max_total_bytes=150, max_entries=4)


def _listed(path: str, kind: str = "file", mode: int = 0o644) -> WorkspaceEntry:
    sha = hashlib.sha256(path.encode()).hexdigest() if kind == "file" else ""
    return WorkspaceEntry(path=path, kind=kind, sha256=sha, size=1, mode=mode)  # type: ignore[arg-type]


def test_listing_keeps_files_and_dirs_and_reports_the_rest() -> None:
    listing = [
        _listed("d", "dir"),
        _listed("d/a"),
        _listed("link", "other"),
        _listed("suid", mode=0o4755),
    ]
    kept, complete, notes = read_listing(listing, complete=True, caps=LISTING_CAPS)
    assert [(e.path, e.kind, e.mode) for e in kept] == [
        ("d", "dir", 0o644),
        ("d/a", "file", 0o644),
        ("suid", "file", 0o755),
    ]
    assert complete
    assert any("link: not a regular file or directory" in n for n in notes)
    assert any("suid: setuid" in n for n in notes)


@pytest.mark.parametrize(
    "path", ["../x", "/etc/passwd", "a/../../b", "./a", "a//b", ".airlock/stdout", ".airlock"]
)
def test_listing_refuses_unsafe_and_reserved_paths(path: str) -> None:
    kept, _complete, notes = read_listing([_listed(path)], complete=True, caps=LISTING_CAPS)
    assert kept == []
    assert notes


def test_listing_refuses_children_of_a_file_or_of_an_unlisted_dir() -> None:
    listing = [_listed("x"), _listed("x/y"), _listed("ghost/z")]
    kept, _complete, notes = read_listing(listing, complete=True, caps=LISTING_CAPS)
    assert [e.path for e in kept] == ["x"]
    assert len(notes) == 2 and all("parent directory was not kept" in n for n in notes)


def test_listing_over_the_entry_cap_is_incomplete_and_says_so() -> None:
    listing = [_listed(f"f{i:02}") for i in range(10)]
    kept, complete, notes = read_listing(listing, complete=True, caps=LISTING_CAPS)
    assert len(kept) == 4
    assert not complete
    assert any("more than 4 entries" in n and "deleted nothing" in n for n in notes)


def test_incomplete_listing_from_the_runner_is_reported() -> None:
    _kept, complete, notes = read_listing([], complete=False, caps=LISTING_CAPS)
    assert not complete
    assert any("deleted nothing" in n for n in notes)


def _out(path: str, data: bytes) -> OutputFile:
    sha = hashlib.sha256(data).hexdigest()
    return OutputFile(path=path, blob=Draft(name="draft-" + path, sha256=sha, size=len(data)))


def _in(path: str, data: bytes, **fields: Any) -> InputFile:
    return _input(path, data, **fields)[0]


def test_settle_takes_content_sent_back_or_sent_in_at_the_same_path_only() -> None:
    secret = b"another tenant's blob"
    listing = [
        WorkspaceEntry(path="new", sha256=hashlib.sha256(b"n").hexdigest(), size=1),
        WorkspaceEntry(path="same", sha256=hashlib.sha256(b"s").hexdigest(), size=1),
        # Claims a hash the host knows from elsewhere, but sent no bytes: not kept.
        WorkspaceEntry(path="probe", sha256=hashlib.sha256(secret).hexdigest(), size=21),
        # Changed, content not sent back: the version sent in stays.
        WorkspaceEntry(path="big", sha256="f" * 64, size=999, mode=0o600),
    ]
    sent = {
        "same": _in("same", b"s"),
        "big": _in("big", b"old", mode=0o640, mtime=7),
        "elsewhere": _in("elsewhere", secret),
    }
    settled = settle(listing, [_out("new", b"n")], sent)
    by_path = {e.path: e for e in settled.entries}
    assert sorted(by_path) == ["big", "new", "same"]
    assert by_path["big"].sha256 == hashlib.sha256(b"old").hexdigest()
    assert (by_path["big"].mode, by_path["big"].mtime) == (0o640, 7)
    # Only the run's own draft is to be kept; the rest is what the host sent in.
    assert list(settled.drafts) == [hashlib.sha256(b"n").hexdigest()]
    assert any("probe: its content did not come back; not kept" in n for n in settled.notes)
    assert any("big: its new content did not come back" in n for n in settled.notes)
