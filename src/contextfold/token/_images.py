"""Image sizes from file headers, and the providers' image token formulas.

The header parser reads PNG, JPEG, GIF and WebP dimensions without decoding pixels (no
Pillow). The formulas are the providers' documented ones; when the size is unknown they
return the formula's maximum, so an image is never counted below its true cost.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct

from ..message import Base64Source, DataBlock

__all__ = [
    "ANTHROPIC_MAX_IMAGE_TOKENS",
    "OPENAI_MAX_TILES",
    "anthropic_image_tokens",
    "block_image_size",
    "image_size",
    "openai_patch_image_tokens",
    "openai_tile_image_tokens",
]

OPENAI_MAX_TILES = 8
"""Most 512px tiles a high-detail image can have after scaling (768 x 2048)."""

ANTHROPIC_MAX_IMAGE_TOKENS = 1600
"""Anthropic scales larger images down to about this many tokens (~1.15 megapixels)."""

_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_HEADER_CHARS = 4096  # base64 chars decoded first; enough unless a JPEG has a big EXIF


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from a PNG, JPEG, GIF or WebP header; None if unreadable."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return (w, h) if w and h else None
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        w, h = struct.unpack("<HH", data[6:10])
        return (w, h) if w and h else None
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        w, h = struct.unpack("<HH", data[26:30])
        return (w & 0x3FFF, h & 0x3FFF)
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        (bits,) = struct.unpack("<I", data[21:25])
        return ((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X" and len(data) >= 30:
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return (w, h)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xDA)):  # markers without a length
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if marker in _JPEG_SOF:
            if i + 9 > len(data):
                return None
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return (w, h) if w and h else None
        i += 2 + length
    return None


def _b64_prefix(text: str, chars: int | None) -> bytes:
    text = text if chars is None else text[: chars - chars % 4]
    try:
        return base64.b64decode(text, validate=False)
    except (binascii.Error, ValueError):
        return b""


def _inline_base64(block: DataBlock) -> str | None:
    source = block.source
    if isinstance(source, Base64Source):
        return source.data
    url = source.url
    if url.startswith("data:") and ";base64," in url[:200]:
        return url.split(",", 1)[1]
    return None


def block_image_size(block: DataBlock) -> tuple[int, int] | None:
    """The pixel size of an image block: its ``width``/``height``, else its header."""
    if block.width and block.height:
        return (block.width, block.height)
    data = _inline_base64(block)
    if data is None:
        return None
    size = image_size(_b64_prefix(data, _HEADER_CHARS))
    if size is None and len(data) > _HEADER_CHARS:
        size = image_size(_b64_prefix(data, None))
    return size


def openai_tile_image_tokens(
    size: tuple[int, int] | None,
    *,
    detail: str = "high",
    base: int = 85,
    per_tile: int = 170,
) -> int:
    """OpenAI's tile formula (GPT-4o, GPT-4.1, o-series, GPT-5).

    Low detail costs ``base``. Otherwise the image is scaled down to fit 2048 x 2048, then
    down so its shortest side is at most 768px, and costs ``base + per_tile`` per 512px
    tile. Small images are not scaled up (a 512 x 512 image is one tile). Unknown size:
    the maximum, ``base + 8 * per_tile``. GPT-4o mini uses ``base=2833, per_tile=5667``.
    """
    if detail == "low":
        return base
    if size is None or size[0] <= 0 or size[1] <= 0:
        return base + per_tile * OPENAI_MAX_TILES
    w, h = float(size[0]), float(size[1])
    if max(w, h) > 2048:
        f = 2048 / max(w, h)
        w, h = w * f, h * f
    if min(w, h) > 768:
        f = 768 / min(w, h)
        w, h = w * f, h * f
    tiles = math.ceil(w / 512 - 1e-9) * math.ceil(h / 512 - 1e-9)
    return base + per_tile * tiles


def openai_patch_image_tokens(size: tuple[int, int] | None, *, multiplier: float) -> int:
    """OpenAI's 32px-patch formula (GPT-4.1 mini/nano, GPT-5 mini/nano, o4-mini).

    Patches of 32 x 32 px, at most 1536 (larger images are scaled down to fit), times the
    model's multiplier. Unknown size: 1536 patches.
    """
    if size is None or size[0] <= 0 or size[1] <= 0:
        return math.ceil(1536 * multiplier)
    w, h = float(size[0]), float(size[1])
    patches = math.ceil(w / 32) * math.ceil(h / 32)
    if patches > 1536:
        shrink = math.sqrt(32 * 32 * 1536 / (w * h))
        shrink *= min(
            math.floor(w * shrink / 32) / (w * shrink / 32),
            math.floor(h * shrink / 32) / (h * shrink / 32),
        )
        patches = min(1536, math.ceil(w * shrink / 32) * math.ceil(h * shrink / 32))
    return math.ceil(patches * multiplier)


def anthropic_image_tokens(
    size: tuple[int, int] | None,
    *,
    max_edge: int = 1568,
    max_tokens: int = ANTHROPIC_MAX_IMAGE_TOKENS,
) -> int:
    """Anthropic's formula: ``width * height / 750`` after scaling the long edge to at most
    ``max_edge``, capped at ``max_tokens`` (larger images are scaled down to fit).
    Unknown size: ``max_tokens``."""
    if size is None or size[0] <= 0 or size[1] <= 0:
        return max_tokens
    w, h = float(size[0]), float(size[1])
    if max(w, h) > max_edge:
        f = max_edge / max(w, h)
        w, h = w * f, h * f
    return min(max_tokens, math.ceil(w * h / 750))
