"""A function's arguments model is built once per definition, and never shared by two
functions whose schemas differ (defaults, annotations, docstrings, decorators)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

import pytest

from contextfold.tool import FunctionTool


def _reader(limit: int) -> Callable[..., str]:
    def read(path: str, max_chars: int = limit) -> str:
        """Read a file.

        Args:
            path: Which file.
            max_chars: How much of it.
        """
        return path[:max_chars]

    return read


def _chooser(names: tuple[str, ...]) -> Callable[..., str]:
    kind = Literal[names]  # type: ignore[valid-type]

    def choose(name: kind) -> str:  # type: ignore[valid-type]
        return str(name)

    choose.__annotations__["name"] = kind
    return choose


def test_closures_of_one_definition_share_the_model_and_keep_their_own_schema() -> None:
    first, second = FunctionTool(_reader(100)), FunctionTool(_reader(100))
    assert first._model is second._model
    assert first.parameters == second.parameters
    assert first.parameters is not second.parameters
    first.parameters["properties"]["path"]["description"] = "edited"
    assert second.parameters["properties"]["path"]["description"] == "Which file."
    assert FunctionTool(_reader(100)).parameters["properties"]["path"]["description"] == (
        "Which file."
    )


def test_a_different_default_is_a_different_schema() -> None:
    small, large = FunctionTool(_reader(100)), FunctionTool(_reader(5000))
    assert small.parameters["properties"]["max_chars"]["default"] == 100
    assert large.parameters["properties"]["max_chars"]["default"] == 5000


async def test_a_different_annotation_is_a_different_schema() -> None:
    ab, cd = FunctionTool(_chooser(("a", "b"))), FunctionTool(_chooser(("c", "d")))
    assert ab.parameters["properties"]["name"]["enum"] == ["a", "b"]
    assert cd.parameters["properties"]["name"]["enum"] == ["c", "d"]
    assert await cd(name="c") == "c"
    with pytest.raises(ValueError):
        await cd(name="a")


def _logged(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def test_functions_behind_one_decorator_are_not_confused() -> None:
    # The same wrapper code, name, docstring and annotations (copied by ``wraps``): only
    # the wrapped functions' defaults differ.
    @_logged
    def tool(path: str = "a.txt") -> str:
        return path

    first = FunctionTool(tool)

    @_logged
    def tool(path: str = "b.txt") -> str:  # type: ignore[no-redef]
        return path

    second = FunctionTool(tool)
    assert first.parameters["properties"]["path"]["default"] == "a.txt"
    assert second.parameters["properties"]["path"]["default"] == "b.txt"


def test_a_different_name_or_docstring_is_a_different_tool() -> None:
    def act(x: int) -> int:
        """Do it."""
        return x

    renamed = FunctionTool(act, name="other")
    assert renamed.name == "other"
    assert FunctionTool(act).name == "act"
    act.__doc__ = "Do something else."
    assert FunctionTool(act).description == "Do something else."
