"""The public contract on offloaders written from scratch, as a user would write them.

Neither class below derives from or wraps a shipped workspace. ``S3Offloader`` is the
spec's example (``Offloader`` only) plus a ``SessionStore``, over a dict standing in for
the bucket: the contract runs its Offloader and SessionStore groups and reports the others
skipped. ``DictWorkspace`` adds the reading side (``WorkspaceReader``) in canonical
references, so the round-trip, grep, purge and confinement groups run against it too.
"""

from __future__ import annotations

import fnmatch
import time
from typing import Any
from urllib.parse import quote

import pytest
import regex

from contextfold import WorkspaceError
from contextfold.message import Msg, ToolResultBlock
from contextfold.testing import WorkspaceContract
from contextfold.workspace import GrepMatch, ItemInfo, encode_key, parse_ref


class S3Offloader:
    """The spec's ``S3Offloader``, uploading to a dict; references are ``s3://`` URLs."""

    def __init__(self, bucket: str = "agents") -> None:
        self.bucket = bucket
        self.objects: dict[str, str] = {}
        self.states: dict[str, str] = {}

    async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
        return self._upload(
            session_id, "context.jsonl", "\n".join(m.model_dump_json() for m in msgs)
        )

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str:
        return self._upload(session_id, f"tool_result-{tool_result.id}.txt", tool_result.text())

    def _upload(self, session_id: str, name: str, content: str) -> str:
        # One object per call: a second result with the same call id must not overwrite.
        key = f"sessions/{quote(session_id, safe='')}/{len(self.objects)}-{quote(name)}"
        self.objects[key] = content
        return f"s3://{self.bucket}/{key}"

    async def save_state(self, session_id: str, state_json: str) -> None:
        self.states[session_id] = state_json

    async def load_state(self, session_id: str) -> str | None:
        return self.states.get(session_id)


class TestS3Offloader(WorkspaceContract):
    @pytest.fixture
    async def workspace(self) -> S3Offloader:
        return S3Offloader()


class DictWorkspace:
    """An ``Offloader`` and ``WorkspaceReader`` over a dict of canonical paths (no data store:
    images stay inline in the context log)."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[str, bytes]] = {}  # canonical path -> (session id, body)

    async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
        path = f"sessions/{encode_key(session_id)}/context.jsonl"
        if msgs:
            old = self.items.get(path, (session_id, b""))[1]
            self.items[path] = (
                session_id,
                old + "".join(f"{m.model_dump_json()}\n" for m in msgs).encode(),
            )
        return path

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str:
        stem = f"sessions/{encode_key(session_id)}/tool_result-{encode_key(tool_result.id)}"
        path, n = f"{stem}.txt", 0
        while path in self.items:
            n += 1
            path = f"{stem}~{n:x}.txt"
        self.items[path] = (session_id, tool_result.text().encode())
        return path

    async def list_sessions(self) -> list[str]:
        return sorted({sid for sid, _ in self.items.values()})

    async def list_items(self, session_id: str | None = None) -> list[ItemInfo]:
        return [
            ItemInfo(ref=p, path=p, kind=parse_ref(p).kind, size=len(body), session_id=sid)
            for p, (sid, body) in sorted(self.items.items())
            if session_id in (None, sid)
        ]

    async def read_bytes(self, ref: str) -> bytes:
        found = self.items.get(parse_ref(ref).rel)  # parse_ref refuses anything else
        if found is None:
            raise WorkspaceError(f"no such item: {ref!r}")
        return found[1]

    async def read(self, ref: str, *, offset: int = 0, limit: int | None = None) -> str:
        lines = (await self.read_bytes(ref)).decode().splitlines()
        return "\n".join(lines[offset : None if limit is None else offset + limit])

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
        try:
            compiled = regex.compile(pattern)
        except regex.error as exc:
            raise ValueError(f"bad pattern: {exc}") from exc
        deadline, found = time.monotonic() + time_limit, []
        for item in await self.list_items(session_id):
            if glob and not fnmatch.fnmatch(item.path, glob):
                continue
            lines = (await self.read(item.ref)).splitlines()
            for i, line in enumerate(lines):
                if compiled.search(line, timeout=max(deadline - time.monotonic(), 0.001)):
                    before, after = lines[max(0, i - context) : i], lines[i + 1 : i + 1 + context]
                    found.append(GrepMatch(item.ref, i + 1, line, tuple(before), tuple(after)))
                    if len(found) >= max_results:
                        return found
        return found

    async def purge(self, session_id: str) -> None:
        self.items = {p: v for p, v in self.items.items() if v[0] != session_id}


class TestDictWorkspace(WorkspaceContract):
    @pytest.fixture
    async def workspace(self) -> DictWorkspace:
        return DictWorkspace()


# -- the contract itself: it fails a broken offloader, and runs in strict asyncio mode ------

BROKEN = '''
import pytest_asyncio
from contextfold.testing import WorkspaceContract

class OverwritingOffloader:
    """Keys by tool-call id alone, like a naive upload: a second result replaces the first."""

    def __init__(self):
        self.objects = {}

    async def offload_context(self, session_id, msgs, **kwargs):
        self.objects[f"{session_id}/context"] = msgs
        return f"mem://{session_id}/context"

    async def offload_tool_result(self, session_id, tool_result, **kwargs):
        self.objects[f"{session_id}/{tool_result.id}"] = tool_result
        return f"mem://{session_id}/{tool_result.id}"

class TestOverwriting(WorkspaceContract):
    @pytest_asyncio.fixture
    async def workspace(self):
        yield OverwritingOffloader()
'''


def test_contract_fails_an_offloader_that_overwrites_and_skips_what_it_lacks(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_broken=BROKEN)
    # pytester's own directory has no configuration: pytest-asyncio runs in strict mode.
    passed, skipped, failed = pytester.inline_run(
        "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function"
    ).listoutcomes()
    assert sorted(r.nodeid.split("::")[-1] for r in failed) == [
        "test_concurrent_offloads_from_one_event_loop_all_succeed",
        "test_distinct_tool_results_get_distinct_references",
    ]
    assert len(passed) == 12
    reasons = {str(r.longrepr[2]) for r in skipped if isinstance(r.longrepr, tuple)}
    prefix = "Skipped: OverwritingOffloader does not implement "
    assert all(r.startswith(prefix) for r in reasons)
    missing = {p.split(" (")[0] for r in reasons for p in r.removeprefix(prefix).split("; ")}
    assert missing == {"DataOffloader", "WorkspaceReader", "WorkspaceSearch", "SessionStore"}
