"""What the operator CLI prints from the database goes through `server.terminal`: a
tampered row (a newline that forges a line, an escape that drives the terminal) is
shown escaped, visibly, by every command that prints stored values."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from support import airlock_main

from airlock.server.terminal import safe_block, safe_line, table
from airlock.store import (
    ApprovalRecord,
    Database,
    DrillRecord,
    EgressRecord,
    GrantRecord,
    SessionRecord,
)

NOW = time.time()
# Each tampered value tries to end its line and start a forged one, and to drive the
# terminal (clear, title, hidden text, bidi override).
FORGED = "FORGED LINE"
HOSTILE = f"x\n{FORGED}\r\x1b[2J\x1b]0;owned\x07\x9b8m\u202e\u2028"


@pytest.mark.parametrize(
    ("text", "line", "block"),
    [
        ("a\nb\tc", "a<U+000A>b<U+0009>c", "a\nb\tc"),
        ("\x1b[31mred", "<U+001B>[31mred", "<U+001B>[31mred"),
        ("c1\x85 \x9b", "c1<U+0085> <U+009B>", "c1<U+0085> <U+009B>"),
        ("\u202eevil\u2066\u200b", "<U+202E>evil<U+2066><U+200B>", "<U+202E>evil<U+2066><U+200B>"),
        ("tag\U000e0041 sep\u2028", "tag<U+E0041> sep<U+2028>", "tag<U+E0041> sep<U+2028>"),
        ("V\U000e0100\ufe0fE\u3164", "V<U+E0100><U+FE0F>E<U+3164>", "V<U+E0100><U+FE0F>E<U+3164>"),
        ("plain text, café", "plain text, café", "plain text, café"),
    ],
)
def test_control_and_invisible_characters_are_written_visibly(
    text: str, line: str, block: str
) -> None:
    assert safe_line(text) == line
    assert safe_block(text) == block
    assert safe_line(safe_line(text)) == line  # idempotent: printable already


def test_a_table_wraps_its_wrapped_columns_and_makes_every_cell_safe() -> None:
    shown = table(("A", "B"), [("one", "word " * 12), (HOSTILE, "b")], wrap=(12, 20))
    lines = shown.splitlines()
    assert max(len(line) for line in lines) <= 12 + 2 + 20
    assert lines[0] == "A" + " " * 13 + "B"
    assert (
        lines[1:4]
        == ["one" + " " * 11 + "word word word word"] + [" " * 14 + "word word word word"] * 2
    )
    assert lines[4].startswith("x<U+000A>FOR ") and lines[4].endswith("  b")
    assert FORGED not in [line.strip() for line in lines]
    assert all(ch not in shown for ch in "\x1b\x07\r\x9b\u202e")


async def seed(data_dir: Path) -> None:
    db = await Database.open(data_dir / "airlock.db")
    try:
        await db.create_session(
            SessionRecord(id="ses_a", tenant="acme", created_at=0, last_used_at=0, expires_at=1e12)
        )
        await db.add_egress(
            [
                EgressRecord(
                    time=NOW,
                    tenant="acme",
                    session_id="ses_a",
                    run_id="run_a",
                    capability=None,
                    method="GET",
                    host=f"evil.example{HOSTILE}",
                    port=443,
                    path="/",
                    status=403,
                    bytes_in=0,
                    bytes_out=0,
                    duration_ms=1,
                    decision="deny",
                    reason=f"refused{HOSTILE}",
                )
            ]
        )
        await db.record_grant(
            GrantRecord(
                id="g1",
                tenant="acme",
                session_id="ses_a",
                capability="read",
                params={"org": f"acme{HOSTILE}"},
                scope={"hosts": ["api.example.com"]},
                approved_by="policy",
                reason=f"because{HOSTILE}",
                created_at=NOW,
                expires_at=NOW + 60,
            )
        )
        await db.create_approval(
            ApprovalRecord(
                id="apr_x",
                tenant="acme",
                session_id="ses_a",
                capability="read",
                params={"org": f"acme{HOSTILE}"},
                ttl_s=60,
                reason=f"please{HOSTILE}",
                status="pending",
                created_at=NOW,
                expires_at=NOW + 3600,
            )
        )
        await db.record_drill(
            DrillRecord(
                id="drill_x",
                target="the server policy",
                tenant="airlock-drill",
                started_at=NOW,
                finished_at=NOW,
                held=1,
                failed=0,
                not_applicable=0,
                sessions=[],
                rows=[{"attack": "a", "expected": "e", "observed": f"ok{HOSTILE}", "held": True}],
            )
        )
    finally:
        await db.close()


@pytest.mark.parametrize(
    "command",
    [
        ("audit", "egress"),
        ("audit", "capabilities"),
        ("audit", "drills"),
        ("approvals", "list"),
    ],
    ids=" ".join,
)
def test_every_command_printing_stored_values_escapes_a_tampered_row(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    data_dir = tmp_path / "data"
    anyio.run(seed, data_dir)
    done = airlock_main(*command, "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    assert "<U+000A>FORGED LINE<U+000D><U+001B>[2J" in done.stdout, done.stdout
    assert not any(line.lstrip().startswith(FORGED) for line in done.stdout.splitlines())
    assert all(ch not in done.stdout for ch in "\x1b\x07\r\x9b\u202e\u2028")
