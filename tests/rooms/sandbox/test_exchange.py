"""Reading a runner's attach stream: framing, caps and hostile input, with no sockets."""

from __future__ import annotations

import json
import struct

import pytest

from airlock.sandbox.exchange import MAX_NOTES, Exchange
from airlock.sandbox.inside.wire import (
    ENTRIES,
    FAULT,
    MAX_FRAME,
    NOTES,
    RESULT,
    STDOUT,
    TAR,
    FrameDecoder,
    encode_frame,
)
from airlock.sandbox.spec import ArtifactCaps, ContainerLimits, JobSpec

JOB = JobSpec(
    run_id="run_x",
    session_id="ses_x",
    tenant="local",
    image="img",
    language="python",
    code="",
    env={},
    timeout_s=1,
    limits=ContainerLimits(memory_mb=64, cpus=1, pids=16, workspace_mb=8, tmp_mb=8),
    stream_cap_bytes=10,
    artifact_caps=ArtifactCaps(max_files=1, max_file_bytes=1, max_total_bytes=1, max_entries=1),
)
REPORT = {
    "exit_code": 0,
    "timed_out": False,
    "duration_ms": 5,
    "stdout": {"bytes": 3, "sha256": "x"},
    "stderr": {"bytes": 0, "sha256": "y"},
    "listing": {"entries": 0, "notes": 0},
}
ENTRY = {"path": "a", "kind": "file", "mode": 420, "mtime": 15, "size": 1, "sha256": "s"}


def docker_chunk(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


def test_frames_split_across_any_boundary_decode_the_same() -> None:
    wire = encode_frame(STDOUT, b"abc") + encode_frame(RESULT, b"{}")
    for cut in range(len(wire) + 1):
        decoder = FrameDecoder()
        frames = decoder.feed(wire[:cut]) + decoder.feed(wire[cut:])
        assert frames == [(STDOUT, b"abc"), (RESULT, b"{}")]


@pytest.mark.parametrize(
    "wire",
    [b"z\x00\x00\x00\x01a", struct.pack(">cI", STDOUT, MAX_FRAME + 1)],
    ids=["unknown kind", "oversized"],
)
def test_decoder_rejects_hostile_frames(wire: bytes) -> None:
    with pytest.raises(ValueError):
        FrameDecoder().feed(wire)


def test_exchange_caps_streams_and_reads_the_report() -> None:
    exchange = Exchange(JOB)
    payload = encode_frame(STDOUT, b"0123456789abcdef") + encode_frame(
        RESULT, json.dumps(REPORT).encode()
    )
    exchange.feed(docker_chunk(2, b"runner says hi") + docker_chunk(1, payload))
    assert bytes(exchange.stdout) == b"0123456789"
    assert bytes(exchange.runner_log) == b"runner says hi"
    assert exchange.report is not None and exchange.report.exit_code == 0
    assert exchange.done


def test_exchange_stops_at_the_tar_cap() -> None:
    exchange = Exchange(JOB)
    exchange.feed(docker_chunk(1, encode_frame(TAR, b"x" * 1_000_000)))
    exchange.feed(docker_chunk(1, encode_frame(TAR, b"x" * 100_000)))
    assert exchange.overflow is not None and "max_artifact_total_bytes" in exchange.overflow
    assert exchange.done


@pytest.mark.parametrize(
    ("frame", "fault"),
    [
        (encode_frame(RESULT, b"not json"), "unreadable result"),
        (encode_frame(RESULT, b'{"exit_code": "x"}'), "unreadable result"),
        (encode_frame(FAULT, b'{"error": "boom"}'), "boom"),
        (b"?garbage", "corrupt"),
    ],
)
def test_exchange_turns_bad_reports_into_faults(frame: bytes, fault: str) -> None:
    exchange = Exchange(JOB)
    exchange.feed(docker_chunk(1, frame))
    assert exchange.fault is not None and fault in exchange.fault
    assert exchange.report is None


def _entries(*paths: str) -> bytes:
    return encode_frame(
        ENTRIES, json.dumps([dict(ENTRY, path=p, changed=True) for p in paths]).encode()
    )


def test_listing_and_notes_arrive_in_many_frames_and_are_counted() -> None:
    job = JOB.model_copy(
        update={
            "artifact_caps": ArtifactCaps(
                max_files=1, max_file_bytes=1, max_total_bytes=1, max_entries=3
            )
        }
    )
    exchange = Exchange(job)
    notes = [encode_frame(NOTES, json.dumps([f"n{i}"] * 10).encode()) for i in range(10)]
    report = dict(REPORT, listing={"entries": 3, "notes": 100})
    wire = _entries("a", "b") + _entries("c") + b"".join(notes)
    exchange.feed(docker_chunk(1, wire + encode_frame(RESULT, json.dumps(report).encode())))
    assert exchange.report is not None, exchange.fault
    assert [e.path for e in exchange.entries] == ["a", "b", "c"]
    assert exchange.entries[0].mode == 420 and exchange.entries[0].mtime == 15
    assert len(exchange.notes) == MAX_NOTES
    assert exchange.notes_dropped == 100 - MAX_NOTES


@pytest.mark.parametrize(
    ("wire", "fault"),
    [
        (_entries("a", "b"), "more than 1 entries"),
        (encode_frame(ENTRIES, b'[{"path": 1}]'), "unreadable listing"),
        (encode_frame(NOTES, b'{"x": 1}'), "unreadable notes"),
        (
            encode_frame(
                RESULT, json.dumps(dict(REPORT, listing={"entries": 1, "notes": 0})).encode()
            ),
            "does not match",
        ),
    ],
    ids=["too many entries", "bad entry", "bad notes", "count mismatch"],
)
def test_exchange_refuses_a_listing_that_does_not_add_up(wire: bytes, fault: str) -> None:
    exchange = Exchange(JOB)
    exchange.feed(docker_chunk(1, wire))
    assert exchange.fault is not None and fault in exchange.fault
    assert exchange.report is None


def test_the_tar_is_handed_on_as_it_comes_and_not_kept() -> None:
    big = JOB.model_copy(
        update={
            "artifact_caps": ArtifactCaps(
                max_files=1, max_file_bytes=1, max_total_bytes=8 << 20, max_entries=1
            )
        }
    )
    exchange = Exchange(big)
    chunks = [bytes([i]) * 700_000 for i in range(4)]
    taken = []
    for chunk in chunks:
        exchange.feed(docker_chunk(1, encode_frame(TAR, chunk)))
        taken.append(exchange.take_tar())
        assert exchange.take_tar() == b""
    assert exchange.overflow is None and exchange.tar_bytes == 2_800_000
    assert taken == chunks
