"""Image sizes from headers, and the providers' documented image formulas."""

from __future__ import annotations

import base64
import struct

import pytest

from contextfold.message import Base64Source, DataBlock, URLSource
from contextfold.token import (
    anthropic_image_tokens,
    image_size,
    openai_patch_image_tokens,
    openai_tile_image_tokens,
)
from contextfold.token._images import block_image_size


def _png(w: int, h: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", w, h)


def _gif(w: int, h: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", w, h) + b"\x00" * 4


def _jpeg(w: int, h: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    exif = b"\xff\xe1" + struct.pack(">H", 5002) + b"E" * 5000  # a big APP1 before SOF
    sof = b"\xff\xc2" + struct.pack(">HBHHB", 11, 8, h, w, 3) + b"\x00" * 3
    return b"\xff\xd8" + app0 + exif + sof + b"\xff\xd9"


def _webp_vp8x(w: int, h: int) -> bytes:
    body = b"WEBPVP8X" + struct.pack("<I", 10) + b"\x00" * 4
    body += (w - 1).to_bytes(3, "little") + (h - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _webp_vp8l(w: int, h: int) -> bytes:
    bits = (w - 1) | ((h - 1) << 14)
    body = b"WEBPVP8L" + struct.pack("<I", 5) + b"\x2f" + struct.pack("<I", bits)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _webp_vp8(w: int, h: int) -> bytes:
    frame = b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", w, h)
    body = b"WEBPVP8 " + struct.pack("<I", len(frame)) + frame
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize("make", [_png, _gif, _jpeg, _webp_vp8x, _webp_vp8l, _webp_vp8])
def test_header_gives_width_and_height(make: object) -> None:
    assert callable(make)
    assert image_size(make(1234, 567)) == (1234, 567)


def test_unknown_bytes_have_no_size() -> None:
    assert image_size(b"not an image at all") is None
    assert image_size(b"\x89PNG\r\n\x1a\n") is None


def test_jpeg_size_found_after_a_large_exif_segment_in_base64() -> None:
    data = base64.b64encode(_jpeg(800, 600)).decode()
    block = DataBlock(source=Base64Source(media_type="image/jpeg", data=data))
    assert block_image_size(block) == (800, 600)


def test_data_url_image_size_is_read_from_its_header() -> None:
    url = "data:image/gif;base64," + base64.b64encode(_gif(300, 200)).decode()
    assert block_image_size(DataBlock(source=URLSource(url=url))) == (300, 200)


def test_remote_url_image_has_no_known_size() -> None:
    assert block_image_size(DataBlock(source=URLSource(url="https://x.test/a.png"))) is None


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((1024, 1024), 765),  # OpenAI's worked examples
        ((2048, 4096), 1105),
        ((512, 512), 255),
        ((4096, 8192), 1105),
        ((768, 2048), 1445),
        (None, 1445),
    ],
)
def test_openai_tile_formula(size: tuple[int, int] | None, tokens: int) -> None:
    assert openai_tile_image_tokens(size) == tokens


def test_openai_low_detail_is_flat() -> None:
    assert openai_tile_image_tokens((4000, 3000), detail="low") == 85


@pytest.mark.parametrize(("size", "patches"), [((1024, 1024), 1024), ((1800, 2400), 1452)])
def test_openai_patch_formula_matches_the_documented_examples(
    size: tuple[int, int], patches: int
) -> None:
    assert openai_patch_image_tokens(size, multiplier=1.0) == patches


def test_openai_patch_formula_applies_the_model_multiplier() -> None:
    assert openai_patch_image_tokens((1024, 1024), multiplier=1.62) == 1659


@pytest.mark.parametrize(
    ("size", "tokens"),
    [((200, 200), 54), ((1000, 1000), 1334), ((1092, 1092), 1590), ((4000, 4000), 1600)],
)
def test_anthropic_formula_matches_the_documented_table(size: tuple[int, int], tokens: int) -> None:
    assert anthropic_image_tokens(size) == tokens


def test_anthropic_unknown_size_costs_the_maximum() -> None:
    assert anthropic_image_tokens(None) == 1600
