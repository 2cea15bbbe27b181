"""S3Workspace: the workspace in any S3-compatible object store (aiobotocore).

The parts, each in a module of its own: ``_s3_client`` (the bucket's objects, the
conditional-write probe), ``_s3_layout`` (the keys and what a LIST shows), ``_s3_log``
(the segmented context log), ``_s3_index`` (the search index and its catch-up). This
class composes them into the item store (tool results, data, state, purge) and the
blob store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from ._blobs import check_digest
from ._grep import Deadline
from ._names import CONTEXT_FILE, ItemPath, decode_key, is_capped, tool_file
from ._s3_client import S3Objects, gather
from ._s3_index import S3SearchIndex
from ._s3_layout import INDEX, Listed, by_session, index_key, is_data_name, layout
from ._s3_log import ContextLog
from ._search import RawHit, SearchableWorkspace

__all__ = ["S3Workspace"]

_STATE = "state.json"
_ID_FILE = "session_id"


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
        self._objects = S3Objects(bucket, self.prefix, endpoint_url, max_concurrency, client_kwargs)
        self._search_index = S3SearchIndex(self._objects)
        self._log = ContextLog(self._objects, on_segment=self._search_index.segment_stored)
        self._ids_written: set[str] = set()

    def __repr__(self) -> str:
        return f"S3Workspace(bucket={self.bucket!r}, prefix={self.prefix!r})"

    # -- lifecycle -------------------------------------------------------------------------

    async def initialize(self) -> None:
        """Connect, check that the bucket exists and that the server honours conditional
        writes (``If-None-Match``), without which concurrent writers could overwrite."""
        await self._objects.connect()
        try:
            await self._objects.find_bucket()
            await self._objects.check_conditional_writes()
            await self._search_index.open()
        except BaseException:
            await self.close()
            raise
        self._initialized = True

    async def close(self) -> None:
        """Close the client and remove the search index."""
        self._initialized = False
        await self._objects.close()
        await self._search_index.close()

    # -- writing ---------------------------------------------------------------------------

    async def _append_context(self, skey: str, session_id: str, payload: bytes) -> None:
        await self._note_id(skey, session_id)
        await self._log.append(skey, payload)

    async def _note_id(self, skey: str, session_id: str) -> None:
        """Keep the id of a session whose key lost part of it to the length cap."""
        if is_capped(skey) and skey not in self._ids_written:
            raw = session_id.encode("utf-8", "surrogatepass")
            await self._objects.put(f"sessions/{skey}/{_ID_FILE}", raw, create=True)
            self._ids_written.add(skey)

    async def _put_tool_result(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        await self._note_id(skey, session_id)
        name = tool_file(tkey)
        while await self._objects.put(f"sessions/{skey}/{name}", body, create=True) is None:
            name = tool_file(tkey, unique=True)
        await self._search_index.tool_stored(skey, name, body)  # once stored
        return name

    async def _put_data(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        await self._note_id(skey, session_id)
        # The references first: a purge that sees none may delete the data, and re-checks
        # them after deleting (see _collect), so the object is there whenever one exists.
        await self._objects.put(f"sessions/{skey}/data/{name}", b"")
        await self._objects.put(f"data-refs/{name}/{skey}", b"")
        if await self._objects.exists(f"data/{name}") is None:
            await self._objects.put(f"data/{name}", payload)

    async def _save_state(self, skey: str, session_id: str, state: bytes) -> None:
        await self._note_id(skey, session_id)
        await self._objects.put(f"sessions/{skey}/{_STATE}", state)

    # -- reading ---------------------------------------------------------------------------

    async def _get(self, item: ItemPath) -> bytes | None:
        if item.kind == "context":
            return await self._log.read(item.session_key or "")
        got = await self._objects.get(item.rel)
        return None if got is None else got[0]

    async def _load_state(self, skey: str) -> bytes | None:
        got = await self._objects.get(f"sessions/{skey}/{_STATE}")
        return None if got is None else got[0]

    async def _session_id(self, skey: str) -> str:
        if is_capped(skey):
            got = await self._objects.get(f"sessions/{skey}/{_ID_FILE}")
            if got is not None:
                return got[0].decode("utf-8", "surrogatepass")
        return decode_key(skey)

    async def _sessions(self) -> list[str]:
        keys = await self._objects.list_folders("sessions/")
        return await gather(self._session_id(k) for k in keys)

    async def _items(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        out: list[tuple[ItemPath, int, str | None]] = []
        data_names: list[str] = []
        for key, listed in (await layout(self._objects, skey)).items():
            sid = await self._session_id(key)
            for name, size in listed.tools.items():
                out.append((ItemPath("tool_result", key, name), size, sid))
            data_names.extend(listed.data)
            if log := listed.log():
                out.append((ItemPath("context", key, CONTEXT_FILE), sum(log), sid))
        if skey is None:
            for name, size in await self._objects.list_keys("data/"):
                if is_data_name(name):
                    out.append((ItemPath("data", None, name), size, None))
            return out
        owner = await self._session_id(skey)
        names = [n for n in sorted(set(data_names)) if is_data_name(n)]
        sizes = await gather(self._objects.exists(f"data/{n}") for n in names)
        for name, found in zip(names, sizes, strict=True):
            if found is not None:
                out.append((ItemPath("data", None, name), found, owner))
        return out

    def _text_item_pages(self) -> AsyncIterator[list[tuple[ItemPath, int, str | None]]]:
        return self._text_pages()

    async def _text_pages(self) -> AsyncIterator[list[tuple[ItemPath, int, str | None]]]:
        """Every session's text items, a LIST response at a time (key order is path
        order: one session's keys are contiguous). A session whose keys go on in the next
        response is held back until they are all seen."""
        carry: list[tuple[str, int, str]] = []
        async for page in self._objects.pages("sessions/"):
            listing = carry + page
            last = listing[-1][0].partition("/")[0] if listing else None
            carry = [e for e in listing if e[0].partition("/")[0] == last]
            done = [e for e in listing if e[0].partition("/")[0] != last]
            yield await self._text_items(by_session(done, None))
        yield await self._text_items(by_session(carry, None))

    async def _text_items(
        self, sessions: dict[str, Listed]
    ) -> list[tuple[ItemPath, int, str | None]]:
        out: list[tuple[ItemPath, int, str | None]] = []
        for key, listed in sessions.items():
            sid = await self._session_id(key)
            if log := listed.log():
                out.append((ItemPath("context", key, CONTEXT_FILE), sum(log), sid))
            out.extend(
                (ItemPath("tool_result", key, n), size, sid) for n, size in listed.tools.items()
            )
        return out

    async def _search(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        return await self._search_index.search(terms, skey, limit, deadline, self._session_id)

    # -- purge -----------------------------------------------------------------------------

    async def _purge(self, skey: str) -> None:
        await self._search_index.session_purged(skey)  # before the objects go
        keys = [k for k, _ in await self._objects.list_keys(f"sessions/{skey}/")]
        names = [k[len("data/") :] for k in keys if k.startswith("data/")]
        if f"context/{INDEX}" in keys:
            # First, alone: a search that finds the log's id skips its indexed segments, so
            # the id must not outlive them if the purge fails halfway (see _s3_log).
            await self._objects.delete([index_key(skey)])
        await self._objects.delete(f"sessions/{skey}/{k}" for k in keys)
        self._ids_written.discard(skey)
        if names:
            await self._objects.delete(f"data-refs/{n}/{skey}" for n in names)
            await gather(self._collect(n) for n in names if is_data_name(n))

    async def _collect(self, name: str) -> None:
        """Delete ``data/{name}`` if no session references it any more.

        Without locks: the bytes are kept in hand, and put back if a reference appeared
        while deleting. A writer stores its reference before it checks for the object, so
        either this sees the reference or the writer sees the object gone and stores it.
        """
        if await self._objects.any_under(f"data-refs/{name}/"):
            return
        got = await self._objects.get(f"data/{name}")
        if got is None:
            return
        await self._objects.delete([f"data/{name}"])
        if await self._objects.any_under(f"data-refs/{name}/"):
            await self._objects.put(f"data/{name}", got[0])

    # -- BlobStore -------------------------------------------------------------------------

    async def put_blob(self, digest: str, body: bytes) -> None:
        """Store ``body`` as ``blobs/{digest}`` (once: an existing blob is left as it is)."""
        self._require_init()
        await self._objects.put(f"blobs/{check_digest(digest)}", body, create=True)

    async def get_blob(self, digest: str) -> bytes | None:
        """The body of ``blobs/{digest}``, ``None`` if absent."""
        self._require_init()
        got = await self._objects.get(f"blobs/{check_digest(digest)}")
        return None if got is None else got[0]

    async def delete_blobs(self, digests: Sequence[str]) -> None:
        """Delete ``blobs/{digest}`` for each digest."""
        self._require_init()
        await self._objects.delete(f"blobs/{check_digest(d)}" for d in digests)
