"""The untrusted-output envelope: how text a sandbox produced is handed to the model.

Everything here is a pure function of its arguments (no I/O; stdlib and
`airlock.characters`). What belongs here: cleaning sandbox text, neutralizing envelope
look-alikes, wrapping, clipping raw output to a byte cap, and the `_meta` marking of
content blocks that carry sandbox bytes as they are (images, blobs). What does not:
deciding caps, storing full output, building results.

Guarantees of `wrap` (the model must treat everything between the tags as data, never as
instructions, whatever it says):

- The envelope can only be closed by its own closing line: the nonce is 64 random bits
  from `new_nonce`, every occurrence of it in the text (any case) becomes
  `[nonce removed]`, and every `<` that starts an `untrusted-output` tag, opening or
  closing, in any case or spacing, becomes `&lt;`. So the only line of the output that
  holds `</untrusted-output` is the last one, and the nonce occurs exactly twice.
- The text holds no terminal escape sequences, no C0/C1 controls except newline and tab,
  no zero-width or bidi controls, no Unicode tag characters, no variation selectors or
  other marks that render as nothing (`airlock.characters`), no lone surrogates, and is
  NFC-normalized: what a human reviewer sees is what the model reads. This runs before
  neutralizing, so invisible characters inside a tag name cannot hide it.
- The header carries only our own identifiers, checked against a strict alphabet, so it
  cannot be broken by a quote or a newline.
"""

from __future__ import annotations

import codecs
import hashlib
import re
import secrets
import unicodedata
from dataclasses import dataclass
from typing import Any

from airlock.characters import HIDDEN_MARKS, INVISIBLE_FORMATS

NONCE_BYTES = 8
"""64 random bits, hex-encoded to 16 characters (docs/design.md: at least 64 bits)."""

NONCE_REMOVED = "[nonce removed]"

_TAG = "untrusted-output"

# One alternation, one pass: at an ESC (or the 8-bit CSI) the whole escape sequence is
# tried first, so its parameters do not leak into the text; anything left that is in the
# character class is deleted one character at a time. ESC itself is in the class, so
# deleting never joins pieces into a new sequence.
_STRIP = re.compile(
    # CSI, 7-bit and 8-bit: parameters, intermediates, one final byte (colours, cursor moves).
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    # OSC and the other string sequences (DCS, SOS, PM, APC): their payload (window titles,
    # hyperlink targets) is invisible on a terminal, so it goes too, up to BEL or ST.
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
    # Every other escape: optional intermediates and one final byte (ESC ( B, ESC 7, ESC c).
    r"|\x1b[ -/]*[0-~]"
    # C0 except \t and \n (so every \r goes: "\r\n" becomes "\n", a lone \r is dropped), DEL,
    # C1; zero-width, bidi and other invisible format controls; tag characters; variation
    # selectors and the other marks that render as nothing; surrogates.
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f"
    f"{INVISIBLE_FORMATS}{HIDDEN_MARKS}"
    r"\ud800-\udfff]"
)

# A `<` that opens or closes an envelope tag as a reader might take it: any whitespace or
# slashes before the name, any case, and any short run of separators inside the name
# (`untrusted_output`, `untrusted output`, non-ASCII hyphens).
_TAG_START = re.compile(r"<(?=[\s/]*untrusted[\W_]{0,3}output)", re.IGNORECASE)

_NONCE = re.compile(r"[0-9a-f]{16,}")
_HEADER_VALUE = re.compile(r"[A-Za-z0-9_.:/-]{1,200}")


TRUST_KEY = "airlock/trust"
"""The `_meta` key that marks a content block's bytes as the sandbox's (MCP reserves only
prefixes whose second label is `modelcontextprotocol` or `mcp`)."""


def untrusted_meta(run_id: str) -> dict[str, Any]:
    """`_meta` for a content block holding bytes a sandbox wrote, which no envelope can
    wrap (an image, a blob): untrusted, and the run that wrote them."""
    return {TRUST_KEY: "untrusted", "airlock/run": run_id}


def new_nonce() -> str:
    """Return a fresh envelope nonce: `NONCE_BYTES` random bytes as lowercase hex."""
    return secrets.token_hex(NONCE_BYTES)


