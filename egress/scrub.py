"""Masking injected secret values in responses, across chunk boundaries.

Belongs here: the spellings of a secret that are looked for (as is, URL-encoded, hex,
base64 and base64url at each of the three byte alignments) and a streaming masker that
replaces each occurrence with as many "*" as it had bytes, so Content-Length stays true
and nothing is re-framed. Does not belong here: which secrets (the run's ledger knows
the injected ones), HTTP framing, sockets.

What remains possible is stated in the README: a response body the upstream compressed
anyway, or any spelling not listed here (reversed, split by the server, encrypted),
carries the value through.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
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


class Scrubber:
    """Masks every spelling of the given secrets in a stream fed chunk by chunk.

    `feed` returns what is safe to pass on now and holds back only a last few bytes that
    begin a spelling (it may be cut by the chunk boundary); `flush` returns the rest at the
    end of the stream. The output always has exactly as many bytes as the input.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        needles: set[bytes] = set()
        for secret in secrets:
            needles |= spellings(secret)
        # Longest first, so a spelling containing another is masked whole.
        self._needles = sorted(needles, key=len, reverse=True)
        self._hold = max((len(n) for n in self._needles), default=1) - 1
        self._tail = b""

    @property
    def active(self) -> bool:
        return bool(self._needles)

    def mask(self, data: bytes) -> bytes:
        """`data` with every whole spelling masked (no state: for header values)."""
        for needle in self._needles:
            if needle in data:
                data = data.replace(needle, b"*" * len(needle))
        return data

    def feed(self, data: bytes) -> bytes:
        if not self._needles:
            return data
        joined = self.mask(self._tail + data) if self._tail else self.mask(data)
        cut = len(joined) - self._partial(joined)
        self._tail = joined[cut:]
        return joined[:cut]

    def _partial(self, data: bytes) -> int:
        # Only an end that could begin a spelling is held back, so a stream whose chunks
        # end elsewhere (server-sent events, say) is not delayed by the scrubbing.
        for start in range(max(0, len(data) - self._hold), len(data)):
            end = data[start:]
            if any(needle.startswith(end) for needle in self._needles):
                return len(data) - start
        return 0

    def flush(self) -> bytes:
        tail, self._tail = self._tail, b""
        return tail
