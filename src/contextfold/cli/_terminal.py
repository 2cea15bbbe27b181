"""Stored text made safe to print on a terminal.

Offloaded content is whatever a tool printed or a model wrote: an escape sequence in it
would reach the user's terminal through ``contextfold inspect`` (OSC 52 writes the
clipboard, ``ESC[2J`` clears the screen, OSC 0 sets the window title) and a bidi override
reorders what the line appears to say. Every such character is shown as visible text
instead (``\\x1b``, ``\\u202e``); newlines and tabs stay.
"""

from __future__ import annotations

__all__ = ["escape_controls"]

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_TABLE: dict[int, str] = {
    **{c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), *range(0x7F, 0xA0)) if c not in (9, 10)},
    **{c: f"\\u{c:04x}" for c in _BIDI},
}


def escape_controls(text: str) -> str:
    """``text`` with C0 (but newline and tab), DEL, C1 and bidi controls as escapes."""
    return text.translate(_TABLE)
