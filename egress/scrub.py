"""Masking injected secret values in responses, across chunk boundaries.

Belongs here: the spellings of a secret that are looked for (as is, URL-encoded, hex,
base64 and base64url at each of the three byte alignments) and a streaming masker that
replaces each occurrence with as many "*" as it had bytes, so Content-Length stays true
and nothing is re-framed, and which answers cannot be scrubbed at all (a body in a
content coding: refused, never passed on unread). Does not belong here: which secrets (the
run's ledger knows the injected ones), HTTP framing, sockets.

What remains possible is stated in the README: any spelling not listed here (reversed,
split by the server, encrypted) carries the value through.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, quote_plus

MIN_NEEDLE = 8
"""Shorter spellings are not masked: they would mask ordinary text, and give little."""


def _base64_cores(value: bytes, encode: Callable[[bytes], bytes]) -> set[bytes]:
    # Inside a longer base64 text the value starts at one of three byte alignments; the
    # characters that depend only on the value's own bytes are the same at each.
    cores = set()
    for shift in range(3):
        encoded = encode(b"\0" * shift + value).rstrip(b"=")
        first = -(-8 * shift // 6)
        last = 8 * (shift + len(value)) // 6
        cores.add(encoded[first:last])
    return cores


@lru_cache(maxsize=64)
def spellings(secret: str) -> frozenset[bytes]:
    """The byte strings that reveal `secret` in a response."""
    raw = secret.encode()
    found = {raw, quote(secret, safe="").encode(), quote_plus(secret).encode()}
    found |= {raw.hex().encode(), raw.hex().upper().encode()}
    found |= _base64_cores(raw, base64.b64encode)
    found |= _base64_cores(raw, base64.urlsafe_b64encode)
    return frozenset(s for s in found if len(s) >= MIN_NEEDLE)


# How common a byte is in ordinary text, most common first; a spelling is looked for
# only when its least common byte is in the chunk. Bytes not listed rank rarest.
_COMMON = b" etaoinsrhldcumfpgwybvkxjqz\"'=:,./-_0123456789ETAOINSRHLDCUMFPGWYBVKXJQZ%+"
_RARITY = [_COMMON.find(byte) % (len(_COMMON) + 1) for byte in range(256)]


@dataclass(frozen=True)
class _Needles:
    ordered: tuple[bytes, ...]
    """Longest first, so a spelling containing another is masked whole."""
    anchors: tuple[tuple[int, bytes], ...]
    """Each spelling with its byte least likely in ordinary text."""
    hold: int
    prefixes: frozenset[bytes]
    """The proper prefixes of every spelling: what a chunk's end may hold back."""
    firsts: tuple[int, ...]


@lru_cache(maxsize=64)
def _needles(secrets: tuple[str, ...]) -> _Needles:
    # Built once per set of secrets, not once per response.
    found: set[bytes] = set()
    for secret in secrets:
        found |= spellings(secret)
    ordered = tuple(sorted(found, key=len, reverse=True))
    return _Needles(
        ordered=ordered,
        anchors=tuple((max(n, key=_RARITY.__getitem__), n) for n in ordered),
        hold=max((len(n) for n in ordered), default=1) - 1,
        prefixes=frozenset(n[:i] for n in ordered for i in range(1, len(n))),
        firsts=tuple(sorted({n[0] for n in ordered})),
    )


class Scrubber:
    """Masks every spelling of the given secrets in a stream fed chunk by chunk.

    `feed` returns what is safe to pass on now and holds back only a last few bytes that
    begin a spelling (it may be cut by the chunk boundary); `flush` returns the rest at the
    end of the stream. The output always has exactly as many bytes as the input.

    Cost: per chunk, one memchr for each spelling's rarest byte, and a full search only
    for the spellings whose byte is there. A search on its own is slow on short chunks of
    repetitive text (CPython's short-haystack search steps one byte at a time when every
    byte looks like part of the needle), which the byte check avoids: a chunk without the
    byte cannot hold the spelling, so nothing is weakened.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self._needles = _needles(tuple(sorted(set(secrets))))
        self._tail = b""

    @property
    def active(self) -> bool:
        return bool(self._needles.ordered)

    def unreadable(self, headers: Sequence[tuple[bytes, bytes]]) -> str | None:
        """Why an answer with these headers must be refused, or None to pass it on.

        A body in a content coding (gzip, br, deflate: any but identity) hides every
        spelling from the masker, and the client decodes it: while a secret is to be
        masked, such an answer is refused rather than passed on unread. The proxy asks for
        identity whenever it injects, so only an upstream that ignores that meets this.
        """
        if not self.active:
            return None
        codings = [
            coding.strip().lower()
            for key, value in headers
            if key.lower() == b"content-encoding"
            for coding in value.split(b",")
        ]
        encoded = [c for c in codings if c not in (b"", b"identity")]
        if not encoded:
            return None
        return (
            f"the upstream answered in the {encoded[0].decode('ascii', 'replace')!r} content "
            "coding although the proxy asked for none, so the answer cannot be checked for "
            "the secret sent to this host and is refused; ask the API for an uncompressed answer"
        )

    def mask(self, data: bytes) -> bytes:
        """`data` with every whole spelling masked (no state: for header values)."""
        for anchor, needle in self._needles.anchors:
            if anchor in data and needle in data:
                data = data.replace(needle, b"*" * len(needle))
        return data

    def feed(self, data: bytes) -> bytes:
        if not self._needles.ordered:
            return data
        joined = self.mask(self._tail + data) if self._tail else self.mask(data)
        held = self._partial(joined)
        if not held:
            self._tail = b""
            return joined
        self._tail = joined[-held:]
        return joined[:-held]

    def _partial(self, data: bytes) -> int:
        # Only an end that could begin a spelling is held back, so a stream whose chunks
        # end elsewhere (server-sent events, say) is not delayed by the scrubbing. The
        # longest such end wins; it starts at one of the spellings' first bytes.
        needles = self._needles
        start = max(0, len(data) - needles.hold)
        longest = 0
        for first in needles.firsts:
            at = data.find(first, start)
            while at >= 0 and len(data) - at > longest:
                if data[at:] in needles.prefixes:
                    longest = len(data) - at
                    break
                at = data.find(first, at + 1)
        return longest

    def flush(self) -> bytes:
        tail, self._tail = self._tail, b""
        return tail
