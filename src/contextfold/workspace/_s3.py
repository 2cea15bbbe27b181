"""S3Workspace: the workspace in any S3-compatible object store (aiobotocore)."""

from __future__ import annotations

import asyncio
import dataclasses
import glob
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .._exceptions import MissingDependencyError, WorkspaceError
from .._logging import logger
from ._blobs import check_digest
from ._grep import Deadline, off_loop
from ._names import CONTEXT_FILE, ItemPath, decode_key, is_capped, parse_ref, tool_file
from ._search import RawHit, SearchableWorkspace
from ._side_index import INDEX_FILE, SideIndex

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import ObjectIdentifierTypeDef

__all__ = ["S3Workspace"]

_T = TypeVar("_T")
_SEGMENT_DIGITS = 12
_INDEX = "index.json"
_STATE = "state.json"
_ID_FILE = "session_id"
_INDEX_DIR = "contextfold-s3-"
"""The search indexes' directories in the temporary directory: ``{_INDEX_DIR}{pid}-...``."""
_ATTEMPTS = 8
"""Tries of one append when a purge of the same session races it."""
_SKIP_MIN = 64
"""The fewest indexed segments of a log a search across sessions skips. A skip costs one
request more (the range before the log is listed apart), which on the tests' server
takes as long as listing about 30 keys: from 64, a skip saves at least twice its cost."""


