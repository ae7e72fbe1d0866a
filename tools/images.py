"""Pictures among the artifacts: which bytes really are a PNG, JPEG, GIF or WebP image.

The sandbox chose every byte and every file name, so a file counts as an image only when its
bytes have the structure of one: the signature, a header that parses with sane dimensions,
and the format's end marker (a truncated or padded file is not an image). The name's
extension never decides. Nothing here decodes pixels; that is the client's job, and a client
must never be handed bytes mislabelled as an image.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# A picture larger than this comes back as a link only (fetch_artifact still reads it).
MAX_IMAGE_BYTES = 1024 * 1024
# At most this many pictures are attached to one run_code result.
MAX_IMAGES_PER_RESULT = 4
MAX_SIDE = 16384

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"
# JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic), which carry the
# dimensions; C4, C8 and CC share the range but are tables, not frames.
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_NO_LENGTH = frozenset({0x01, *range(0xD0, 0xD8)})


@dataclass(frozen=True)
class Picture:
    mime_type: str
    width: int
    height: int


def sniff_image(data: bytes) -> Picture | None:
    """The picture these bytes are, or None when they are not a well-formed image."""
    # The signatures differ, so at most one of these can claim the bytes.
    for sniff in (_png, _jpeg, _gif, _webp):
        try:
            found = sniff(data)
        except (struct.error, IndexError):  # a header cut short
            return None
        if found is not None:
            sane = 1 <= found.width <= MAX_SIDE and 1 <= found.height <= MAX_SIDE
            return found if sane else None
    return None


def _png(data: bytes) -> Picture | None:
    if not data.startswith(_PNG_SIGNATURE):
        return None
    length, kind, width, height = struct.unpack(">I4sII", data[8:24])
    if length != 13 or kind != b"IHDR" or not data.endswith(_PNG_END):
        return None
    return Picture("image/png", width, height)


def _jpeg(data: bytes) -> Picture | None:
    if not data.startswith(b"\xff\xd8\xff"):
        return None
    if not data.endswith(b"\xff\xd9"):
        return None
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in _JPEG_NO_LENGTH:
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if length < 2:
            return None
        if marker in _JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return Picture("image/jpeg", width, height)
        if marker == 0xDA:  # start of scan before any frame header
            return None
        at += 2 + length
    return None


def _gif(data: bytes) -> Picture | None:
    if data[:6] not in (b"GIF87a", b"GIF89a"):
        return None
    if not data.endswith(b";"):
        return None
    width, height = struct.unpack("<HH", data[6:10])
    return Picture("image/gif", width, height)


def _webp(data: bytes) -> Picture | None:
    if data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return None
    (riff_size,) = struct.unpack("<I", data[4:8])
    kind = data[12:16]
    if riff_size + 8 != len(data):
        return None
    if kind == b"VP8X":
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return Picture("image/webp", width, height)
    if kind == b"VP8L":
        if data[20] != 0x2F:
            return None
        (bits,) = struct.unpack("<I", data[21:25])
        return Picture("image/webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if kind == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            return None
        width, height = struct.unpack("<HH", data[26:30])
        return Picture("image/webp", width & 0x3FFF, height & 0x3FFF)
    return None
