"""Each public package exports exactly its curated ``__all__`` (as httpx's test of the same name).

A name counts as existing when the package binds it or its module ``__getattr__`` serves it
(lazy imports; one whose optional extra is missing raises ``ImportError``, not
``AttributeError``). Submodules and the ``typing`` names used for those lazy imports are
not API.
"""

from __future__ import annotations

import importlib
import types
import typing

import pytest

from contextfold import MissingDependencyError

PACKAGES = [
    "contextfold",
    "contextfold.message",
    "contextfold.token",
    "contextfold.model",
    "contextfold.workspace",
    "contextfold.tool",
    "contextfold.context",
    "contextfold.agent",
    "contextfold.middleware",
    "contextfold.replay",
    "contextfold.testing",
    "contextfold.gateway",
    "contextfold.integrations",
    "contextfold.integrations.langchain",
    "contextfold.integrations.openai_agents",
    "contextfold.integrations.pydantic_ai",
    "contextfold.integrations.otel",
]


def _exists(package: types.ModuleType, name: str) -> bool:
    if name in vars(package):
        return True
    lazy = vars(package).get("__getattr__")
    if lazy is None:
        return False
    try:
        lazy(name)
    except AttributeError:
        return False
    except ImportError:  # served lazily; needs an extra that is not installed
        return True
    return True


def _isort_key(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


@pytest.fixture(params=PACKAGES)
def package(request: pytest.FixtureRequest) -> types.ModuleType:
    try:
        return importlib.import_module(request.param)
    except MissingDependencyError as exc:  # an integration whose extra is not installed
        pytest.skip(str(exc))


def test_every_name_in_all_exists(package: types.ModuleType) -> None:
    assert [n for n in package.__all__ if not _exists(package, n)] == []


def test_all_is_sorted_without_duplicates(package: types.ModuleType) -> None:
    assert package.__all__ == sorted(set(package.__all__), key=_isort_key)


def test_every_public_name_is_in_all(package: types.ModuleType) -> None:
    unlisted = [
        name
        for name, value in vars(package).items()
        if not name.startswith("_")
        and name not in package.__all__
        and not (
            isinstance(value, types.ModuleType) and value.__name__.startswith(package.__name__)
        )
        and getattr(typing, name, object()) is not value
    ]
    assert unlisted == []
