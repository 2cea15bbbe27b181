"""One bucket and key prefix over aiobotocore: the object primitives of ``S3Workspace``.

Every call goes through one semaphore (``max_concurrency``) and turns client and network
errors into ``WorkspaceError``; keys are workspace-relative (the prefix is added here).
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from .._exceptions import MissingDependencyError, WorkspaceError

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import ObjectIdentifierTypeDef

__all__ = ["OFF_LOOP_BODY", "S3Objects", "gather"]

_T = TypeVar("_T")
_CONFLICT_TRIES = 32
"""Tries of one PUT while the server answers 409 (conflicting writes)."""
LIST_PAGE = 1000
"""Keys per LIST request of :meth:`S3Objects.pages` (S3's most)."""
OFF_LOOP_BODY = 1 << 20
"""A body larger than this is uploaded by botocore's synchronous client in a worker
thread: the asynchronous one hashes it on the event loop to sign it (SHA-256 of the whole
body over plain HTTP) and computes its CRC32 checksum there, ~0.2 s of the loop's thread
for 100 MB, however GIL-free the hashing is."""


class S3Objects:
    """The objects under ``prefix`` in ``bucket``: get, look up, put (conditionally),
    list and delete, on one client opened by :meth:`connect`."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        endpoint_url: str | None,
        max_concurrency: int,
        client_kwargs: dict[str, Any],
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self._client_kwargs = client_kwargs
        self._max = max_concurrency
        self._stack: AsyncExitStack | None = None
        self._client: S3Client | None = None
        self._gate = asyncio.Semaphore(max_concurrency)
        self._sync: Any = None
        """botocore's synchronous client, for large bodies (made on the first)."""
        self._sync_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the client, unless it is open."""
        if self._client is not None:
            return
        try:
            from aiobotocore.config import AioConfig
        except ImportError as exc:
            raise MissingDependencyError("aiobotocore", "s3") from exc
        kwargs = dict(self._client_kwargs)
        kwargs.setdefault("config", AioConfig(max_pool_connections=self._max))
        if self.endpoint_url is not None:
            kwargs["endpoint_url"] = self.endpoint_url
        stack = AsyncExitStack()
        async with self.boundary("connect to", ""):
            client = await stack.enter_async_context(_session().create_client("s3", **kwargs))
        self._stack, self._client = stack, client

    async def close(self) -> None:
        """Close the client."""
        stack, self._stack, self._client = self._stack, None, None
        sync, self._sync = self._sync, None
        if stack is not None:
            await stack.aclose()
        if sync is not None:
            sync.close()

    def _sync_client(self) -> Any:
        """botocore's synchronous client on the same endpoint, credentials and settings
        (in the worker thread that first needs it: making one takes ~0.1 s)."""
        with self._sync_lock:
            if self._sync is None:
                from botocore.config import Config

                kwargs = dict(self._client_kwargs)
                config = Config(max_pool_connections=self._max)
                if kwargs.get("config") is not None:
                    config = config.merge(kwargs["config"])
                kwargs["config"] = config
                if self.endpoint_url is not None:
                    kwargs["endpoint_url"] = self.endpoint_url
                self._sync = _sync_session().create_client("s3", **kwargs)
            return self._sync

    def client(self) -> S3Client:
        """The open client; ``WorkspaceError`` once closed."""
        if self._client is None:
            raise WorkspaceError("S3Workspace is closed; call `await initialize()`")
        return self._client

    async def find_bucket(self) -> None:
        """``WorkspaceError`` unless the bucket exists (and the credentials work)."""
        async with self.boundary("find the bucket", ""):
            await self.client().head_bucket(Bucket=self.bucket)

    async def check_conditional_writes(self) -> None:
        """``WorkspaceError`` unless the server honours ``If-None-Match`` on PUT, without
        which concurrent writers could overwrite one another."""
        key = f".contextfold-probe/{uuid.uuid4().hex}"
        try:
            first = await self.put(key, b"1", create=True)
            second = await self.put(key, b"2", create=True)
        finally:
            await self.delete([key])
        if first is None or second is not None:
            raise WorkspaceError(
                f"the S3 server at {self.endpoint_url or 'the default endpoint'} ignores "
                "If-None-Match on PUT; S3Workspace needs conditional writes so that "
                "concurrent writers never overwrite each other's segments"
            )

    # -- primitives ------------------------------------------------------------------------

    @asynccontextmanager
    async def boundary(self, what: str, key: str) -> AsyncIterator[None]:
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

    async def get(self, key: str) -> tuple[bytes, str] | None:
        """The body and ETag of ``key``, ``None`` if there is no such object."""
        from botocore.exceptions import ClientError

        full = self.prefix + key
        async with self._gate, self.boundary("read", full):
            try:
                got = await self.client().get_object(Bucket=self.bucket, Key=full)
            except ClientError as exc:
                if _code(exc) in ("NoSuchKey", "404"):
                    return None
                raise
            async with got["Body"] as body:
                # A megabyte per read: aiobotocore checks the CRC32 over what each read
                # returns, on the loop's thread (one read of 100 MB: ~0.1 s without a yield).
                pieces = [piece async for piece in body.iter_chunks(OFF_LOOP_BODY)]
                return b"".join(pieces), got["ETag"]

    async def exists(self, key: str) -> int | None:
        """The size of ``key``, ``None`` if there is no such object."""
        from botocore.exceptions import ClientError

        full = self.prefix + key
        async with self._gate, self.boundary("look up", full):
            try:
                got = await self.client().head_object(Bucket=self.bucket, Key=full)
            except ClientError as exc:
                if _code(exc) in ("NoSuchKey", "404", "NotFound"):
                    return None
                raise
            return int(got["ContentLength"])

    async def put(
        self, key: str, body: bytes, *, create: bool = False, if_match: str | None = None
    ) -> str | None:
        """Store ``body`` at ``key``; ``create``: only if absent, ``if_match``: only if the
        ETag is unchanged. The new object's ETag (``""`` if the server sent none),
        ``None`` when that condition failed."""
        from botocore.exceptions import ClientError

        full = self.prefix + key
        for _ in range(_CONFLICT_TRIES):
            async with self._gate, self.boundary("write", full):
                try:
                    ask: dict[str, Any] = {"Bucket": self.bucket, "Key": full, "Body": body}
                    if create:
                        ask["IfNoneMatch"] = "*"
                    elif if_match is not None:
                        ask["IfMatch"] = if_match
                    self.client()  # WorkspaceError once closed
                    if len(body) > OFF_LOOP_BODY:
                        got = await asyncio.to_thread(self._put_sync, ask)
                    else:
                        got = await self.client().put_object(**ask)
                    return str(got.get("ETag", ""))
                except ClientError as exc:
                    code = _code(exc)
                    if code in ("PreconditionFailed", "412") or (if_match and code == "NoSuchKey"):
                        return None
                    if code != "ConditionalRequestConflict":  # 409: retry, as AWS advises
                        raise
            await asyncio.sleep(0.02)
        raise WorkspaceError(f"S3 kept answering 409 (conflicting writes) for {full}")

    def _put_sync(self, ask: dict[str, Any]) -> Any:
        return self._sync_client().put_object(**ask)

    async def list_keys(self, prefix: str) -> list[tuple[str, int]]:
        """``(key below prefix, size)`` of every object under ``prefix``, in key order."""
        return [(key, size) for key, size, _ in await self.list_range(prefix)]

    async def list_range(
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
            async with self._gate, self.boundary("list", full):
                got = await self.client().list_objects_v2(**ask)
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

    async def pages(self, prefix: str) -> AsyncIterator[list[tuple[str, int, str]]]:
        """:meth:`list_range` of ``prefix``, a LIST response (up to :data:`LIST_PAGE`
        keys) at a time, so a caller that stops early never lists the rest."""
        full = self.prefix + prefix
        ask: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full, "MaxKeys": LIST_PAGE}
        while True:
            async with self._gate, self.boundary("list", full):
                got = await self.client().list_objects_v2(**ask)
            contents = got.get("Contents", [])
            yield [(o["Key"][len(full) :], int(o["Size"]), o.get("ETag", "")) for o in contents]
            if not got.get("IsTruncated") or not contents:
                return
            ask["StartAfter"] = contents[-1]["Key"]

    async def any_under(self, prefix: str) -> bool:
        """Whether any object's key starts with ``prefix``."""
        full = self.prefix + prefix
        async with self._gate, self.boundary("list", full):
            got = await self.client().list_objects_v2(Bucket=self.bucket, Prefix=full, MaxKeys=1)
        return bool(got.get("Contents"))

    async def list_folders(self, prefix: str) -> list[str]:
        """The names of the ``/``-delimited folders directly under ``prefix``."""
        full = self.prefix + prefix
        out: list[str] = []
        async with self.boundary("list", full):
            pages = self.client().get_paginator("list_objects_v2")
            async for page in pages.paginate(Bucket=self.bucket, Prefix=full, Delimiter="/"):
                for common in page.get("CommonPrefixes", []):
                    out.append(common["Prefix"][len(full) :].rstrip("/"))
        return out

    async def delete(self, keys: Iterable[str]) -> None:
        """Delete these objects (1,000 a request); absent ones are ignored."""
        full = [self.prefix + k for k in keys]
        for start in range(0, len(full), 1000):
            batch: list[ObjectIdentifierTypeDef] = [{"Key": k} for k in full[start : start + 1000]]
            async with self._gate, self.boundary("delete", batch[0]["Key"]):
                got = await self.client().delete_objects(
                    Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
                )
            errors = got.get("Errors", [])
            if errors:
                raise WorkspaceError(f"S3 could not delete {len(errors)} objects: {errors[:3]}")


async def gather(calls: Iterable[Awaitable[_T]]) -> list[_T]:
    """The results of ``calls``, run concurrently (the requests queue at the gate)."""
    return list(await asyncio.gather(*calls))


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


def _sync_session() -> Any:
    """A botocore session sharing the asynchronous one's loaded service models."""
    import botocore.session

    session = botocore.session.get_session()
    session.register_component("data_loader", _session().get_component("data_loader"))
    return session


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