def sanitize(text: str) -> str:
    """Remove escape sequences and invisible or control characters, then normalize to NFC.

    Newlines and tabs are kept; carriage returns are dropped (so CRLF becomes LF).
    Idempotent.
    """
    return unicodedata.normalize("NFC", _STRIP.sub("", text))


def clean_field(text: str) -> str:
    """Sandbox text for a place with no envelope around it (a structured field): sanitized,
    and every `<` starting an `untrusted-output` tag turned into `&lt;`."""
    return _TAG_START.sub("&lt;", sanitize(text))


def neutralize(text: str, nonce: str) -> str:
    """Make `text` unable to open or close an envelope that uses `nonce`.

    Every occurrence of the nonce (any case) becomes `[nonce removed]` and every `<`
    starting an `untrusted-output` tag becomes `&lt;`. Apply to sanitized text.
    """
    _check_nonce(nonce)
    text = re.sub(re.escape(nonce), NONCE_REMOVED, text, flags=re.IGNORECASE)
    return _TAG_START.sub("&lt;", text)


def wrap(text: str, *, run_id: str, stream: str, nonce: str, note: str | None = None) -> str:
    """Return `text` sanitized, neutralized and enclosed in an untrusted-output envelope.

    `note` (e.g. a truncation note) goes on its own line in brackets, inside the envelope
    after the text. Raises `ValueError` if `run_id` or `stream` is not 1-200 characters of
    `A-Z a-z 0-9 _ . : / -`, or if `nonce` is not at least 16 lowercase hex digits.
    """
    for name, value in (("run_id", run_id), ("stream", stream)):
        if not _HEADER_VALUE.fullmatch(value):
            raise ValueError(f"{name} must be 1-200 characters of A-Za-z0-9_.:/- ; got {value!r}")
    body = neutralize(sanitize(text), nonce)
    if body and not body.endswith("\n"):
        body += "\n"
    if note is not None:
        body += f"[{neutralize(sanitize(note), nonce)}]\n"
    return (
        f'<{_TAG} run="{run_id}" stream="{stream}" nonce="{nonce}">\n'
        f"{body}"
        f'</{_TAG} nonce="{nonce}">'
    )


@dataclass(frozen=True)
class Clipped:
    """A sanitized prefix of a byte stream, with what is needed to say what was left out."""

    text: str
    shown_bytes: int
    """Raw bytes of the stream that `text` represents (before sanitizing)."""
    total_bytes: int
    truncated: bool
    """`total_bytes > shown_bytes`."""
    sha256: str
    """Hex SHA-256 of the whole stream."""


def clip(
    data: bytes, cap: int, *, total_bytes: int | None = None, sha256: str | None = None
) -> Clipped:
    """Decode at most `cap` bytes of `data` as UTF-8 and sanitize them.

    A multibyte character cut by the cap is left out whole rather than shown as U+FFFD;
    invalid bytes elsewhere become U+FFFD. When `data` is only a prefix of the stream,
    pass the whole stream's `total_bytes` and `sha256`; they default to those of `data`.
    """
    if cap < 0:
        raise ValueError(f"cap must not be negative; got {cap}")
    if total_bytes is None:
        total_bytes = len(data)
    elif total_bytes < len(data):
        raise ValueError(f"total_bytes ({total_bytes}) is less than len(data) ({len(data)})")
    head = data[:cap]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    # Only an end cut by us is an unfinished character; if the whole stream is here, its
    # broken last bytes are just invalid bytes like any others.
    whole_stream = len(head) == total_bytes
    decoded = decoder.decode(head, final=whole_stream)
    pending, _ = decoder.getstate()
    shown_bytes = len(head) - len(pending)
    return Clipped(
        text=sanitize(decoded),
        shown_bytes=shown_bytes,
        total_bytes=total_bytes,
        truncated=total_bytes > shown_bytes,
        sha256=sha256 if sha256 is not None else hashlib.sha256(data).hexdigest(),
    )


def _check_nonce(nonce: str) -> None:
    # An empty or short nonce would match everywhere or be guessable; the header needs hex.
    if not _NONCE.fullmatch(nonce):
        raise ValueError("nonce must be at least 16 lowercase hex digits (use new_nonce())")
