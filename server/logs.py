"""Logging for the CLI and the server: everything to stderr, never stdout (stdout is the
MCP wire of `serve`).

Every line has a UTC timestamp and a level. `text` lines read `TIME LEVEL logger: message
key=value ...`; `json` (`--log-format json`, for log shippers) is one JSON object per line
with the same fields as keys. Structured fields travel in `extra={"fields": {...}}`
(`tools.events` sends them); values that could carry spaces or control characters are
quoted, so one event is always one line.

Records carry text from outside (a Host header the SDK logs, a path, an exception's
message): the one handler formats every logger's records, other libraries' included, and
writes each control or invisible character as a visible escape (`\x1b`, `\u202e`), so no
record can move the terminal's cursor, recolour it, hide text or forge a line. A text
record's traceback follows on indented lines; only a record starts at column 0.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:/@+")


def _time(record: logging.LogRecord) -> str:
    stamp = datetime.fromtimestamp(record.created, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


def _value(value: Any) -> str:
    text = "-" if value is None else str(value)
    # json.dumps escapes every control and non-ASCII character.
    return text if text and set(text) <= _PLAIN else json.dumps(text)


def escape(text: str) -> str:
    """`text` with each character `str.isprintable` refuses (controls, format characters
    such as bidi overrides and zero-width ones, separators other than the space,
    surrogates, private-use and unassigned code points) written as its Python escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class TextFormatter(logging.Formatter):
    """`2026-11-30T19:40:01.123Z INFO airlock.runs: run finished run=... status=ok`."""

    def format(self, record: logging.LogRecord) -> str:
        message = escape(record.getMessage())
        parts = [_time(record), escape(record.levelname), f"{escape(record.name)}: {message}"]
        parts.extend(f"{escape(str(k))}={_value(v)}" for k, v in _fields(record).items())
        line = " ".join(parts)
        if record.exc_info:
            # Split on "\n" alone: every other line-breaking character is escaped.
            trace = self.formatException(record.exc_info).split("\n")
            line += "".join("\n    " + escape(part) for part in trace)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, then the event's fields.

    `json.dumps` (ASCII output) writes every control and non-ASCII character as `\\uXXXX`.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(verbose: bool = False, log_format: LogFormat = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # The SDK, HTTP clients and Alembic (its plugins, on every store open) are chatty at
    # INFO; keep their warnings only.
    for noisy in ("mcp", "httpx", "docker", "urllib3", "alembic"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)
