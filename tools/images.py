"""Pictures among the artifacts: which bytes really are a PNG, JPEG, GIF or WebP image.

The sandbox chose every byte and every file name, so a file counts as an image only when its
whole structure is that of one, walked from the signature to the end marker with nothing
after it: every PNG chunk's length and CRC, the IHDR fields, the chunk order and an APNG's
frames; every JPEG marker segment, its frame and scan headers and the end of its scans; every
GIF block down to the trailer; every WebP RIFF chunk and its bitstream header. The
dimensions must be sane and the pixels few enough that a client can decode them
(`MAX_PIXELS`, `MAX_DECODED_BYTES`).
The name's extension never decides. Nothing here decodes or decompresses pixels (that is
the client's job, done on bytes that passed here): only headers and framing are read, with
the standard library. What belongs here: those checks and their one-line reasons. What does
not: how a refused file is shown (tools/artifacts.py).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# A picture larger than this comes back as a link only (fetch_artifact still reads it).
MAX_IMAGE_BYTES = 1024 * 1024
# At most this many pictures are attached to one run_code result.
MAX_IMAGES_PER_RESULT = 4
MAX_SIDE = 16384
# Pixels of one frame. A few compressed bytes can claim a huge canvas (16384 x 16384 is a
# 261 KB PNG and a GiB decoded), and the client decodes whatever it is handed.
MAX_PIXELS = 50_000_000
# What a client holds decoded, every frame of an animation counted: 4 bytes a pixel (8 for
# a 16-bit PNG).
MAX_DECODED_BYTES = 256 * 1024 * 1024
# Chunks, segments or blocks of one file: real encoders write a few hundred at most, and
# each one costs the walk time and a little memory.
MAX_PARTS = 10_000
_WHERE = "airlock/tools/images.py"


@dataclass(frozen=True)
class Picture:
    mime_type: str
    width: int
    height: int
    frames: int = 1


@dataclass(frozen=True)
class Refusal:
    """Bytes that begin like an image of `mime_type` and are not a well-formed one."""

    mime_type: str
    reason: str
    """One line for the reader, e.g. "PNG chunk IDAT at byte 33 has a bad CRC"."""


class _Malformed(ValueError):
    """Raised inside this module only; `examine_image` turns it into a `Refusal`."""


def examine_image(data: bytes) -> Picture | Refusal | None:
    """The picture these bytes are; a `Refusal` when they start like an image and are not a
    well-formed one; None when they do not start like any image."""
    # The signatures differ, so at most one of these can claim the bytes.
    for mime_type, starts, check in _FORMATS:
        if not starts(data):
            continue
        try:
            return check(data)
        except _Malformed as exc:
            return Refusal(mime_type, str(exc))
        except (struct.error, IndexError):
            return Refusal(mime_type, f"{_name(mime_type)} ends inside its own structure")
    return None


def sniff_image(data: bytes) -> Picture | None:
    """The picture these bytes are, or None when they are not a well-formed image."""
    found = examine_image(data)
    return found if isinstance(found, Picture) else None


def _name(mime_type: str) -> str:
    return mime_type.removeprefix("image/").upper()


def _count(kind: str, parts: int) -> int:
    """One more part of a file of format `kind`, refused past `MAX_PARTS`."""
    if parts >= MAX_PARTS:
        raise _Malformed(f"{kind} has more than {MAX_PARTS} chunks, segments or blocks")
    return parts + 1


def _check_size(
    mime_type: str, width: int, height: int, *, frames: int = 1, bytes_per_pixel: int = 4
) -> Picture:
    kind = _name(mime_type)
    if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
        raise _Malformed(
            f"{kind} says it is {width}x{height} pixels; each side must be 1 to {MAX_SIDE}"
        )
    if width * height > MAX_PIXELS:
        raise _Malformed(
            f"{kind} of {width}x{height} has {width * height} pixels, above the cap of "
            f"{MAX_PIXELS} (MAX_PIXELS in {_WHERE}); save it smaller to see it"
        )
    decoded = width * height * frames * bytes_per_pixel
    if decoded > MAX_DECODED_BYTES:
        raise _Malformed(
            f"{kind} of {width}x{height} in {frames} frame(s) decodes to about {decoded} "
            f"bytes, above the cap of {MAX_DECODED_BYTES} (MAX_DECODED_BYTES in {_WHERE}); "
            "save it smaller or with fewer frames to see it"
        )
    return Picture(mime_type, width, height, frames)


# --- PNG -----------------------------------------------------------------------------------

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Allowed bit depths of each colour type (PNG spec, table 11.1).
_PNG_DEPTHS = {0: {1, 2, 4, 8, 16}, 2: {8, 16}, 3: {1, 2, 4, 8}, 4: {8, 16}, 6: {8, 16}}
_PNG_CRITICAL = frozenset({b"IHDR", b"PLTE", b"IDAT", b"IEND"})
_PNG_MAX_LENGTH = 2**31 - 1


@dataclass(frozen=True)
class _Chunk:
    kind: bytes
    at: int
    body: memoryview

    @property
    def name(self) -> str:
        return self.kind.decode("ascii")


def _png_chunks(data: bytes) -> Iterator[_Chunk]:
    """Every chunk from the signature to IEND, each length and CRC checked; nothing may
    follow IEND and nothing but chunks may come between."""
    view = memoryview(data)
    at = len(_PNG_SIGNATURE)
    parts = 0
    while at < len(data):
        parts = _count("PNG", parts)
        if len(data) - at < 12:
            raise _Malformed(f"PNG has {len(data) - at} stray bytes at byte {at}, not a chunk")
        length, kind = struct.unpack_from(">I4s", data, at)
        if not kind.isascii() or not kind.isalpha():
            raise _Malformed(f"PNG has bytes at byte {at} that are not a chunk (garbage)")
        name = kind.decode("ascii")
        end = at + 12 + length
        if length > _PNG_MAX_LENGTH or end > len(data):
            raise _Malformed(
                f"PNG has bytes at byte {at} that are not a whole chunk (garbage, or chunk "
                f"{name} is cut short)"
            )
        (crc,) = struct.unpack_from(">I", data, end - 4)
        if zlib.crc32(view[at + 4 : end - 4]) != crc:
            raise _Malformed(f"PNG chunk {name} at byte {at} has a bad CRC")
        yield _Chunk(kind, at, view[at + 8 : end - 4])
        at = end
        if kind == b"IEND":
            if at != len(data):
                raise _Malformed(f"PNG has {len(data) - at} bytes after its IEND chunk")
            return
    raise _Malformed("PNG has no IEND chunk: the file is cut short")


def _png(data: bytes) -> Picture:
    chunks = list(_png_chunks(data))
    first = chunks[0]
    if first.kind != b"IHDR" or len(first.body) != 13:
        raise _Malformed("PNG does not start with a 13-byte IHDR chunk")
    width, height, depth, colour, compression, filtering, interlace = struct.unpack(
        ">IIBBBBB", first.body
    )
    if depth not in _PNG_DEPTHS.get(colour, ()):
        raise _Malformed(f"PNG has bit depth {depth} with colour type {colour}, not allowed")
    if compression or filtering or interlace not in (0, 1):
        raise _Malformed(
            f"PNG has compression {compression}, filter {filtering}, interlace {interlace}; "
            "only 0, 0 and 0 or 1 exist"
        )
    frames = _png_order(chunks[1:], colour, depth)
    picture = _check_size(
        "image/png", width, height, frames=frames, bytes_per_pixel=8 if depth == 16 else 4
    )
    if b"acTL" in {c.kind for c in chunks}:
        _png_animation(chunks, width, height, frames)
    return picture


def _png_order(chunks: list[_Chunk], colour: int, depth: int) -> int:
    """Check the chunks after IHDR (their kinds, order and counts); the number of frames."""
    seen: set[bytes] = set()
    frames = 1
    idat: list[_Chunk] = []
    previous = b"IHDR"
    for chunk in chunks:
        kind = chunk.kind
        if not kind[2:3].isupper():
            raise _Malformed(f"PNG chunk {chunk.name} at byte {chunk.at} has a reserved name")
        if kind[:1].isupper() and kind not in _PNG_CRITICAL:
            raise _Malformed(f"PNG has an unknown critical chunk {chunk.name}")
        if kind == b"IHDR" or (kind in (b"PLTE", b"acTL") and kind in seen):
            raise _Malformed(f"PNG has a second {chunk.name} chunk")
        if kind == b"IDAT":
            if idat and previous != b"IDAT":
                raise _Malformed("PNG has other chunks between its IDAT chunks")
            idat.append(chunk)
        elif kind in (b"PLTE", b"acTL") and idat:
            raise _Malformed(f"PNG has its {chunk.name} chunk after its image data")
        if kind == b"PLTE":
            _png_palette(chunk, colour, depth)
        if kind == b"acTL":
            frames = _png_frames(chunk)
        seen.add(kind)
        previous = kind
    if colour == 3 and b"PLTE" not in seen:
        raise _Malformed("PNG of colour type 3 (palette) has no PLTE chunk")
    if not idat:
        raise _Malformed("PNG has no IDAT chunk: no image data")
    _zlib_header(b"".join(bytes(c.body[:2]) for c in idat)[:2])
    return frames


def _png_animation(chunks: list[_Chunk], width: int, height: int, frames: int) -> None:
    """An APNG holds exactly the frames its acTL claims (a decoder may show every fcTL it
    finds, so a low claim would slip a larger decoded size past the cap), each inside the
    canvas."""
    controls = [c for c in chunks if c.kind == b"fcTL"]
    if len(controls) != frames:
        raise _Malformed(
            f"PNG animation control chunk acTL says {frames} frame(s); the file holds "
            f"{len(controls)} fcTL frame(s)"
        )
    for control in controls:
        if len(control.body) != 26:
            raise _Malformed(f"PNG frame control chunk fcTL at byte {control.at} is not 26 bytes")
        w, h, x, y = struct.unpack_from(">IIII", control.body, 4)
        if not w or not h or x + w > width or y + h > height:
            raise _Malformed(
                f"PNG frame {w}x{h} at {x},{y} (byte {control.at}) is not inside its "
                f"{width}x{height}"
            )


def _png_palette(chunk: _Chunk, colour: int, depth: int) -> None:
    entries, rest = divmod(len(chunk.body), 3)
    if colour in (0, 4):
        raise _Malformed(f"PNG of colour type {colour} (grey) has a PLTE chunk")
    limit = 2**depth if colour == 3 else 256
    if rest or not 1 <= entries <= limit:
        raise _Malformed(f"PNG palette of {len(chunk.body)} bytes is not 1 to {limit} colours")


def _png_frames(chunk: _Chunk) -> int:
    if len(chunk.body) != 8:
        raise _Malformed("PNG animation control chunk acTL is not 8 bytes")
    frames, _plays = struct.unpack(">II", chunk.body)
    if frames < 1:
        raise _Malformed("PNG animation control chunk acTL says 0 frames")
    return int(frames)


def _zlib_header(head: bytes) -> None:
    """The image data must start a zlib stream (RFC 1950), read without inflating it."""
    if len(head) < 2:
        raise _Malformed("PNG image data is too short to be a zlib stream")
    cmf, flags = head
    if cmf & 0x0F != 8 or cmf >> 4 > 7 or flags & 0x20 or (cmf * 256 + flags) % 31:
        raise _Malformed("PNG image data does not start a zlib stream")


# --- JPEG ----------------------------------------------------------------------------------

_SOI, _EOI, _SOS, _DQT, _DHT, _DRI, _DAC, _COM = 0xD8, 0xD9, 0xDA, 0xDB, 0xC4, 0xDD, 0xCC, 0xFE
# Sequential, progressive and lossless frames, Huffman or arithmetic; hierarchical JPEG
# (C5-C7, CD-CF) is too rare in the wild for a client to be trusted with it.
_JPEG_FRAMES = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC9, 0xCA, 0xCB})
_JPEG_LOSSLESS = frozenset({0xC3, 0xCB})
_JPEG_APP = frozenset(range(0xE0, 0xF0))
_JPEG_RST = frozenset(range(0xD0, 0xD8))


@dataclass(frozen=True)
class _Frame:
    width: int
    height: int
    components: frozenset[int]


def _jpeg(data: bytes) -> Picture:
    at = 2
    frame: _Frame | None = None
    scans = parts = 0
    while True:
        parts = _count("JPEG", parts)
        marker, at = _jpeg_marker(data, at)
        if marker == _EOI:
            break
        (length,) = struct.unpack_from(">H", data, at)
        if length < 2 or at + length > len(data):
            raise _Malformed(f"JPEG segment FF{marker:02X} at byte {at - 2} runs past the end")
        body = memoryview(data)[at + 2 : at + length]
        at += length
        if marker in _JPEG_FRAMES:
            if frame is not None:
                raise _Malformed("JPEG has a second frame header")
            frame = _jpeg_frame(marker, body)
        elif marker == _SOS:
            if frame is None:
                raise _Malformed("JPEG has a scan before its frame header")
            _jpeg_scan(body, frame)
            at = _skip_entropy(data, at)
            scans += 1
        else:
            _jpeg_table(marker, body)
    if at != len(data):
        raise _Malformed(f"JPEG has {len(data) - at} bytes after its end-of-image marker")
    if frame is None or not scans:
        raise _Malformed("JPEG has no frame header or no scan: no image data")
    return _check_size("image/jpeg", frame.width, frame.height)


def _jpeg_marker(data: bytes, at: int) -> tuple[int, int]:
    """The marker at `at` (after any fill bytes) and where its segment starts."""
    if at >= len(data):
        raise _Malformed("JPEG has no end-of-image marker: the file is cut short")
    if data[at] != 0xFF:
        raise _Malformed(f"JPEG has bytes at byte {at} that are not a marker (garbage)")
    while data[at + 1] == 0xFF:
        at += 1
    marker = data[at + 1]
    if marker in _JPEG_RST or marker in (0x00, 0x01, _SOI):
        raise _Malformed(f"JPEG has marker FF{marker:02X} out of place at byte {at}")
    return marker, at + 2


def _skip_entropy(data: bytes, at: int) -> int:
    """Past a scan's entropy-coded bytes: to the next marker that is neither a stuffed zero
    nor a restart marker."""
    while True:
        at = data.find(b"\xff", at)
        if at < 0 or at + 1 >= len(data):
            raise _Malformed("JPEG scan data runs to the end of the file: it is cut short")
        following = data[at + 1]
        if following != 0x00 and following not in _JPEG_RST and following != 0xFF:
            return at
        at += 1 if following == 0xFF else 2


def _jpeg_frame(marker: int, body: memoryview) -> _Frame:
    if len(body) < 6:
        raise _Malformed("JPEG frame header is too short")
    precision, height, width, count = struct.unpack_from(">BHHB", body)
    allowed = range(2, 17) if marker in _JPEG_LOSSLESS else (8, 12)
    if precision not in allowed or (marker == 0xC0 and precision != 8):
        raise _Malformed(f"JPEG frame has sample precision {precision}, not allowed")
    if not 1 <= count <= 4 or len(body) != 6 + 3 * count:
        raise _Malformed(f"JPEG frame header of {len(body) + 2} bytes for {count} components")
    ids = set()
    for index in range(count):
        ident, sampling, table = struct.unpack_from(">BBB", body, 6 + 3 * index)
        if not (1 <= sampling >> 4 <= 4 and 1 <= sampling & 0x0F <= 4) or table > 3:
            raise _Malformed(f"JPEG frame component {ident} has impossible sampling or table")
        ids.add(ident)
    if len(ids) != count:
        raise _Malformed("JPEG frame names one component twice")
    if height == 0:
        raise _Malformed("JPEG frame has height 0 (given later by a DNL marker): not accepted")
    return _Frame(width=width, height=height, components=frozenset(ids))


def _jpeg_scan(body: memoryview, frame: _Frame) -> None:
    count = body[0] if body else 0
    if not 1 <= count <= 4 or len(body) != 4 + 2 * count:
        raise _Malformed(f"JPEG scan header of {len(body) + 2} bytes for {count} components")
    if not {body[1 + 2 * i] for i in range(count)} <= frame.components:
        raise _Malformed("JPEG scan names a component its frame does not have")


def _jpeg_table(marker: int, body: memoryview) -> None:
    """Tables and metadata between frames and scans; any other marker is refused."""
    if marker in _JPEG_APP or marker == _COM:
        return
    if marker == _DRI:
        if len(body) != 2:
            raise _Malformed("JPEG restart interval segment is not 4 bytes")
        return
    if marker == _DAC:
        if not body or len(body) % 2:
            raise _Malformed("JPEG arithmetic conditioning segment has an odd length")
        return
    if marker == _DQT:
        _walk_tables(body, "quantization", lambda at: 65 if body[at] >> 4 == 0 else 129)
        return
    if marker == _DHT:
        _walk_tables(body, "Huffman", lambda at: 17 + sum(body[at + 1 : at + 17]))
        return
    raise _Malformed(f"JPEG has an unknown or unsupported marker FF{marker:02X}")


def _walk_tables(body: memoryview, what: str, size_at: Callable[[int], int]) -> None:
    """DQT and DHT segments hold one or more tables that must fill them exactly; each
    starts with a byte of class (0 or 1) and id (0 to 3)."""
    at = 0
    while at < len(body):
        if body[at] >> 4 > 1 or body[at] & 0x0F > 3:
            raise _Malformed(f"JPEG {what} table has class or id {body[at]:#04x}")
        at += size_at(at)
    if at != len(body) or not body:
        raise _Malformed(f"JPEG {what} tables do not fill their segment")


# --- GIF -----------------------------------------------------------------------------------


def _gif(data: bytes) -> Picture:
    width, height, flags = struct.unpack_from("<HHB", data, 6)
    at = 13 + _colour_table(flags)
    frames = parts = 0
    while True:
        parts = _count("GIF", parts)
        if at >= len(data):
            raise _Malformed("GIF has no trailer: the file is cut short")
        block = data[at]
        if block == 0x3B:
            break
        if block == 0x2C:
            at = _gif_image(data, at, width, height, has_table=bool(flags & 0x80))
            frames += 1
        elif block == 0x21:
            at = _gif_extension(data, at)
        else:
            raise _Malformed(f"GIF has a byte {block:#04x} at byte {at} that starts no block")
    if at + 1 != len(data):
        raise _Malformed(f"GIF has {len(data) - at - 1} bytes after its trailer")
    if not frames:
        raise _Malformed("GIF holds no image")
    return _check_size("image/gif", width, height, frames=frames)


def _colour_table(flags: int) -> int:
    return 3 << ((flags & 0x07) + 1) if flags & 0x80 else 0


def _gif_image(data: bytes, at: int, width: int, height: int, *, has_table: bool) -> int:
    left, top, w, h, flags = struct.unpack_from("<HHHHB", data, at + 1)
    if not w or not h or left + w > width or top + h > height:
        raise _Malformed(f"GIF frame {w}x{h} at {left},{top} is not inside its {width}x{height}")
    if not has_table and not flags & 0x80:
        raise _Malformed(f"GIF frame at byte {at} has no colour table")
    at += 10 + _colour_table(flags)
    if not 2 <= data[at] <= 8:
        raise _Malformed(f"GIF frame at byte {at} has LZW code size {data[at]}, not 2 to 8")
    at, size = _gif_sub_blocks(data, at + 1)
    if not size:
        raise _Malformed(f"GIF frame before byte {at} has no image data")
    return at


def _gif_extension(data: bytes, at: int) -> int:
    label = data[at + 1]
    if label == 0xF9 and (data[at + 2] != 4 or data[at + 7] != 0):
        raise _Malformed(f"GIF graphic control extension at byte {at} is not 4 bytes")
    return _gif_sub_blocks(data, at + 2)[0]


def _gif_sub_blocks(data: bytes, at: int) -> tuple[int, int]:
    """Past a run of data sub-blocks and its zero terminator; also the bytes they hold."""
    total = 0
    while (size := data[at]) != 0:
        at += 1 + size
        total += size
        if at >= len(data):
            raise _Malformed("GIF data blocks run past the end of the file")
    return at + 1, total


# --- WebP ----------------------------------------------------------------------------------


def _riff_chunks(data: bytes, at: int, end: int) -> Iterator[_Chunk]:
    view = memoryview(data)
    parts = 0
    while at < end:
        parts = _count("WebP", parts)
        if end - at < 8:
            raise _Malformed(f"WebP has {end - at} stray bytes at byte {at}, not a chunk")
        kind, size = struct.unpack_from("<4sI", data, at)
        if not all(0x20 <= byte < 0x7F for byte in kind):
            raise _Malformed(f"WebP has bytes at byte {at} that are not a chunk (garbage)")
        stop = at + 8 + size
        if stop + (size & 1) > end:
            raise _Malformed(f"WebP chunk {kind.decode()} at byte {at} runs past its container")
        yield _Chunk(kind, at, view[at + 8 : stop])
        at = stop + (size & 1)


def _webp(data: bytes) -> Picture:
    (size,) = struct.unpack_from("<I", data, 4)
    if size + 8 != len(data):
        raise _Malformed(f"WebP's RIFF header says {size + 8} bytes; the file has {len(data)}")
    chunks = list(_riff_chunks(data, 12, len(data)))
    if not chunks:
        raise _Malformed("WebP holds no chunk")
    if chunks[0].kind == b"VP8X":
        return _webp_extended(data, chunks)
    if len(chunks) != 1:
        raise _Malformed("WebP of the simple format holds more than its one image chunk")
    width, height = _bitstream(chunks[0])
    return _check_size("image/webp", width, height)


def _bitstream(chunk: _Chunk) -> tuple[int, int]:
    """The width and height of a VP8 (lossy) or VP8L (lossless) image chunk."""
    body = chunk.body
    if chunk.kind == b"VP8 ":
        (tag,) = struct.unpack_from("<I", body)
        tag &= 0xFFFFFF
        if tag & 1 or (tag >> 1) & 7 > 3 or not tag & 0x10 or tag >> 5 > len(body) - 10:
            raise _Malformed("WebP VP8 image is not a shown key frame that fits its chunk")
        if bytes(body[3:6]) != b"\x9d\x01\x2a":
            raise _Malformed("WebP VP8 image has no start code")
        width, height = struct.unpack_from("<HH", body, 6)
        return width & 0x3FFF, height & 0x3FFF
    if chunk.kind == b"VP8L":
        signature, bits = struct.unpack_from("<BI", body)
        if signature != 0x2F or bits >> 29:
            raise _Malformed("WebP VP8L image has a bad signature or version")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    raise _Malformed(f"WebP chunk {chunk.name} at byte {chunk.at} is not an image")


def _webp_extended(data: bytes, chunks: list[_Chunk]) -> Picture:
    header = chunks[0].body
    if len(header) != 10:
        raise _Malformed("WebP VP8X header chunk is not 10 bytes")
    width = 1 + int.from_bytes(header[4:7], "little")
    height = 1 + int.from_bytes(header[7:10], "little")
    _check_size("image/webp", width, height)
    kinds = [c.kind for c in chunks[1:]]
    if header[0] & 0x02:  # animation
        frames = [c for c in chunks if c.kind == b"ANMF"]
        if b"ANIM" not in kinds or not frames or b"VP8 " in kinds or b"VP8L" in kinds:
            raise _Malformed("animated WebP needs an ANIM chunk and ANMF frames only")
        for frame in frames:
            _webp_frame(data, frame, width, height)
        return _check_size("image/webp", width, height, frames=len(frames))
    images = [c for c in chunks if c.kind in (b"VP8 ", b"VP8L")]
    if len(images) != 1 or b"ANMF" in kinds:
        raise _Malformed("still WebP must hold exactly one image chunk")
    if _bitstream(images[0]) != (width, height):
        raise _Malformed(f"WebP image chunk is not the {width}x{height} of its canvas")
    return Picture("image/webp", width, height)


def _webp_frame(data: bytes, frame: _Chunk, width: int, height: int) -> None:
    body = frame.body
    if len(body) < 16:
        raise _Malformed(f"WebP frame at byte {frame.at} is too short")
    left, top, w, h = (int.from_bytes(body[i : i + 3], "little") for i in range(0, 12, 3))
    left, top, w, h = left * 2, top * 2, w + 1, h + 1
    if left + w > width or top + h > height:
        raise _Malformed(f"WebP frame at byte {frame.at} is not inside its {width}x{height}")
    start = frame.at + 8 + 16
    inner = [c for c in _riff_chunks(data, start, frame.at + 8 + len(body)) if c.kind != b"ALPH"]
    if len(inner) != 1 or _bitstream(inner[0]) != (w, h):
        raise _Malformed(f"WebP frame at byte {frame.at} does not hold one {w}x{h} image")


def _png_start(data: bytes) -> bool:
    return data.startswith(_PNG_SIGNATURE)


def _jpeg_start(data: bytes) -> bool:
    return data.startswith(b"\xff\xd8\xff")


def _gif_start(data: bytes) -> bool:
    return data[:6] in (b"GIF87a", b"GIF89a")


def _webp_start(data: bytes) -> bool:
    return data[:4] == b"RIFF" and data[8:12] == b"WEBP"


_FORMATS = (
    ("image/png", _png_start, _png),
    ("image/jpeg", _jpeg_start, _jpeg),
    ("image/gif", _gif_start, _gif),
    ("image/webp", _webp_start, _webp),
)
