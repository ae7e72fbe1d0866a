"""Sans-IO reading of a tar stream: feed bytes as they arrive, take members and their data.

The runner's outgoing files come as one uncompressed tar (POSIX pax, written by Python's
`tarfile` in stream mode). `TarReader` turns it into events without ever holding a
member's content: a `Member` header, its data in `Chunk`s no larger than what was fed,
then `MemberEnd`. Only what a reader of Airlock's outputs needs is understood: ustar
headers (checked by `tarfile.TarInfo.frombuf`, checksum included) and pax extended
headers' `path` and `size`; every other member type is reported as not regular, with
its data skipped. A pax header larger than MAX_PAX_BYTES, a bad header or a stream
that ends inside a member is damage (`TarDamaged`). It never touches files or sockets.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass

BLOCK = 512
MAX_PAX_BYTES = 64 * 1024
# Types whose data follows the header (tarfile also skips the data of unknown types).
_REGULAR = frozenset({tarfile.REGTYPE, tarfile.AREGTYPE})
_NO_DATA = frozenset(
    {
        tarfile.LNKTYPE,
        tarfile.SYMTYPE,
        tarfile.CHRTYPE,
        tarfile.BLKTYPE,
        tarfile.DIRTYPE,
        tarfile.FIFOTYPE,
    }
)


class TarDamaged(ValueError):
    """The stream is not a tar this reader accepts; nothing after it can be trusted."""


@dataclass(frozen=True)
class Member:
    """A member's header: its data (`size` bytes, regular files only) follows."""

    name: str
    size: int
    regular: bool


@dataclass(frozen=True)
class Chunk:
    data: bytes


@dataclass(frozen=True)
class MemberEnd:
    pass


TarEvent = Member | Chunk | MemberEnd


class TarReader:
    """Feed tar bytes, take events; `close` says whether the stream ended cleanly."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        # Bytes of the current member's data still to come, then of padding to skip.
        self._data_left = 0
        self._emit_data = False
        self._pad_left = 0
        self._in_member = False
        # A pax extended header collected for the next member.
        self._pax_left = 0
        self._pax = bytearray()
        self._overrides: dict[str, str] = {}
        self.ended = False

    def feed(self, data: bytes) -> list[TarEvent]:
        if self.ended:
            return []
        self._buffer += data
        events: list[TarEvent] = []
        while not self.ended:
            if self._data_left:
                if not self._buffer:
                    break
                take = min(self._data_left, len(self._buffer))
                piece = bytes(self._buffer[:take])
                del self._buffer[:take]
                self._data_left -= take
                if self._pax_left:
                    self._pax += piece
                    self._pax_left -= take
                    if not self._pax_left:
                        self._overrides = _pax_records(bytes(self._pax))
                        self._pax.clear()
                elif self._emit_data:
                    events.append(Chunk(piece))
                continue
            if self._pad_left:
                take = min(self._pad_left, len(self._buffer))
                del self._buffer[:take]
                self._pad_left -= take
                if self._pad_left:
                    break
                continue
            if self._in_member:
                events.append(MemberEnd())
                self._in_member = False
            if len(self._buffer) < BLOCK:
                break
            block = bytes(self._buffer[:BLOCK])
            del self._buffer[:BLOCK]
            event = self._header(block)
            if event is not None:
                events.append(event)
        if self.ended:
            self._buffer.clear()
        return events

    def close(self) -> None:
        """Raise TarDamaged unless the stream stopped between members."""
        if self._in_member or self._data_left or self._pad_left or self._pax_left:
            raise TarDamaged("the archive ends inside a member")
        if self._buffer and any(self._buffer):
            raise TarDamaged("the archive ends inside a header")

    def _header(self, block: bytes) -> Member | None:
        if not any(block):
            # The end-of-archive marker; the zeros after it are padding.
            self.ended = True
            return None
        try:
            info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        except tarfile.HeaderError as exc:
            raise TarDamaged(f"bad member header ({exc})") from None
        if info.size < 0:
            raise TarDamaged("bad member header (negative size)")
        if info.type == tarfile.XHDTYPE:
            if info.size > MAX_PAX_BYTES:
                raise TarDamaged(f"a pax header of {info.size} bytes exceeds {MAX_PAX_BYTES}")
            self._start_data(info.size, emit=False)
            self._pax_left = info.size
            if not info.size:
                self._overrides = {}
            return None
        overrides, self._overrides = self._overrides, {}
        name = overrides.get("path", info.name)
        size = info.size
        if "size" in overrides:
            try:
                size = int(overrides["size"])
            except ValueError:
                raise TarDamaged("a pax header gives a size that is not a number") from None
            if size < 0:
                raise TarDamaged("a pax header gives a negative size")
        regular = info.type in _REGULAR
        self._in_member = True
        self._start_data(0 if info.type in _NO_DATA else size, emit=regular)
        return Member(name=name, size=size if regular else 0, regular=regular)

    def _start_data(self, size: int, *, emit: bool) -> None:
        self._data_left = size
        self._emit_data = emit
        self._pad_left = -size % BLOCK


def _pax_records(data: bytes) -> dict[str, str]:
    """`path` and `size` of a pax extended header ("LEN key=value\\n" records)."""
    found: dict[str, str] = {}
    at = 0
    while at < len(data):
        if not any(data[at:]):
            break  # trailing NUL padding
        space = data.find(b" ", at)
        if space < 0 or not data[at:space].isdigit():
            raise TarDamaged("a pax header record has no length")
        length = int(data[at:space])
        record = data[space + 1 : at + length]
        if length <= space - at or at + length > len(data) or not record.endswith(b"\n"):
            raise TarDamaged("a pax header record has a wrong length")
        key, equals, value = record[:-1].partition(b"=")
        if not equals:
            raise TarDamaged("a pax header record has no '='")
        if key in (b"path", b"size"):
            found[key.decode("ascii")] = value.decode("utf-8", "surrogateescape")
        at += length
    return found
