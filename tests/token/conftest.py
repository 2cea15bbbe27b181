"""Fixtures for the token tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["o200k_base", "cl100k_base"])
def encoding(request: pytest.FixtureRequest) -> str:
    return str(request.param)
