"""Which artifact bytes count as a picture: the bytes decide, never the file name."""

from __future__ import annotations

import struct
import zlib

import pytest

from airlock.tools.artifacts import guess_mime_type
from airlock.tools.images import MAX_SIDE, Picture, sniff_image


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    sos = b"\xff\xda" + struct.pack(">HB", 8, 1) + b"\x01\x00\x00\x3f\x00"
    return b"\xff\xd8" + app0 + sof0 + sos + b"\x12\x34" + b"\xff\xd9"


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00" + b";"


def webp_lossless(width: int, height: int) -> bytes:
    bits = (width - 1) | ((height - 1) << 14)
    payload = b"\x2f" + struct.pack("<I", bits) + b"\x00"
    body = b"WEBP" + b"VP8L" + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (png(640, 480), Picture("image/png", 640, 480)),
        (jpeg(320, 200), Picture("image/jpeg", 320, 200)),
        (gif(2, 3), Picture("image/gif", 2, 3)),
        (webp_lossless(100, 50), Picture("image/webp", 100, 50)),
    ],
)
def test_well_formed_images_are_recognized_with_their_size(data: bytes, expected: Picture) -> None:
    assert sniff_image(data) == expected


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"just text, named plot.png by the sandbox",
        png(10, 10)[:-12],  # no IEND: truncated
        png(10, 10) + b"<script>",  # trailing bytes after IEND
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 8,  # signature, no header
        png(0, 10),
        png(MAX_SIDE + 1, 10),
        jpeg(10, 10)[:-2],  # no end-of-image marker
        b"\xff\xd8\xff\xda\x00\x08" + b"\x00" * 6 + b"\xff\xd9",  # scan before any frame
        gif(10, 10)[:-1],
        webp_lossless(10, 10) + b"x",  # RIFF size disagrees with the file
        b"RIFF\x04\x00\x00\x00WEBP",
    ],
)
def test_anything_else_is_not_an_image(data: bytes) -> None:
    assert sniff_image(data) is None


def test_mime_type_comes_from_the_bytes_not_the_name() -> None:
    assert guess_mime_type("plot.png", b"not a picture") == "application/octet-stream"
    assert guess_mime_type("chart.dat", png(4, 4)) == "image/png"
    assert guess_mime_type("photo.jpg", png(4, 4)) == "image/png"
    assert guess_mime_type("notes.txt", b"hello") == "text/plain"
