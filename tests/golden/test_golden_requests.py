"""Every request of the golden sessions is what it was before the refactor (issue 25)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .harness import (
    FRAMEWORKS,
    SCENARIOS,
    agent_scenario,
    digest,
    folder_scenario,
    framework_digest,
)

DIGESTS = json.loads((Path(__file__).parent / "digests.json").read_text())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_agent_requests_are_unchanged(name: str, tmp_path: Path) -> None:
    recorded = await agent_scenario(name)
    if digest(recorded) != DIGESTS[name]:
        (tmp_path / f"{name}.json").write_text(json.dumps(recorded, indent=1))
    assert digest(recorded) == DIGESTS[name], f"requests changed; see {tmp_path}"


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_framework_requests_are_unchanged(framework: str, tmp_path: Path) -> None:
    pytest.importorskip(
        {"langchain": "langchain", "pydantic-ai": "pydantic_ai"}.get(framework, "agents")
    )
    recorded = await folder_scenario(framework)
    if framework_digest(recorded) != DIGESTS[framework]:
        (tmp_path / f"{framework}.json").write_text(json.dumps(recorded, indent=1))
    assert framework_digest(recorded) == DIGESTS[framework], f"requests changed; see {tmp_path}"
