"""What every group of the workspace contract shares: sample data, the protocol
combinations a group needs, and the fixtures that skip a group the instance lacks."""

from __future__ import annotations

import base64
import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol, TypeVar, cast

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ..message import Base64Source, DataBlock, Msg, TextBlock, ToolResultBlock
from ..workspace import DataOffloader, Offloader, SessionStore, WorkspaceReader, WorkspaceSearch

__all__ = [
    "HYPOTHESIS",
    "OTHER_PNG",
    "PNG",
    "PROTOCOLS",
    "SECRET",
    "DataReader",
    "Fixtures",
    "Reader",
    "ReaderStore",
    "Searcher",
    "asyncio_tests",
    "hostile_ids",
    "image",
    "mixed_messages",
    "protocol_methods",
    "require",
    "snapshot",
]


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4).decode()
OTHER_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"other").decode()
SECRET = "TOPSECRET-4f1c"
"""Planted in the ``outside`` directory; no read may ever return it."""


_T = TypeVar("_T")
PROTOCOLS = (Offloader, DataOffloader, WorkspaceReader, WorkspaceSearch, SessionStore)


class Reader(Offloader, WorkspaceReader, Protocol):
    """An offloader whose offloads can be read back."""


class DataReader(Offloader, DataOffloader, WorkspaceReader, Protocol):
    """A reader that also stores data blocks."""


class ReaderStore(Offloader, WorkspaceReader, SessionStore, Protocol):
    """A reader that also keeps session state."""


class Searcher(Offloader, WorkspaceReader, WorkspaceSearch, Protocol):
    """A reader that also ranks what it holds."""


def image(data: str = PNG, media_type: str = "image/png") -> DataBlock:
    """An inline (base64) data block."""
    return DataBlock(source=Base64Source(media_type=media_type, data=data))


def mixed_messages() -> list[Msg]:
    """Text, inline images, and a tool result with an image: everything a log must keep."""
    return [
        Msg("user", [TextBlock(text="look"), image()], "user"),
        Msg("assistant", "a picture of bytes", "assistant"),
        Msg(
            "user",
            [ToolResultBlock(id="c1", name="shot", output=[TextBlock(text="ok"), image()])],
            "user",
        ),
    ]


def snapshot(root: Path | None) -> dict[str, bytes]:
    """Every path under ``root`` with its bytes (``<dir>`` for directories)."""
    if root is None:
        return {}
    return {
        str(p): p.read_bytes() if p.is_file() and not p.is_symlink() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


def protocol_methods(protocol: type) -> list[str]:
    return [n for n, v in vars(protocol).items() if not n.startswith("_") and callable(v)]


def require(workspace: object, *protocols: type) -> None:
    """Skip the test unless ``workspace`` implements every protocol given."""
    missing = [p for p in protocols if not isinstance(workspace, p)]
    if missing:
        names = "; ".join(f"{p.__name__} ({', '.join(protocol_methods(p))})" for p in missing)
        pytest.skip(f"{type(workspace).__name__} does not implement {names}")


def hostile_ids() -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(min_size=1, max_size=300),
        st.sampled_from(
            [
                "..",
                ".",
                "../../etc/passwd",
                "/etc/passwd",
                "a/../../b",
                "\x00",
                "a\x00b",
                "~",
                "%2e%2e",
                "%",
                "x" * 1000,
                "🙂/..",
                ".hidden",
                "a\\..\\b",
                "sessions",
                "tool_result-x.txt",
            ]
        ),
        st.lists(
            st.sampled_from(["..", "/", ".", "a", "\x00", "é", "%", "~", "\\"]),
            min_size=1,
            max_size=40,
        ).map("".join),
    )


HYPOTHESIS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)


def asyncio_tests(cls: type[_T]) -> type[_T]:
    """Mark the class's async tests for pytest-asyncio, so the contract also runs in its
    strict mode (a class-wide mark would warn about the subclasses' sync tests)."""
    for name, test in vars(cls).items():
        inner = getattr(getattr(test, "hypothesis", None), "inner_test", test)
        if name.startswith("test_") and inspect.iscoroutinefunction(inner):
            pytest.mark.asyncio(test)
    return cls


class Fixtures:
    """The fixtures a test class provides; only ``workspace`` must be overridden."""

    @pytest_asyncio.fixture
    async def workspace(self) -> AsyncIterator[object]:
        """A ready instance; override it (return it, or yield it and clean up after)."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the `workspace` fixture: "
            "an async fixture that yields a ready offloader or workspace"
        )
        yield  # pragma: no cover

    @pytest.fixture
    def outside(self) -> Path | None:
        """A directory next to the store that the workspace must never write into.

        Filesystem backends return one: the contract compares it before and after hostile
        ids, and plants a ``secret.txt`` there that no hostile reference may read.
        ``None`` (the default) skips only these checks.
        """
        return None

    @pytest.fixture
    def offloader(self, workspace: object) -> Offloader:
        require(workspace, Offloader)
        return cast(Offloader, workspace)

    @pytest.fixture
    def data_offloader(self, workspace: object) -> DataOffloader:
        require(workspace, DataOffloader)
        return cast(DataOffloader, workspace)

    @pytest.fixture
    def reader(self, workspace: object) -> Reader:
        require(workspace, Offloader, WorkspaceReader)
        return cast(Reader, workspace)

    @pytest.fixture
    def data_reader(self, workspace: object) -> DataReader:
        require(workspace, Offloader, DataOffloader, WorkspaceReader)
        return cast(DataReader, workspace)

    @pytest.fixture
    def store(self, workspace: object) -> SessionStore:
        require(workspace, SessionStore)
        return cast(SessionStore, workspace)

    @pytest.fixture
    def reader_store(self, workspace: object) -> ReaderStore:
        require(workspace, Offloader, WorkspaceReader, SessionStore)
        return cast(ReaderStore, workspace)

    @pytest.fixture
    def searcher(self, workspace: object) -> Searcher:
        require(workspace, Offloader, WorkspaceReader, WorkspaceSearch)
        return cast(Searcher, workspace)
