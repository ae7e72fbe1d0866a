"""What the CLI writes to a terminal: the note `airlock serve` gives a person, and the one
sanitizer for stored values.

Over stdio the server waits silently for JSON-RPC on stdin; typed at a prompt that looks
like a hang. When stdin is a terminal, stderr gets one note saying so and the command that
registers this very executable with a client.

Everything the operator CLI prints from the database, a patch or a drill (hosts, paths,
reasons, sandbox output) may have been chosen by sandboxed code or written into a tampered
database, so it goes through `safe_line` (a table cell or field: one line, always) or
`safe_block` (a multi-line text such as a run's output or a patch), which write every
control, format, private-use, surrogate, unassigned and line/paragraph separator character
as a visible `<U+XXXX>`: an escape sequence cannot drive the terminal and a newline cannot
forge a line of the report. `table` lays out rows with every cell made safe. JSON output
(`--json`) keeps exact values: `json.dumps` escapes every control and non-ASCII character.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import textwrap
from collections.abc import Sequence

from airlock.characters import is_invisible


def registration_hint(argv0: str, serve_args: Sequence[str]) -> str:
    """The note for a terminal: what `serve` waits for, and how to register it."""
    command = shlex.join([_executable(argv0), "serve", *serve_args])
    return (
        "airlock: serving MCP on stdin/stdout, waiting for an MCP client; typing here does "
        "nothing (Ctrl-C stops it).\n"
        "airlock: let your client start it instead, e.g. Claude Code:\n"
        f"  claude mcp add airlock -- {command}\n"
    )


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def _executable(argv0: str) -> str:
    """This `airlock` as an absolute path a client can start from any directory."""
    if os.sep in argv0 and os.path.isfile(argv0):
        return os.path.abspath(argv0)
    return shutil.which(argv0) or "airlock"


def _escaped(text: str, keep: str) -> str:
    return "".join(
        f"<U+{ord(ch):04X}>" if ch not in keep and is_invisible(ch) else ch for ch in text
    )


def safe_line(text: str) -> str:
    """`text` for one line of a terminal: every control and invisible character, newline
    and tab included, written as `<U+XXXX>`."""
    return _escaped(text, "")


def safe_block(text: str) -> str:
    """`text` for several lines of a terminal: as `safe_line`, but newline and tab stay."""
    return _escaped(text, "\n\t")


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    wrap: Sequence[int | None] = (),
) -> str:
    """Rows under a header in aligned columns, every cell through `safe_line`. A column
    with a width in `wrap` is wrapped to it (a row then takes several lines); the last
    column is never padded."""
    limits = [*wrap, *[None] * (len(header) - len(wrap))]
    cells = [
        [_wrapped(safe_line(cell), limit) for cell, limit in zip(row, limits, strict=True)]
        for row in [header, *rows]
    ]
    widths = [max(len(line) for row in cells for line in row[i]) for i in range(len(header))]
    lines = []
    for row in cells:
        for n in range(max(len(cell) for cell in row)):
            parts = [cell[n] if n < len(cell) else "" for cell in row]
            lines.append("  ".join(p.ljust(w) for p, w in zip(parts, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _wrapped(cell: str, width: int | None) -> list[str]:
    if width is None or len(cell) <= width:
        return [cell]
    return textwrap.wrap(cell, width, break_on_hyphens=False) or [""]
