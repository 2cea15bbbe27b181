"""Helpers shared by the provider converters: typed reads with precise errors, data URLs,
tool-argument JSON, hint wrapping."""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from .._exceptions import MessageFormatError
from ._blocks import DataBlock, ToolCallBlock, URLSource
from ._markers import runtime_note

_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


def fail(index: int, field: str, problem: str) -> NoReturn:
    """Raise ``MessageFormatError`` as ``message <index>: <field> <problem>``.

    A negative ``index`` means a request parameter outside the list (e.g. ``system``).
    """
    prefix = f"message {index}: " if index >= 0 else ""
    raise MessageFormatError(f"{prefix}{field} {problem}" if field else prefix + problem)


def copy_wire(value: Any) -> Any:
    """A copy of the dicts and lists of a wire form, their strings and numbers shared.

    A converter remembers each message's wire form and hands out copies, so a caller that
    edits a request in place (a cache breakpoint added to a block) changes only its own.
    """
    kind = type(value)
    if kind is dict:
        out = dict(value)
        for k, v in out.items():
            if type(v) in _CONTAINERS:
                out[k] = copy_wire(v)
        return out
    if kind is list:
        return [copy_wire(v) if type(v) in _CONTAINERS else v for v in value]
    return value


_CONTAINERS = (dict, list)


def json_type(value: object) -> str:
    """The JSON name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def expect_dict(value: object, index: int, field: str) -> dict[str, Any]:
    """``value`` as an object, or a ``MessageFormatError`` naming ``field``."""
    if not isinstance(value, dict):
        fail(index, field, f"must be an object, got {json_type(value)}")
    return value


def expect_str(value: object, index: int, field: str) -> str:
    """``value`` as a string, or a ``MessageFormatError`` naming ``field``."""
    if not isinstance(value, str):
        fail(index, field, f"must be a string, got {json_type(value)}")
    return value


def expect_list(value: object, index: int, field: str) -> list[Any]:
    """``value`` as an array, or a ``MessageFormatError`` naming ``field``."""
    if not isinstance(value, list):
        fail(index, field, f"must be an array, got {json_type(value)}")
    return value


def split_data_url(url: str) -> tuple[str, str] | None:
    """``(media_type, base64 data)`` of a ``data:<type>;base64,<data>`` URL, else None."""
    match = _DATA_URL.fullmatch(url)
    if match is None:
        return None
    return match.group(1), match.group(2)


_IMAGE_EXTENSIONS = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}


def image_media_type(url: str) -> str:
    """The image type a URL's extension names, or ``image/*`` when it names none."""
    path = url.split("?", 1)[0].split("#", 1)[0]
    ext = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    return _IMAGE_EXTENSIONS.get(ext, "image/*")


def data_kind(block: DataBlock) -> str:
    """``image``, ``audio``, ``video`` or ``file``, reading a data URL's own type when the
    source names none."""
    src = block.source
    if isinstance(src, URLSource) and src.media_type is None:
        split = split_data_url(src.url)
        if split is not None:
            major = split[0].split("/", 1)[0]
            return major if major in ("image", "audio", "video") else "file"
    return block.kind


def wrap_hint(hint: str) -> str:
    """A hint as the text the model sees: a runtime note (wrapped in the tag once)."""
    return runtime_note(hint)


def parse_arguments(
    raw: str, *, strict: bool, index: int, field: str
) -> tuple[dict[str, Any], str | None]:
    """Parse tool-call argument text into ``(input, input_error)``.

    ``strict`` (histories) raises on anything but a JSON object; otherwise (a model's
    fresh answer) the error is returned so the agent can reply with an error result.
    An empty string means "no arguments": some servers send it for parameterless tools.
    """
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        problem = f"is not valid JSON: {exc}"
    else:
        if isinstance(value, dict):
            return value, None
        problem = f"must be a JSON object, got {json_type(value)}"
    if strict:
        fail(index, field, problem)
    return {}, f"{field} {problem}"


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` without building an
encoder per call (every new assistant message is counted through it)."""


def dump_arguments(block: ToolCallBlock, *, index: int) -> str:
    """The argument text to send: ``raw_input`` verbatim when it still means ``input``
    (or when the model's text never parsed), else compact JSON of ``input``."""
    raw = block.raw_input
    if raw is not None:
        if block.input_error is not None and not block.input:
            return raw
        if not raw.strip():
            if not block.input:
                return raw
        else:
            try:
                if json.loads(raw) == block.input:
                    return raw
            except ValueError:
                pass
    try:
        return _COMPACT.encode(block.input)
    except (TypeError, ValueError) as exc:
        fail(index, f"tool call {block.id!r} input", f"is not JSON serializable: {exc}")


def as_dict(value: object) -> dict[str, Any]:
    """``value`` when it is a dict, else ``{}`` (for reading our own metadata leniently)."""
    return value if isinstance(value, dict) else {}
