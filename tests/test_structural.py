"""``implements`` answers as ``isinstance`` does on the library's runtime protocols."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold._structural import implements
from contextfold.context import ExtractiveSummarizer, Summarizer
from contextfold.token import (
    AnthropicEstimator,
    CalibratedCounter,
    OpenAITokenCounter,
    TokenCounter,
    TokenSlicer,
    UsageCalibration,
)
from contextfold.workspace import (
    DataOffloader,
    MemoryWorkspace,
    SessionStore,
    WorkspaceReader,
    WorkspaceSearch,
)

PROTOCOLS: list[Any] = [
    TokenCounter,
    TokenSlicer,
    UsageCalibration,
    Summarizer,
    DataOffloader,
    SessionStore,
    WorkspaceReader,
    WorkspaceSearch,
]
OBJECTS: list[object] = [
    OpenAITokenCounter(),
    CalibratedCounter(AnthropicEstimator()),
    ExtractiveSummarizer(),
    MemoryWorkspace(),
    object(),
    "text",
]


@pytest.mark.parametrize("proto", PROTOCOLS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: type(o).__name__)
def test_same_answer_as_isinstance(obj: object, proto: Any) -> None:
    assert implements(obj, proto) is isinstance(obj, proto)
    assert implements(obj, proto) is isinstance(obj, proto)  # from the cache


def test_members_set_on_the_instance_are_seen() -> None:
    class Half:
        def observe(self, *args: object) -> None: ...

    plain, patched = Half(), Half()
    patched.correction = lambda *a, **k: 0  # type: ignore[attr-defined]
    assert not implements(plain, UsageCalibration)
    assert implements(patched, UsageCalibration)
    assert not implements(Half(), UsageCalibration)
