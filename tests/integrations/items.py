"""What the foreign-item tests of the three integrations share: small real images and
the checks on what a model received."""

from __future__ import annotations

import base64
import struct
import zlib

from contextfold.context import ContextConfig

MAX_IMAGES = 3
CONFIG = ContextConfig(
    trigger_ratio=0.7, reserve_ratio=0.1, tool_result_limit=400, max_image_num=MAX_IMAGES
)
CONTEXT_SIZE = 9000
TURNS = 4
CALLS_PER_TURN = 3


def png(width: int, height: int, shade: int = 0) -> bytes:
    """A real PNG (grey, ``shade``) whose header the image token model reads."""
    row = b"\x00" + bytes([shade % 256]) * width
    raw = zlib.compress(row * height)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")


def png_b64(shade: int) -> str:
    return base64.b64encode(png(64, 48, shade)).decode()


def data_url(shade: int) -> str:
    return f"data:image/png;base64,{png_b64(shade)}"


def log_text(turn: int, call: int) -> str:
    """About 2,000 tokens: over ``tool_result_limit``, so it is cut and offloaded."""
    return "\n".join(
        f"turn{turn} call{call} line {i}: GET /api/items status 200 in {i * 7 % 90} ms"
        for i in range(120)
    )


FIELDS = {
    "task_overview": "Check the services.",
    "current_state": "Logs read.",
    "important_discoveries": "None.",
    "next_steps": "Next service.",
    "context_to_preserve": "ids",
}
"""The summary fields the scripted summarizers answer with."""