class S3Workspace(SearchableWorkspace):
    """The workspace in a bucket of any S3-compatible store (AWS S3, MinIO, Ceph, R2, ...).

    Layout under ``prefix``::

        sessions/{session}/context/{n:012d}.jsonl   the context log: one segment per offload,
                                                    numbered 0, 1, 2, ... (S3 has no append)
        sessions/{session}/context/index.json       {"segments": N, "log": id}: segments
                                                    0..N-1 exist, of the log named id
        sessions/{session}/tool_result-{id}.txt     one whole tool result each, written once
        sessions/{session}/state.json               the saved agent state, replaced whole
        sessions/{session}/data/{sha256}.{ext}      empty: the session references this data
        data/{sha256}.{ext}                         images and audio, content-addressed, once
        data-refs/{sha256}.{ext}/{session}          empty: who references it (for purge)
        blobs/{sha256}                              :class:`BlobStore` bodies (see below)

    Everything a session needs is in the bucket, so any process reloads it from there.

    Writers never overwrite one another: a segment or tool result is created with
    ``If-None-Match: *`` (a taken segment number moves the writer to the next one, a
    taken tool-result name gets a ``~<12 hex>`` suffix), and :meth:`initialize` refuses a
    server that ignores that header. An append is acknowledged once its segment is
    stored; the index is then advanced with ``If-Match`` (compare-and-swap). Readers take
    the segments the index names and then probe past it, so a writer that died between
    the two steps loses nothing. A PUT is atomic, so no segment is ever torn.

    Credentials and region come from the usual AWS environment and config (environment
    variables, ``~/.aws``, instance roles); ``client_kwargs`` go to the client
    (``region_name``, ``aws_access_key_id``, ``config``, ...). The bucket must exist.
    References are workspace-relative (``sessions/s1/context.jsonl``). Needs the ``s3``
    extra.

    Search runs on a SQLite FTS5 index of this instance's own (see ``_side_index``), in a
    private temporary directory removed by :meth:`close` (or, if the process is killed,
    by the next instance opened with the same temporary directory). An offload is
    indexed as it is stored; what other workers (or this bucket before the process
    started) stored is indexed by a catch-up before each search: a LIST of what it
    covers (the session's folder, or ``sessions/``) with a GET of each segment or tool
    result the index lacks; :meth:`initialize` reads nothing of the fleet. The LIST
    resumes after the last segment the search index holds of a log (``StartAfter``)
    while ``index.json`` still names the log by the id it had when those segments were
    read, so a catch-up costs what is new, not the log's length (across sessions, for
    logs of ``_SKIP_MIN`` segments or more; tool results, named rather than numbered,
    are listed whole). The id is new whenever ``index.json`` is created again (after a
    purge), and a purge deletes ``index.json`` first: a catch-up that finds the id it
    read knows those segments are still there; one that does not lists the log and
    indexes it afresh. Items the catch-up no longer finds leave the index, and no hit
    names one.

    Also a :class:`BlobStore` (``blobs/{sha256}``), the large-object tier of
    ``PostgresWorkspace(..., blobs=S3Workspace(...))``.
    """

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str | None = None,
        max_concurrency: int = 16,
        **client_kwargs: Any,
    ) -> None:
        if not isinstance(bucket, str) or not bucket or "/" in bucket:
            raise ValueError(f"bucket must be a bucket name, got {bucket!r}")
        if prefix.startswith("/") or ".." in prefix.split("/"):
            raise ValueError(f"prefix must be a relative key prefix, got {prefix!r}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        self.bucket = bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else f"{prefix}/"
        self.endpoint_url = endpoint_url
        self._client_kwargs = client_kwargs
        self._max = max_concurrency
        self._stack: AsyncExitStack | None = None
        self._client: S3Client | None = None
        self._gate = asyncio.Semaphore(max_concurrency)
        self._append_locks: dict[str, asyncio.Lock] = {}
        self._queued: dict[str, list[tuple[bytes, asyncio.Future[None]]]] = {}
        self._ids_written: set[str] = set()
        self._index: SideIndex | None = None
        self._tips: dict[str, _Tip] = {}
        """Session key -> what the index holds of its log, where known."""
        self._log_locks: dict[str, asyncio.Lock] = {}
        self._gaps: dict[str, int] = {}
        """Session folder -> keys listed last time between it and the skipped log before
        it: how many the next listing of that range asks for first."""

    def __repr__(self) -> str:
        return f"S3Workspace(bucket={self.bucket!r}, prefix={self.prefix!r})"

    # -- lifecycle -------------------------------------------------------------------------

    async def initialize(self) -> None:
        """Connect, check that the bucket exists and that the server honours conditional
        writes (``If-None-Match``), without which concurrent writers could overwrite."""
        if self._client is None:
            try:
                from aiobotocore.config import AioConfig
            except ImportError as exc:
                raise MissingDependencyError("aiobotocore", "s3") from exc
            kwargs = dict(self._client_kwargs)
            kwargs.setdefault("config", AioConfig(max_pool_connections=self._max))
            if self.endpoint_url is not None:
                kwargs["endpoint_url"] = self.endpoint_url
            stack = AsyncExitStack()
            async with self._boundary("connect to", ""):
                client = await stack.enter_async_context(_session().create_client("s3", **kwargs))
            self._stack, self._client = stack, client
        try:
            async with self._boundary("find the bucket", ""):
                await self._s3().head_bucket(Bucket=self.bucket)
            await self._check_conditional_writes()
            if self._index is None:
                # Empty until a search: each search first catches up what it covers, so a
                # worker serving one session never lists or reads the rest of the fleet.
                self._index = await asyncio.to_thread(_open_index)
        except BaseException:
            await self.close()
            raise
        self._initialized = True

    async def close(self) -> None:
        """Close the client and remove the search index."""
        stack, self._stack, self._client = self._stack, None, None
        index, self._index = self._index, None
        self._initialized = False
        self._tips.clear()
        self._gaps.clear()
        if stack is not None:
            await stack.aclose()
        if index is not None:
            await asyncio.to_thread(_remove_index, index)

    async def _check_conditional_writes(self) -> None:
        key = f".contextfold-probe/{uuid.uuid4().hex}"
        try:
            first = await self._put(key, b"1", create=True)
            second = await self._put(key, b"2", create=True)
        finally:
            await self._delete([key])
        if first is None or second is not None:
            raise WorkspaceError(
                f"the S3 server at {self.endpoint_url or 'the default endpoint'} ignores "
                "If-None-Match on PUT; S3Workspace needs conditional writes so that "
                "concurrent writers never overwrite each other's segments"
            )

    def _s3(self) -> S3Client:
        if self._client is None:
            raise WorkspaceError("S3Workspace is closed; call `await initialize()`")
        return self._client

    # -- object primitives -----------------------------------------------------------------

    @asynccontextmanager
    async def _boundary(self, what: str, key: str) -> AsyncIterator[None]:
        """Convert client and network errors into ``WorkspaceError``."""
        from aiohttp import ClientError as HTTPError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as exc:
            err = exc.response.get("Error", {})
            raise WorkspaceError(
                f"S3 could not {what} s3://{self.bucket}/{key}: "
                f"{err.get('Code', '?')} {err.get('Message', exc)}"
            ) from exc
        except (BotoCoreError, HTTPError, OSError, TimeoutError) as exc:
            raise WorkspaceError(f"S3 could not {what} s3://{self.bucket}/{key}: {exc}") from exc

    async def _get_obj(self, key: str) -> tuple[bytes, str] | None:
        """The body and ETag of ``key``, ``None`` if there is no such object."""
        from botocore.exceptions import ClientError

        full = self.prefix + key
        async with self._gate, self._boundary("read", full):
            try:
                got = await self._s3().get_object(Bucket=self.bucket, Key=full)
            except ClientError as exc:
                if _code(exc) in ("NoSuchKey", "404"):
                    return None
                raise
            async with got["Body"] as body:
                return await body.read(), got["ETag"]

    async def _exists(self, key: str) -> int | None:
        """The size of ``key``, ``None`` if there is no such object."""
        from botocore.exceptions import ClientError

        full = self.prefix + key
        async with self._gate, self._boundary("look up", full):
            try:
                got = await self._s3().head_object(Bucket=self.bucket, Key=full)
            except ClientError as exc:
                if _code(exc) in ("NoSuchKey", "404", "NotFound"):
                    return None
                raise
            return int(got["ContentLength"])

    async def _put(
        self, key: str, body: bytes, *, create: bool = False, if_match: str | None = None
    ) -> str | None:
        """Store ``body`` at ``key``; ``create``: only if absent, ``if_match``: only if the
        ETag is unchanged. The new object's ETag (``""`` if the server sent none),
        ``None`` when that condition failed."""
        from botocore.exceptions import ClientError

        full = self.prefix + key
        for _ in range(_ATTEMPTS * 4):
            async with self._gate, self._boundary("write", full):
                try:
                    s3 = self._s3()
                    if create:
                        got = await s3.put_object(
                            Bucket=self.bucket, Key=full, Body=body, IfNoneMatch="*"
                        )
                    elif if_match is not None:
                        got = await s3.put_object(
                            Bucket=self.bucket, Key=full, Body=body, IfMatch=if_match
                        )
                    else:
                        got = await s3.put_object(Bucket=self.bucket, Key=full, Body=body)
                    return got.get("ETag", "")
                except ClientError as exc:
                    code = _code(exc)
                    if code in ("PreconditionFailed", "412") or (if_match and code == "NoSuchKey"):
                        return None
                    if code != "ConditionalRequestConflict":  # 409: retry, as AWS advises
                        raise
            await asyncio.sleep(0.02)
        raise WorkspaceError(f"S3 kept answering 409 (conflicting writes) for {full}")

    async def _list(self, prefix: str) -> list[tuple[str, int]]:
        """``(key below prefix, size)`` of every object under ``prefix``, in key order."""
        return [(key, size) for key, size, _ in await self._list_range(prefix)]

    async def _list_range(
        self, prefix: str, *, after: str | None = None, before: str | None = None, first: int = 1000
    ) -> list[tuple[str, int, str]]:
        """``(key below prefix, size, ETag)`` of the objects under ``prefix`` whose
        (workspace-relative) keys lie after ``after`` and before ``before``, in key order.

        S3 lists from a key (``StartAfter``) but not up to one, so a range that ends where
        keys to skip begin asks for ``first`` keys, then twice as many each time (up to a
        page, 1,000): its last request returns a few keys past the end, not a page.
        """
        full = self.prefix + prefix
        out: list[tuple[str, int, str]] = []
        size = max(1, min(first, 1000))
        while True:
            ask: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full, "MaxKeys": size}
            if after is not None:
                ask["StartAfter"] = self.prefix + after
            async with self._gate, self._boundary("list", full):
                got = await self._s3().list_objects_v2(**ask)
            contents = got.get("Contents", [])
            for obj in contents:
                key = obj["Key"][len(self.prefix) :]
                if before is not None and key >= before:
                    return out
                out.append((key[len(prefix) :], int(obj["Size"]), obj.get("ETag", "")))
            if not got.get("IsTruncated") or not contents:
                return out
            after = contents[-1]["Key"][len(self.prefix) :]
            size = min(1000, size * 2)

    async def _any(self, prefix: str) -> bool:
        """Whether any object's key starts with ``prefix``."""
        full = self.prefix + prefix
        async with self._gate, self._boundary("list", full):
            got = await self._s3().list_objects_v2(Bucket=self.bucket, Prefix=full, MaxKeys=1)
        return bool(got.get("Contents"))

    async def _list_dirs(self, prefix: str) -> list[str]:
        """The names of the ``/``-delimited folders directly under ``prefix``."""
        full = self.prefix + prefix
        out: list[str] = []
        async with self._boundary("list", full):
            pages = self._s3().get_paginator("list_objects_v2")
            async for page in pages.paginate(Bucket=self.bucket, Prefix=full, Delimiter="/"):
                for common in page.get("CommonPrefixes", []):
                    out.append(common["Prefix"][len(full) :].rstrip("/"))
        return out

    async def _delete(self, keys: Iterable[str]) -> None:
        full = [self.prefix + k for k in keys]
        for start in range(0, len(full), 1000):
            batch: list[ObjectIdentifierTypeDef] = [{"Key": k} for k in full[start : start + 1000]]
            async with self._gate, self._boundary("delete", batch[0]["Key"]):
                got = await self._s3().delete_objects(
                    Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
                )
            errors = got.get("Errors", [])
            if errors:
                raise WorkspaceError(f"S3 could not delete {len(errors)} objects: {errors[:3]}")

    async def _gather(self, calls: Iterable[Awaitable[_T]]) -> list[_T]:
        return list(await asyncio.gather(*calls))

    # -- the context log -------------------------------------------------------------------

    def _segment(self, skey: str, n: int) -> str:
        return f"sessions/{skey}/context/{n:0{_SEGMENT_DIGITS}d}.jsonl"

    async def _read_index(self, skey: str) -> _Head:
        got = await self._get_obj(f"sessions/{skey}/context/{_INDEX}")
        if got is None:
            return _Head(0, None, None)
        try:
            doc = json.loads(got[0])
            count, log = int(doc["segments"]), doc.get("log")
        except (ValueError, KeyError, TypeError):
            logger.warning("ignoring the unreadable segment index of session key %s", skey)
            count, log = 0, None
        return _Head(count, got[1], log if isinstance(log, str) and log else None)

    async def _append_context(self, skey: str, session_id: str, payload: bytes) -> None:
        # Group commit: appends that wait while one is being written go out together, as
        # one segment (each call's lines stay together; calls were concurrent, so any
        # order between them is an order they could have had).
        await self._note_id(skey, session_id)
        entry = (payload, asyncio.get_running_loop().create_future())
        queue = self._queued.setdefault(skey, [])
        queue.append(entry)
        try:
            async with self._append_locks.setdefault(skey, asyncio.Lock()):
                if entry[1].done():
                    return  # written by the call before
                batch = [e for e in self._queued.pop(skey, []) if not e[1].done()]
                joined = b"".join(p for p, _ in batch)
                try:
                    n, head = await self._append_segment(skey, joined)
                except BaseException:
                    others = [e for e in batch if e is not entry]
                    self._queued[skey] = others + self._queued.get(skey, [])
                    raise
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)
                await self._index_segment(skey, n, joined, head)
        except asyncio.CancelledError:
            if entry in self._queued.get(skey, []):
                self._queued[skey].remove(entry)
            raise

    async def _append_segment(self, skey: str, payload: bytes) -> tuple[int, _Head]:
        """Store ``payload`` as the session's next segment; its number and the version of
        the index that names it."""
        for _ in range(_ATTEMPTS):
            head = await self._read_index(skey)
            n = head.segments
            while await self._put(self._segment(skey, n), payload, create=True) is None:
                n = await self._after(skey, n)  # taken: go past the last one stored
            if (published := await self._publish(skey, n, head)) is not None:
                return n, published
            # A purge removed the segments below ours: take ours back and start over.
            await self._delete([self._segment(skey, n)])
        raise WorkspaceError(f"could not append to session key {skey}: purged while writing")

    async def _after(self, skey: str, n: int) -> int:
        """The number after the last segment stored beyond segment ``n``."""
        stored = await self._list_range(f"sessions/{skey}/context/", after=self._segment(skey, n))
        numbers = [
            int(name[: -len(".jsonl")])
            for name, _, _ in stored
            if name.endswith(".jsonl") and name[:-6].isdigit()
        ]
        return max([n, *numbers]) + 1

    async def _publish(self, skey: str, n: int, head: _Head) -> _Head | None:
        """Advance the index (read as ``head``) past segment ``n``; the version that names
        it, ``None`` if a purge raced the append.

        The index also names its log with a random id, kept by every update (``If-Match``)
        and new whenever the index is created: after a purge, so a reader that finds the
        id it indexed knows the segments it holds are still the log's beginning.
        """
        key = f"sessions/{skey}/context/{_INDEX}"
        while True:
            if head.segments >= n + 1:
                return head  # another writer indexed past us
            # Its id; a new one for a new index, or for an older writer's (without one).
            log = (head.etag and head.log) or uuid.uuid4().hex
            body = json.dumps({"segments": n + 1, "log": log}).encode()
            if head.etag is None:
                if n > 0 and await self._exists(self._segment(skey, n - 1)) is None:
                    return None
                etag = await self._put(key, body, create=True)
            else:
                etag = await self._put(key, body, if_match=head.etag)
            if etag is not None:
                return _Head(n + 1, etag, log)
            head = await self._read_index(skey)

    async def _read_context(self, skey: str) -> bytes | None:
        count = (await self._read_index(skey)).segments
        parts = await self._gather(self._get_obj(self._segment(skey, i)) for i in range(count))
        bodies: list[bytes] = []
        for part in parts:
            if part is None:  # purged meanwhile
                return b"".join(bodies) if bodies else None
            bodies.append(part[0])
        n = count
        while (part := await self._get_obj(self._segment(skey, n))) is not None:
            bodies.append(part[0])  # stored by a writer that died before indexing it
            n += 1
        return b"".join(bodies) if bodies else None

    # -- writing ---------------------------------------------------------------------------

    async def _note_id(self, skey: str, session_id: str) -> None:
        """Keep the id of a session whose key lost part of it to the length cap."""
        if is_capped(skey) and skey not in self._ids_written:
            raw = session_id.encode("utf-8", "surrogatepass")
            await self._put(f"sessions/{skey}/{_ID_FILE}", raw, create=True)
            self._ids_written.add(skey)

    async def _put_tool_result(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        await self._note_id(skey, session_id)
        name = tool_file(tkey)
        while await self._put(f"sessions/{skey}/{name}", body, create=True) is None:
            name = tool_file(tkey, unique=True)
        if self._index is not None:
            await asyncio.to_thread(self._index.tool_stored, skey, name, body)  # once stored
        return name

    async def _put_data(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        await self._note_id(skey, session_id)
        # The references first: a purge that sees none may delete the data, and re-checks
        # them after deleting (see _collect), so the object is there whenever one exists.
        await self._put(f"sessions/{skey}/data/{name}", b"")
        await self._put(f"data-refs/{name}/{skey}", b"")
        if await self._exists(f"data/{name}") is None:
            await self._put(f"data/{name}", payload)

    async def _save_state(self, skey: str, session_id: str, state: bytes) -> None:
        await self._note_id(skey, session_id)
        await self._put(f"sessions/{skey}/{_STATE}", state)

    # -- reading ---------------------------------------------------------------------------

    async def _get(self, item: ItemPath) -> bytes | None:
        if item.kind == "context":
            return await self._read_context(item.session_key or "")
        got = await self._get_obj(item.rel)
        return None if got is None else got[0]

    async def _load_state(self, skey: str) -> bytes | None:
        got = await self._get_obj(f"sessions/{skey}/{_STATE}")
        return None if got is None else got[0]

    async def _session_id(self, skey: str) -> str:
        if is_capped(skey):
            got = await self._get_obj(f"sessions/{skey}/{_ID_FILE}")
            if got is not None:
                return got[0].decode("utf-8", "surrogatepass")
        return decode_key(skey)

    async def _sessions(self) -> list[str]:
        return await self._gather(self._session_id(k) for k in await self._list_dirs("sessions/"))

    async def _layout(self, skey: str | None) -> dict[str, _Listed]:
        """What one LIST shows under ``sessions/`` (or one session's folder), by key."""
        prefix = "sessions/" if skey is None else f"sessions/{skey}/"
        return _by_session(await self._list_range(prefix), skey)

    async def _items(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        out: list[tuple[ItemPath, int, str | None]] = []
        data_names: list[str] = []
        for key, listed in (await self._layout(skey)).items():
            sid = await self._session_id(key)
            for name, size in listed.tools.items():
                out.append((ItemPath("tool_result", key, name), size, sid))
            data_names.extend(listed.data)
            if log := listed.log():
                out.append((ItemPath("context", key, CONTEXT_FILE), sum(log), sid))
        if skey is None:
            for name, size in await self._list("data/"):
                if _is_data_name(name):
                    out.append((ItemPath("data", None, name), size, None))
            return out
        owner = await self._session_id(skey)
        names = [n for n in sorted(set(data_names)) if _is_data_name(n)]
        sizes = await self._gather(self._exists(f"data/{n}") for n in names)
        for name, found in zip(names, sizes, strict=True):
            if found is not None:
                out.append((ItemPath("data", None, name), found, owner))
        return out

    # -- purge -----------------------------------------------------------------------------

    async def _purge(self, skey: str) -> None:
        if self._index is not None:
            async with self._log_lock(skey):
                self._tips.pop(skey, None)
                await asyncio.to_thread(self._index.drop_session, skey)  # before the objects go
        keys = [k for k, _ in await self._list(f"sessions/{skey}/")]
        names = [k[len("data/") :] for k in keys if k.startswith("data/")]
        if f"context/{_INDEX}" in keys:
            # First, alone: a search that finds the log's id skips its indexed segments, so
            # the id must not outlive them if the purge fails halfway (see _publish).
            await self._delete([f"sessions/{skey}/context/{_INDEX}"])
        await self._delete(f"sessions/{skey}/{k}" for k in keys)
        self._ids_written.discard(skey)
        if names:
            await self._delete(f"data-refs/{n}/{skey}" for n in names)
            await self._gather(self._collect(n) for n in names if _is_data_name(n))

    async def _collect(self, name: str) -> None:
        """Delete ``data/{name}`` if no session references it any more.

        Without locks: the bytes are kept in hand, and put back if a reference appeared
        while deleting. A writer stores its reference before it checks for the object, so
        either this sees the reference or the writer sees the object gone and stores it.
        """
        if await self._any(f"data-refs/{name}/"):
            return
        got = await self._get_obj(f"data/{name}")
        if got is None:
            return
        await self._delete([f"data/{name}"])
        if await self._any(f"data-refs/{name}/"):
            await self._put(f"data/{name}", got[0])

    # -- search ----------------------------------------------------------------------------

    def _log_lock(self, skey: str) -> asyncio.Lock:
        """Held while a session's log entries in the index and its tip change together."""
        return self._log_locks.setdefault(skey, asyncio.Lock())

    async def _index_segment(self, skey: str, n: int, payload: bytes, head: _Head) -> None:
        """Index segment ``n``, just stored and named by ``head``, if the index holds
        exactly the segments before it, of the log ``head`` names; else (another writer's
        segments between) the next catch-up indexes them all, in order, since a line's
        offset depends on every segment before it."""
        seen = self._tips.get(skey)
        keep = _Tip(0, 0, head.log, None) if seen is None and n == 0 else seen
        if keep is None or keep.segments != n or keep.log != head.log:
            return
        await self._extend(skey, seen, keep, payload, 1, head.log, head.etag)

    async def _extend(
        self,
        skey: str,
        seen: _Tip | None,
        keep: _Tip | None,
        payload: bytes,
        segments: int,
        log: str | None,
        etag: str | None,
    ) -> None:
        """Index ``payload`` (``segments`` segments) after the part ``keep`` of the log
        the index holds (``None``: drop that part first), and move the tip past it;
        nothing if the tip moved since it was ``seen`` (an offload or another search
        indexed the log meanwhile: the next catch-up goes on from there)."""
        index = self._index
        async with self._log_lock(skey):
            if index is None or self._tips.get(skey) is not seen:
                return
            if keep is None:
                await asyncio.to_thread(index.drop_item, skey, CONTEXT_FILE)
                keep = _Tip(0, 0, log, None)
            if payload and not await asyncio.to_thread(
                index.log_extended, skey, keep.size, payload
            ):
                self._tips.pop(skey, None)  # what the index holds is unknown: drop it later
                return
            tip = _Tip(keep.segments + segments, keep.size + len(payload), log, etag)
            if tip != seen:
                self._tips[skey] = tip

    async def _forget(self, skey: str, name: str | None, seen: _Tip | None) -> None:
        """Drop the session (``name`` None) or its log from the index, and its tip; nothing
        if the tip moved since it was ``seen``, before the listing that found it gone
        (an offload stored it again meanwhile)."""
        index = self._index
        async with self._log_lock(skey):
            if index is None or self._tips.get(skey) is not seen:
                return
            self._tips.pop(skey, None)
            if name is None:
                await asyncio.to_thread(index.drop_session, skey)
            else:
                await asyncio.to_thread(index.drop_item, skey, name)

    async def _catch_up(self, skey: str | None) -> set[tuple[str, str]]:
        """Bring the index to what the bucket holds under ``sessions/`` (or the session
        ``skey``'s folder): index what it lacks, drop what the bucket lost. The
        ``(session key, name)`` of every item found there."""
        index = self._index
        if index is None:
            return set()
        layout, tips = await self._walk(skey)
        held: dict[str, dict[str, int]] = {}
        for (key, name), upto in (await asyncio.to_thread(index.indexed)).items():
            if skey is None or key == skey:
                held.setdefault(key, {})[name] = upto
        for key in held.keys() - layout.keys():  # purged by another worker
            await self._forget(key, None, tips.get(key))
        found = await self._gather(
            self._catch_up_session(index, key, listed, held.get(key, {}))
            for key, listed in layout.items()
        )
        return {(key, name) for key, names in zip(layout, found, strict=True) for name in names}

    async def _walk(self, skey: str | None) -> tuple[dict[str, _Listed], dict[str, _Tip]]:
        """What a listing of ``sessions/`` (or of the session ``skey``'s folder) shows,
        less the segments the index holds of each log it knows the id of (from 1 segment
        when searching a session, from ``_SKIP_MIN`` across sessions): the listing
        resumes after the last of them (``StartAfter``), so a search lists the tail of a
        log, not all of it. The ranges between skipped runs are listed concurrently.
        Also the tips as they were when it began."""
        prefix = "sessions/" if skey is None else f"sessions/{skey}/"
        tips = dict(self._tips)
        least = 1 if skey is not None else _SKIP_MIN
        skips = sorted(
            (f"sessions/{key}/", key, tip.segments)
            for key, tip in tips.items()
            if tip.log is not None and tip.segments >= least and (skey is None or key == skey)
        )
        ranges: list[tuple[str | None, str | None]] = []
        after: str | None = None
        for folder, key, n in skips:
            if folder > prefix:
                ranges.append((after, folder))
            after = self._segment(key, n - 1)
        ranges.append((after, None))
        parts = await self._gather(
            self._list_range(
                prefix, after=a, before=b, first=1000 if b is None else self._gaps.get(b, 31) + 1
            )
            for a, b in ranges
        )
        for (_, before), part in zip(ranges, parts, strict=True):
            if before is not None:
                self._gaps[before] = len(part)
        layout = _by_session((entry for part in parts for entry in part), skey)
        for key, listed in layout.items():
            listed.tip = tips.get(key)
        for _, key, n in skips:
            if key in layout:
                layout[key].start = n
        return layout, tips

    async def _catch_up_session(
        self, index: SideIndex, skey: str, listed: _Listed, held: dict[str, int]
    ) -> set[str]:
        """Bring one session's entries to ``listed``; the names of its items found."""
        log, etag = await self._head(skey, listed)
        if listed.start and (log is None or listed.tip is None or log != listed.tip.log):
            # Not the log whose beginning the index holds (purged): list all of it.
            tip = self._tips.get(skey)
            listed = (await self._layout(skey)).get(skey) or _Listed()
            listed.tip = tip
            log, etag = await self._head(skey, listed)
        present = set(listed.tools)
        for name in held.keys() - present - {CONTEXT_FILE}:  # gone from the bucket (purged)
            await asyncio.to_thread(index.drop_item, skey, name)
        tools = [
            self._catch_up_tool(index, skey, name, name in held)
            for name, size in listed.tools.items()
            if held.get(name) != size
        ]
        log_work = self._catch_up_log(skey, listed, log, etag, held.get(CONTEXT_FILE))
        if tools:
            logged, _ = await asyncio.gather(log_work, self._gather(tools))
        else:
            logged = await log_work  # most searches: no task to schedule
        return present | {CONTEXT_FILE} if logged else present

    async def _head(self, skey: str, listed: _Listed) -> tuple[str | None, str | None]:
        """The id of the log the session's index names, and the index's ETag: from the
        tip when the listing shows the ETag the tip recorded, else read (one GET).
        Read before any segment it covers, so an id is never recorded for segments of
        an earlier log."""
        tip = listed.tip
        if listed.head is None:
            return None, None
        if tip is not None and tip.etag and tip.etag == listed.head:
            return tip.log, tip.etag
        head = await self._read_index(skey)
        return head.log, head.etag

    async def _catch_up_log(
        self, skey: str, listed: _Listed, log: str | None, etag: str | None, upto: int | None
    ) -> bool:
        """Index the segments past what the index holds of the log (all of them when
        that may not be the log's beginning any more), in order; whether there is a log."""
        tip = listed.tip
        sizes = listed.log()
        if not listed.start and not sizes:
            if upto is not None:
                await self._forget(skey, CONTEXT_FILE, tip)
            return False
        keep = tip if listed.start else _kept(tip, listed, log, upto)
        done = 0 if keep is None else keep.segments
        end = listed.start + len(sizes)
        if keep is tip and tip is not None and done == end and (tip.log, tip.etag) == (log, etag):
            return True  # nothing new
        parts = await self._gather(self._get_obj(self._segment(skey, n)) for n in range(done, end))
        bodies: list[bytes] = []
        for part in parts:
            if part is None:  # purged meanwhile
                break
            bodies.append(part[0])
        await self._extend(skey, tip, keep, b"".join(bodies), len(bodies), log, etag)
        return True

    async def _catch_up_tool(self, index: SideIndex, skey: str, name: str, stale: bool) -> None:
        got = await self._get_obj(f"sessions/{skey}/{name}")
        if stale:  # indexed at another size: stored again after a purge
            await asyncio.to_thread(index.drop_item, skey, name)
        if got is not None:
            await asyncio.to_thread(index.tool_stored, skey, name, got[0])

    async def _search(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        index = self._index
        if index is None:
            raise WorkspaceError("S3Workspace is closed; call `await initialize()`")
        try:
            async with asyncio.timeout(deadline.left()):
                present = await self._catch_up(skey)
        except TimeoutError:
            raise deadline.expired() from None
        try:
            hits = await off_loop(
                index.query, terms, skey, limit, time.monotonic() + deadline.left()
            )
        except TimeoutError:
            raise deadline.expired() from None
        keys = {h.skey for h in hits}
        ids = dict(zip(keys, await self._gather(self._session_id(k) for k in keys), strict=True))
        return [
            dataclasses.replace(h, session_id=ids[h.skey])
            for h in hits
            if (h.skey, h.name) in present  # never an item the catch-up did not find
        ]

    # -- BlobStore -------------------------------------------------------------------------

    async def put_blob(self, digest: str, body: bytes) -> None:
        """Store ``body`` as ``blobs/{digest}`` (once: an existing blob is left as it is)."""
        self._require_init()
        await self._put(f"blobs/{check_digest(digest)}", body, create=True)

    async def get_blob(self, digest: str) -> bytes | None:
        """The body of ``blobs/{digest}``, ``None`` if absent."""
        self._require_init()
        got = await self._get_obj(f"blobs/{check_digest(digest)}")
        return None if got is None else got[0]

    async def delete_blobs(self, digests: Sequence[str]) -> None:
        """Delete ``blobs/{digest}`` for each digest."""
        self._require_init()
        await self._delete(f"blobs/{check_digest(d)}" for d in digests)


def _open_index() -> SideIndex:
    """A search index in a new private (0700) temporary directory named after this
    process; first the directories of processes that are gone (killed before
    :meth:`S3Workspace.close`) are removed, since they hold offloaded text."""
    for path in glob.glob(os.path.join(glob.escape(tempfile.gettempdir()), f"{_INDEX_DIR}*")):
        pid = os.path.basename(path)[len(_INDEX_DIR) :].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
    root = tempfile.mkdtemp(prefix=f"{_INDEX_DIR}{os.getpid()}-")
    index = SideIndex(os.path.join(root, INDEX_FILE))
    index.open()
    return index


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive, and not ours to remove
        return True
    return True


def _remove_index(index: SideIndex) -> None:
    index.close()
    shutil.rmtree(os.path.dirname(index.path), ignore_errors=True)


_SESSIONS: dict[int, Any] = {}


def _session() -> Any:
    """One aiobotocore session per process: it caches resolved credentials (refreshed by
    botocore when they expire) and the service model, which takes 0.5 s to load; a forked
    process gets a session of its own that shares the parent's loaded model."""
    from aiobotocore.session import get_session

    pid = os.getpid()
    if pid not in _SESSIONS:
        session = get_session()
        for parent in _SESSIONS.values():
            session.register_component("data_loader", parent.get_component("data_loader"))
        _SESSIONS.clear()
        _SESSIONS[pid] = session
    return _SESSIONS[pid]


@dataclass(frozen=True)
class _Head:
    """One version of a session's ``context/index.json``."""

    segments: int
    """Segments 0 to ``segments - 1`` exist."""
    etag: str | None
    """``None``: there is no index."""
    log: str | None
    """The log's id (see ``_publish``); ``None`` in an older writer's index."""


@dataclass(frozen=True)
class _Tip:
    """What the search index holds of one session's log: its first ``segments`` segments,
    ``size`` bytes, read while its index named the log ``log`` (``None``: unnamed); and
    the ETag of an index version that names it so (a listing that shows that ETag proves
    the id without a GET)."""

    segments: int
    size: int
    log: str | None
    etag: str | None


@dataclass
class _Listed:
    """One session's objects in a listing."""

    segments: dict[int, int] = field(default_factory=dict)
    """Context segment number -> size."""
    tools: dict[str, int] = field(default_factory=dict)
    """Tool-result file name -> size."""
    data: list[str] = field(default_factory=list)
    """Names of the data the session references."""
    head: str | None = None
    """The ETag of ``context/index.json``, if listed."""
    start: int = 0
    """The listing skipped segments 0 to ``start - 1``: the index holds them (``tip``)."""
    tip: _Tip | None = None
    """The session's tip when the listing began."""

    def log(self) -> list[int]:
        """The sizes of the readable log from segment ``start`` up to the first gap."""
        sizes: list[int] = []
        while self.start + len(sizes) in self.segments:
            sizes.append(self.segments[self.start + len(sizes)])
        return sizes


def _by_session(listing: Iterable[tuple[str, int, str]], skey: str | None) -> dict[str, _Listed]:
    """A listing of ``sessions/`` (or of the session ``skey``'s folder), by session key."""
    out: dict[str, _Listed] = {}
    for key, size, etag in listing:
        if skey is not None:
            key = f"{skey}/{key}"
        owner, _, rest = key.partition("/")
        listed = out.setdefault(owner, _Listed())
        if rest.startswith("context/") and rest.endswith(".jsonl"):
            number = rest[len("context/") : -len(".jsonl")]
            if number.isdigit():
                listed.segments[int(number)] = size
        elif rest == f"context/{_INDEX}":
            listed.head = etag
        elif rest.startswith("data/"):
            listed.data.append(rest[len("data/") :])
        elif rest.startswith("tool_result-"):
            try:
                parse_ref(f"sessions/{owner}/{rest}")
            except ValueError:
                continue
            listed.tools[rest] = size
    return out


def _kept(tip: _Tip | None, listed: _Listed, log: str | None, upto: int | None) -> _Tip | None:
    """What the index may keep of a session's log (``upto`` bytes held, ``tip``), now that
    the log is named ``log`` and ``listed`` shows its segments; ``None``: drop it all, it
    may not be the log's beginning any more (purged and written again)."""
    sizes = listed.log()
    if tip is not None and tip.log is not None:  # the id proves it, or disproves it
        whole = tip.log == log and tip.segments <= listed.start + len(sizes)
        return tip if whole else None
    if upto is None:
        return _Tip(0, 0, log, None)
    if log is not None:
        return None  # held while the log had no id: not provably this log's
    # Neither names a log (an older writer's): the sizes must line up, as before ids.
    done = total = 0
    while done < len(sizes) and total < upto:
        total += sizes[done]
        done += 1
    return _Tip(done, total, None, None) if total == upto else None


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _is_data_name(name: str) -> bool:
    try:
        return parse_ref(f"data/{name}").kind == "data"
    except ValueError:
        return False
