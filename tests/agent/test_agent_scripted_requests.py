"""ScriptedModel's request log: all by default, or only the last ``keep_requests``."""

import pytest

from contextfold.message import Msg
from contextfold.model import ScriptedModel, ScriptedRequest


def ask(text: str) -> list[Msg]:
    return [Msg("user", text, "user")]


async def test_requests_are_all_kept_by_default() -> None:
    model = ScriptedModel(["a", "b", "c"])
    for text in ("1", "2", "3"):
        await model.generate(ask(text))
    assert [r.messages[-1].text for r in model.requests] == ["1", "2", "3"]


async def test_keep_requests_keeps_only_the_most_recent_ones() -> None:
    model = ScriptedModel(["a", "b", "c"], keep_requests=2)
    for text in ("1", "2", "3"):
        await model.generate(ask(text))
    assert [r.messages[-1].text for r in model.requests] == ["2", "3"]
    assert model.request_count == 3


async def test_keep_requests_zero_still_passes_each_request_to_the_script() -> None:
    seen: list[str] = []

    def script(request: ScriptedRequest) -> str:
        seen.append(request.messages[-1].text)
        return "ok"

    model = ScriptedModel(script, keep_requests=0)
    await model.generate(ask("1"))
    await model.generate(ask("2"))
    assert model.requests == []
    assert seen == ["1", "2"]


async def test_exhausted_script_reports_the_total_request_count() -> None:
    model = ScriptedModel(["a"], keep_requests=0)
    await model.generate(ask("1"))
    with pytest.raises(IndexError, match="at request 2"):
        await model.generate(ask("2"))


def test_negative_keep_requests_is_refused() -> None:
    with pytest.raises(ValueError, match="keep_requests"):
        ScriptedModel([], keep_requests=-1)
