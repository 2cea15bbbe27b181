"""Names and references: how untrusted ids become safe path segments.

Session ids and tool-call ids come from users, models and providers, so they are never
joined into paths as they are. Each id is *encoded* (never rejected, except the empty
string) into one path segment:

- the characters ``a-z 0-9 _ - .`` pass through, except a leading ``.``;
- every other character is percent-encoded as the ``%XX`` bytes of its UTF-8 form (so
  ``/``, ``..``, NUL, ``%`` and non-ASCII text can never form a separator or a dot-dir).
  Upper-case letters are encoded too (``Run-A`` is ``%52un-%41``): a name then holds
  upper case only in its ``%XX`` escapes, which are always upper case, so two ids that
  differ only in case never get names that do, and they stay apart on case-insensitive
  filesystems (the macOS and Windows defaults);
- an encoded name longer than 120 characters keeps its first 100 and gets ``~`` plus 16 hex
  digits of the SHA-256 of the id (``~`` never survives encoding, so this cannot collide
  with an encoded name).

A tool-call id stored twice in one session gets ``~`` plus 12 random hex digits the second
time (``tool_result-<key>~1a2b3c4d5e6f.txt``): names never clash, nothing is overwritten.

A *reference* is the workspace-relative path of an item, and the only grammar the readers
accept (anything else raises :class:`~contextfold.UnsafePathError`)::

    sessions/<session key>/context.jsonl
    sessions/<session key>/tool_result-<tool key>.txt
    data/<sha256 hex>.<ext>
"""

from __future__ import annotations

import hashlib
import mimetypes
import re
import uuid
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

import regex

from .._exceptions import UnsafePathError
from ._grep import MAX_PATTERN_LENGTH

__all__ = [
    "CONTEXT_FILE",
    "ItemPath",
    "data_name",
    "decode_key",
    "encode_key",
    "glob_to_regex",
    "is_capped",
    "media_type_of",
    "parse_ref",
    "tool_file",
]

CONTEXT_FILE = "context.jsonl"
_MAX_KEY = 120
_KEEP = 100
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-.")
_KEY_RE = re.compile(r"[A-Za-z0-9_%\-][A-Za-z0-9_%.\-]{0,119}(?:~[0-9a-f]{1,16}){0,2}")
_TOOL_RE = re.compile(r"tool_result-(.+)\.txt")
_DATA_RE = re.compile(r"[0-9a-f]{64}\.[a-z0-9]{1,10}")
_EXT_OVERRIDES = {"image/jpeg": "jpg", "audio/mpeg": "mp3", "audio/wav": "wav", "text/plain": "txt"}


def encode_key(value: str, *, what: str = "id") -> str:
    """The safe path segment for ``value`` (see the module docstring)."""
    if not isinstance(value, str) or not value:
        raise UnsafePathError(f"{what} must be a non-empty string, got {value!r}")
    out: list[str] = []
    for i, ch in enumerate(value):
        if ch in _SAFE and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    key = "".join(out)
    if len(key) > _MAX_KEY:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        head = key[:_KEEP]
        cut = head.rfind("%", _KEEP - 2)  # never split a %XX escape
        key = f"{head if cut == -1 else head[:cut]}~{digest}"
    return key


def decode_key(key: str) -> str:
    """The id a key was encoded from; capped keys (with ``~``) decode to their prefix."""
    return unquote(key.split("~", 1)[0], errors="surrogatepass")


def is_capped(key: str) -> bool:
    """Whether ``key`` lost part of its id to the length cap."""
    return "~" in key


@dataclass(frozen=True)
class ItemPath:
    """A parsed reference: which item, in which session."""

    kind: Literal["context", "tool_result", "data"]
    session_key: str | None
    name: str
    """The file name: ``context.jsonl``, ``tool_result-<key>.txt`` or ``<sha>.<ext>``."""

    @property
    def rel(self) -> str:
        """The canonical workspace-relative reference."""
        if self.kind == "data":
            return f"data/{self.name}"
        return f"sessions/{self.session_key}/{self.name}"


def _check_key(key: str, ref: str) -> None:
    if not _KEY_RE.fullmatch(key) or key in (".", ".."):
        raise UnsafePathError(f"unsafe or malformed name {key!r} in reference {ref!r}")


def parse_ref(ref: str) -> ItemPath:
    """Parse a workspace-relative reference; raise ``UnsafePathError`` on anything else."""
    if not isinstance(ref, str) or not ref or "\x00" in ref or "\\" in ref:
        raise UnsafePathError(f"not a workspace reference: {ref!r}")
    parts = ref.split("/")
    if len(parts) == 2 and parts[0] == "data" and _DATA_RE.fullmatch(parts[1]):
        return ItemPath("data", None, parts[1])
    if len(parts) == 3 and parts[0] == "sessions":
        _check_key(parts[1], ref)
        if parts[2] == CONTEXT_FILE:
            return ItemPath("context", parts[1], parts[2])
        m = _TOOL_RE.fullmatch(parts[2])
        if m:
            _check_key(m.group(1), ref)
            return ItemPath("tool_result", parts[1], parts[2])
    raise UnsafePathError(
        f"not a workspace reference: {ref!r}; expected sessions/<session>/context.jsonl, "
        "sessions/<session>/tool_result-<id>.txt or data/<sha256>.<ext>"
    )


def tool_file(tool_key: str, *, unique: bool = False) -> str:
    """The file name of a tool result; ``unique`` adds ``~<12 hex>``, the suffix used when
    the plain name is taken (``~`` and 12 digits never come out of :func:`encode_key`)."""
    suffix = f"~{uuid.uuid4().hex[:12]}" if unique else ""
    return f"tool_result-{tool_key}{suffix}.txt"


def data_name(payload: bytes, media_type: str) -> str:
    """``<sha256 of the bytes>.<ext>``, the extension derived from the media type."""
    ext = _EXT_OVERRIDES.get(media_type) or (mimetypes.guess_extension(media_type) or "")
    ext = ext.lstrip(".").lower()
    if not re.fullmatch(r"[a-z0-9]{1,10}", ext):
        ext = "bin"
    return f"{hashlib.sha256(payload).hexdigest()}.{ext}"


def media_type_of(name: str) -> str:
    """The media type guessed back from a data file name."""
    ext = name.rsplit(".", 1)[-1]
    for mt, e in _EXT_OVERRIDES.items():
        if e == ext:
            return mt
    return mimetypes.guess_type(f"x.{ext}")[0] or "application/octet-stream"


def glob_to_regex(pattern: str) -> regex.Pattern[str]:
    """Compile a glob over references: ``**`` spans ``/``, ``*`` and ``?`` do not.

    A pattern without ``/`` matches the last path segment (``*.txt``), as in gitignore.
    Wildcards backtrack, so ``"**a" * 20 + "**Z"`` is exponential in the name: match with
    a ``timeout=`` (the ``regex`` engine stops there), as the workspaces and tools do.
    Raises ``ValueError`` for a pattern over ``MAX_PATTERN_LENGTH`` characters.
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(
            f"the glob pattern is {len(pattern):,} characters long, over the limit of "
            f"{MAX_PATTERN_LENGTH:,}"
        )
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                out.append(f"[^{body[1:]}]" if body.startswith("!") else f"[{body}]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    prefix = "" if "/" in pattern else "(?:.*/)?"
    try:
        return regex.compile(prefix + "".join(out), regex.DOTALL, cache_pattern=False)
    except regex.error as exc:  # a character class such as [z-a]
        raise ValueError(f"invalid glob pattern {pattern!r}: {exc}") from exc
