"""What every workspace backend shares: serialization, references, reading and grep.

A backend only stores and fetches bytes (the ``_``-prefixed abstract methods); this class
turns messages into JSON lines, moves inline data out of them, parses references and
answers ``read``/``grep`` the same way for every backend.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Iterator
from itertools import islice
from types import TracebackType
from typing import Any, BinaryIO, Self

from .._exceptions import WorkspaceError
from .._logging import logger
from ..message import (
    Base64Source,
    ContentBlock,
    DataBlock,
    Msg,
    TextBlock,
    ToolResultBlock,
    ToolResultContent,
    URLSource,
)
from ._glob import Listed, first_matches, pattern_session
from ._grep import Searcher, match_glob
from ._grep_process import search_item
from ._lines import read_window
from ._names import (
    CONTEXT_FILE,
    ItemPath,
    data_name,
    encode_key,
    glob_to_regex,
    media_type_of,
    parse_ref,
)
from ._pieces import Chunks, encoded, join_pieces, release, serialized
from ._types import GrepMatch, ItemInfo, ItemPage

__all__ = ["BaseWorkspace"]

_OFF_LOOP_ITEMS = 2_000
"""Listings longer than this are turned into ``ItemInfo`` values in a worker thread."""
_GREP_PAGE = 500
"""Items listed per worker-thread call by a grep over a whole workspace."""
_GREP_SESSIONS = 500
"""Sessions whose items are listed per query by a grep over a whole workspace."""


class BaseWorkspace(ABC):
    """Shared behaviour of the built-in workspaces (``Offloader``, ``DataOffloader``,
    ``WorkspaceReader`` and ``SessionStore`` at once).

    Offloaded messages are stored one ``Msg.model_dump_json()`` per line. Inline
    (base64) data inside them is written once to ``data/<sha256>.<ext>`` (hash of the
    decoded bytes) and replaced in the stored line by ``URLSource(url="data/<sha>.<ext>")``,
    so lines stay small; :meth:`load_context` puts the bytes back.
    """

    _initialized = False

    # -- backend primitives ------------------------------------------------------------

    @abstractmethod
    async def initialize(self) -> None:
        """Create the store (directories, tables); idempotent."""

    async def close(self) -> None:  # noqa: B027 - most backends hold nothing to release
        """Release connections and file handles."""

    @abstractmethod
    async def _append_context(self, skey: str, session_id: str, payload: bytes) -> None:
        """Append whole lines to the session's context log, atomically."""

    @abstractmethod
    async def _put_tool_result(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        """Store a tool result under a fresh name; return the file name actually used."""

    async def _append_context_chunks(self, skey: str, session_id: str, chunks: Chunks) -> None:
        """:meth:`_append_context` of a payload in pieces (``_pieces``): joined, unless
        the backend overrides this to store them as they are."""
        await self._append_context(skey, session_id, await _joined(chunks))

    async def _put_tool_result_chunks(
        self, skey: str, session_id: str, tkey: str, body: Chunks
    ) -> str:
        """:meth:`_put_tool_result` of a body in pieces (as :meth:`_append_context_chunks`)."""
        return await self._put_tool_result(skey, session_id, tkey, await _joined(body))

    @abstractmethod
    async def _put_data(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        """Store a data file once (deduplicated by ``name``) and link it to the session."""

    @abstractmethod
    async def _get(self, item: ItemPath) -> bytes | None:
        """The stored bytes of an item, ``None`` if it does not exist."""

    async def _open(self, item: ItemPath) -> BinaryIO | None:
        """A stream of the item's stored bytes, read in a worker thread (``None`` if it
        does not exist). The default wraps :meth:`_get`; a backend of files streams them."""
        raw = await self._get(item)
        return None if raw is None else io.BytesIO(raw)

    @abstractmethod
    async def _sessions(self) -> list[str]:
        """The ids of all sessions."""

    @abstractmethod
    async def _items(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        """``(item, size, session id)`` for one session's items or all items."""

    @abstractmethod
    async def _purge(self, skey: str) -> None:
        """Delete a session's items, state and data no other session references."""

    @abstractmethod
    async def _save_state(self, skey: str, session_id: str, state: bytes) -> None:
        """Replace the session's state atomically."""

    @abstractmethod
    async def _load_state(self, skey: str) -> bytes | None:
        """The session's state, if any."""

    def _display(self, rel: str) -> str:
        """The reference handed out for a workspace-relative path."""
        return rel

    def _resolve(self, ref: str) -> ItemPath:
        """Parse a reference as handed out, or in its canonical relative form."""
        return parse_ref(ref)

    def _require_init(self) -> None:
        if not self._initialized:
            raise WorkspaceError(
                f"{type(self).__name__} is not initialized; call `await workspace.initialize()`"
            )

    async def __aenter__(self) -> Self:
        await self.initialize()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- Offloader -------------------------------------------------------------------------

    async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
        """Append the messages to the session's ``context.jsonl``; return its reference."""
        self._require_init()
        skey = encode_key(session_id, what="session_id")
        stripped = [await self._strip_msg(skey, session_id, m) for m in msgs]
        if stripped:
            chunks = await serialized(stripped)
            try:
                await self._append_context_chunks(skey, session_id, chunks)
            finally:
                await _released(chunks)
        return self._display(ItemPath("context", skey, CONTEXT_FILE).rel)

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str:
        """Store the whole text of a tool result (data blocks as references); return its
        reference. A tool-call id stored twice gets a unique suffix, never an overwrite."""
        self._require_init()
        skey = encode_key(session_id, what="session_id")
        tkey = encode_key(tool_result.id, what="tool-call id")
        if isinstance(tool_result.output, str):
            text = tool_result.output
        else:
            parts: list[str] = []
            for block in tool_result.output:
                if isinstance(block, TextBlock):
                    parts.append(block.text)
                else:
                    ref = await self._store_data(skey, session_id, block)
                    parts.append(
                        f"[{block.media_type}{f' {block.name}' if block.name else ''}: {ref}]"
                    )
            text = "\n".join(parts)
        body = await encoded(text)
        try:
            name = await self._put_tool_result_chunks(skey, session_id, tkey, body)
        finally:
            await _released(body)
        return self._display(ItemPath("tool_result", skey, name).rel)

    async def offload_data(self, session_id: str, data: DataBlock, **kwargs: Any) -> str:
        """Store one image, audio clip or file under ``data/``; return its reference.

        A URL source other than a base64 ``data:`` URL is already a reference elsewhere
        and is returned unchanged.
        """
        self._require_init()
        skey = encode_key(session_id, what="session_id")
        ref = await self._store_data(skey, session_id, data)
        return self._display(ref) if ref.startswith("data/") else ref

    async def _store_data(self, skey: str, session_id: str, block: DataBlock) -> str:
        payload = _payload(block)
        if payload is None:
            assert isinstance(block.source, URLSource)
            return block.source.url
        name = data_name(payload, block.media_type)
        await self._put_data(skey, session_id, name, payload)
        return f"data/{name}"

    async def _strip_msg(self, skey: str, session_id: str, msg: Msg) -> Msg:
        if isinstance(msg.content, str) or not any(True for _ in msg.iter_data()):
            return msg
        blocks: list[ContentBlock] = []
        for block in msg.content:
            if isinstance(block, DataBlock):
                blocks.append(await self._strip_block(skey, session_id, block))
            elif isinstance(block, ToolResultBlock) and not isinstance(block.output, str):
                out: list[ToolResultContent] = [
                    await self._strip_block(skey, session_id, b) if isinstance(b, DataBlock) else b
                    for b in block.output
                ]
                blocks.append(block.model_copy(update={"output": out}))
            else:
                blocks.append(block)
        return msg.model_copy(update={"content": blocks})

    async def _strip_block(self, skey: str, session_id: str, block: DataBlock) -> DataBlock:
        if not isinstance(block.source, Base64Source):
            return block
        try:
            ref = await self._store_data(skey, session_id, block)
        except ValueError as exc:
            logger.warning("keeping undecodable inline data in the context log: %s", exc)
            return block
        src = URLSource(url=ref, media_type=block.source.media_type)
        return block.model_copy(update={"source": src})

    # -- reading ---------------------------------------------------------------------------

    async def list_sessions(self) -> list[str]:
        """The ids of every session with stored content or state, sorted."""
        self._require_init()
        return sorted(await self._sessions())

    async def list_items(self, session_id: str | None = None) -> list[ItemInfo]:
        """The items of one session (with the data files it references), or of all,
        sorted by path."""
        self._require_init()
        skey = None if session_id is None else encode_key(session_id, what="session_id")
        found = await self._items(skey)
        if len(found) > _OFF_LOOP_ITEMS:  # 100,000 sessions take half a second to list
            return await asyncio.to_thread(self._infos, found)
        return self._infos(found)

    async def glob_items(
        self,
        pattern: str = "**",
        *,
        session_id: str | None = None,
        max_results: int = 200,
        time_limit: float = 5.0,
    ) -> ItemPage:
        """The first ``max_results`` items whose path matches the glob ``pattern`` (see
        ``glob_to_regex``), in path order, and whether more match; of one session with
        ``session_id`` (with the data files it references), else of all.

        Stops at the cap instead of listing everything: the backends that can list lazily
        (Local, Memory) build only the items shown, and a pattern naming one session
        (``sessions/<key>/*``) lists only that session. ``ValueError`` for a pattern that is
        too long; ``TimeoutError`` when matching takes over ``time_limit`` seconds."""
        self._require_init()
        matcher = glob_to_regex(pattern)
        skey = None if session_id is None else encode_key(session_id, what="session_id")
        named = pattern_session(pattern)
        if named == "" or (named is not None and skey is not None and named != skey):
            return ItemPage((), more=False)  # no item of this scope can match
        scope = skey if skey is not None else named
        limit = max(1, max_results)
        stream = self._item_stream() if scope is None else None
        if stream is None:
            found = await self._items(scope)
            stream = sorted(found, key=lambda listed: listed[0].rel)
        return await asyncio.to_thread(
            first_matches, stream, matcher, limit, time_limit, self._display
        )

    def _item_stream(self) -> Iterable[Listed] | None:
        """All items in path order, listed lazily in the thread that iterates them
        (``None``: this backend lists them with :meth:`_items` and they are sorted)."""
        return None

    def _infos(self, found: list[tuple[ItemPath, int, str | None]]) -> list[ItemInfo]:
        infos = [
            ItemInfo(
                ref=self._display(item.rel),
                path=item.rel,
                kind=item.kind,
                size=size,
                session_id=sid,
            )
            for item, size, sid in found
        ]
        return sorted(infos, key=lambda i: i.path)

    async def read_bytes(self, ref: str) -> bytes:
        """The raw stored bytes of an item (a context log without a torn last line)."""
        self._require_init()
        item = self._resolve(ref)
        raw = await self._get(item)
        if raw is None:
            raise WorkspaceError(f"no such item in the workspace: {ref!r}; list them with Glob")
        if item.kind == "context" and raw and not raw.endswith(b"\n"):
            raw = raw[: raw.rfind(b"\n") + 1]  # a write in flight or cut by a crash
        return raw

    async def read_lines(self, ref: str) -> list[str]:
        """The lines of a text item; a data file reads as one line describing it."""
        return await self._window(ref, 0, None)

    async def read(self, ref: str, *, offset: int = 0, limit: int | None = None) -> str:
        """The text of an item, from line ``offset`` (0-based), at most ``limit`` lines.

        Only the window is decoded, in a worker thread: the lines before it are skipped
        undecoded and those after it are not read, so memory follows the window, not the
        item."""
        return "\n".join(await self._window(ref, max(0, offset), limit))

    async def _window(self, ref: str, offset: int, limit: int | None) -> list[str]:
        self._require_init()
        item = self._resolve(ref)
        if item.kind == "data":
            raw = await self.read_bytes(ref)
            lines = [f"[binary data {media_type_of(item.name)}, {len(raw)} bytes]"]
            return lines[offset:] if limit is None else lines[offset : offset + max(0, limit)]
        if limit is not None and limit <= 0:
            await self.read_bytes(ref)  # still an error for a missing item
            return []
        stream = await self._open(item)
        if stream is None:
            raise WorkspaceError(f"no such item in the workspace: {ref!r}; list them with Glob")
        return await asyncio.to_thread(
            read_window, stream, offset, limit, complete_only=item.kind == "context"
        )

    async def load_context(self, session_id: str, *, with_data: bool = True) -> list[Msg]:
        """The offloaded messages of a session, in order; inline data is restored unless
        ``with_data=False``. Lines that do not parse are skipped with a warning."""
        self._require_init()
        skey = encode_key(session_id, what="session_id")
        raw = await self._get(ItemPath("context", skey, CONTEXT_FILE))
        msgs: list[Msg] = []
        for n, line in enumerate((raw or b"").split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                msg = Msg.model_validate_json(line)
            except ValueError:
                logger.warning("skipping unreadable line %d of %s's context log", n, session_id)
                continue
            msgs.append(await self._restore_msg(msg) if with_data else msg)
        return msgs

    async def _restore_msg(self, msg: Msg) -> Msg:
        if isinstance(msg.content, str):
            return msg
        blocks: list[ContentBlock] = []
        for block in msg.content:
            if isinstance(block, DataBlock):
                blocks.append(await self._restore_block(block))
            elif isinstance(block, ToolResultBlock) and not isinstance(block.output, str):
                out: list[ToolResultContent] = [
                    await self._restore_block(b) if isinstance(b, DataBlock) else b
                    for b in block.output
                ]
                blocks.append(block.model_copy(update={"output": out}))
            else:
                blocks.append(block)
        return msg.model_copy(update={"content": blocks})

    async def _restore_block(self, block: DataBlock) -> DataBlock:
        src = block.source
        if not isinstance(src, URLSource) or not src.url.startswith("data/"):
            return block
        try:
            raw = await self._get(parse_ref(src.url))
        except WorkspaceError:
            return block
        if raw is None:
            return block
        mt = src.media_type or media_type_of(src.url)
        b64 = Base64Source(media_type=mt, data=base64.b64encode(raw).decode("ascii"))
        return block.model_copy(update={"source": b64})

    async def grep(
        self,
        pattern: str,
        *,
        session_id: str | None = None,
        glob: str | None = None,
        context: int = 0,
        max_results: int = 100,
        time_limit: float = 5.0,
    ) -> list[GrepMatch]:
        """Lines of text items matching the regex ``pattern``, in path order.

        Raises ``ValueError`` for an invalid pattern and ``TimeoutError`` when matching
        takes longer than ``time_limit`` seconds in total. Matching runs off the event
        loop and stops at the limit (see ``contextfold.workspace._grep``).
        """
        searcher = Searcher(pattern, timeout=time_limit, max_results=max_results, context=context)
        matcher = None if not glob else glob_to_regex(glob)
        async for page in self._grep_pages(session_id):
            items = [i for i in page if i.kind != "data"]
            if matcher is not None:
                left = searcher.deadline.left()
                keep = await match_glob(matcher, [i.path for i in items], time_limit=left)
                items = [i for i, k in zip(items, keep, strict=True) if k]
            for info in items:
                if searcher.remaining <= 0:
                    return searcher.matches
                item = self._resolve(info.ref)
                try:
                    stream = await self._open(item)
                except WorkspaceError:
                    continue  # a file planted in the workspace (a symlink) is not searched
                if stream is None:
                    continue  # purged meanwhile
                await search_item(searcher, info, stream, item.kind == "context")
            if searcher.remaining <= 0:
                break
        return searcher.matches

    async def _grep_pages(self, session_id: str | None) -> AsyncIterator[list[ItemInfo]]:
        """The items a grep looks through, in path order, a page at a time: of a whole
        workspace, a backend that lists lazily (``_item_stream``) gives
        ``_GREP_PAGE`` items per worker-thread call, and one that lists the text items of
        given sessions (``_text_items_of``) those of ``_GREP_SESSIONS`` sessions per
        query, so a grep that stops early (at ``max_results``) never lists the rest;
        listing 114,000 sessions at once built ~400,000 objects (the collector's full
        passes held the loop). Else one listing."""
        stream = self._item_stream() if session_id is None else None
        if stream is not None:
            it = iter(stream)
            while page := await asyncio.to_thread(self._page, it):
                yield page
            return
        pages = self._text_item_pages() if session_id is None else None
        if pages is not None:  # a backend that lists its items a page at a time
            async for found in pages:
                yield self._infos(found)
            return
        if session_id is None and self._lists_sessions_in_pages():
            ids = await self._sessions()
            keys = await asyncio.to_thread(_in_path_order, ids)
            for start in range(0, len(keys), _GREP_SESSIONS):
                found = await self._text_items_of(keys[start : start + _GREP_SESSIONS])
                yield self._infos(found)
            return
        yield await self.list_items(session_id)

    def _text_item_pages(self) -> AsyncIterator[list[Listed]] | None:
        """The text items of every session, a page at a time in path order (``None``:
        this backend has no such listing)."""
        return None

    def _lists_sessions_in_pages(self) -> bool:
        """Whether this backend overrides :meth:`_text_items_of`."""
        return type(self)._text_items_of is not BaseWorkspace._text_items_of

    async def _text_items_of(self, skeys: list[str]) -> list[tuple[ItemPath, int, str | None]]:
        """The context logs and tool results of the sessions ``skeys`` (a backend that can
        list them in one query overrides this; a grep over the whole workspace then asks
        for a page of sessions at a time)."""
        raise NotImplementedError

    def _page(self, it: Iterator[Listed]) -> list[ItemInfo]:
        return [
            ItemInfo(ref=self._display(i.rel), path=i.rel, kind=i.kind, size=n, session_id=sid)
            for i, n, sid in islice(it, _GREP_PAGE)
        ]

    async def purge(self, session_id: str) -> None:
        """Delete everything a session stored: context, tool results, state, and data
        files no other session references."""
        self._require_init()
        await self._purge(encode_key(session_id, what="session_id"))

    # -- session store ---------------------------------------------------------------------

    async def save_state(self, session_id: str, state_json: str) -> None:
        """Replace the session's saved state atomically (must be valid JSON)."""
        self._require_init()
        try:
            json.loads(state_json)
        except ValueError as exc:
            raise WorkspaceError(
                f"state of session {session_id!r} is not valid JSON: {exc}"
            ) from exc
        await self._save_state(
            encode_key(session_id, what="session_id"), session_id, state_json.encode()
        )

    async def load_state(self, session_id: str) -> str | None:
        """The last saved state, or ``None`` if the session has none."""
        self._require_init()
        raw = await self._load_state(encode_key(session_id, what="session_id"))
        return None if raw is None else raw.decode("utf-8")


def _in_path_order(ids: list[str]) -> list[str]:
    """The keys of the sessions ``ids``, in the order of their items' paths
    (``sessions/<key>/...``: a key is followed by ``/``, which sorts after ``-`` and ``.``)."""
    return sorted((encode_key(i, what="session_id") for i in ids), key=lambda k: f"{k}/")


async def _joined(chunks: Chunks) -> bytes:
    if len(chunks) == 1:
        return chunks[0]
    return await asyncio.to_thread(join_pieces, chunks) if len(chunks) > 4 else join_pieces(chunks)


async def _released(chunks: Chunks) -> None:
    """Free a large body's pieces in a worker thread, one at a time (``_pieces.release``)."""
    if len(chunks) > 1:
        await asyncio.to_thread(release, chunks)


def _payload(block: DataBlock) -> bytes | None:
    """The decoded bytes of inline data (base64 source or base64 ``data:`` URL)."""
    src = block.source
    if isinstance(src, Base64Source):
        return src.decode()
    if src.url.startswith("data:") and ";base64," in src.url[:200]:
        try:
            return base64.b64decode(src.url.split(",", 1)[1], validate=True)
        except binascii.Error as exc:
            raise ValueError(f"invalid base64 in data: URL: {exc}") from exc
    return None
