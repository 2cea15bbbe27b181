"""Options are checked when an integration is built, with errors that name the option
(issue 26, point 5: a missing counter, ``counter="gpt-4o"``, ``config={...}`` or
``context_size=-5`` surfaced at the first model call, 16 frames deep inside LangGraph)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from contextfold.context import ContextConfig
from contextfold.token import counter_for_model


def _langchain(**options: Any) -> Any:
    pytest.importorskip("langchain")
    from contextfold.integrations.langchain import ContextfoldMiddleware

    return ContextfoldMiddleware(**options)


def _pydantic_ai(**options: Any) -> Any:
    pytest.importorskip("pydantic_ai")
    from contextfold.integrations.pydantic_ai import ContextfoldHistory

    return ContextfoldHistory(**options)


def _openai_agents(**options: Any) -> Any:
    pytest.importorskip("agents")
    from contextfold.integrations.openai_agents import ContextfoldInputFilter

    return ContextfoldInputFilter(**options)


BUILDERS: dict[str, Callable[..., Any]] = {
    "langchain": _langchain,
    "pydantic-ai": _pydantic_ai,
    "openai-agents": _openai_agents,
}
GOOD: dict[str, Any] = {"counter": counter_for_model("gpt-4o"), "context_size": 8000}
BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"context_size": 8000}, TypeError, "'counter' is required"),
    (
        {**GOOD, "counter": "gpt-4o"},
        TypeError,
        r"counter must be a TokenCounter.*counter_for_model",
    ),
    ({**GOOD, "config": {"trigger_ratio": 0.5}}, TypeError, "config must be a ContextConfig"),
    ({**GOOD, "context_size": -5}, ValueError, "context_size must be a positive"),
    ({**GOOD, "context_size": 0}, ValueError, "context_size must be a positive"),
    ({**GOOD, "context_size": "8k"}, ValueError, "context_size must be a positive"),
    ({**GOOD, "summarizer": "gpt-4o-mini"}, TypeError, "summarizer must be a Summarizer"),
    ({**GOOD, "offloader": "/tmp/ws"}, TypeError, "offloader must be an Offloader"),
    ({**GOOD, "readback": "yes"}, TypeError, "readback must be True or False"),
    ({**GOOD, "contextsize": 8000}, TypeError, "unknown option 'contextsize'"),
    (
        {**GOOD, "config": ContextConfig(trigger_ratio=0.5, context_buffer_ratio=0.6)},
        ValueError,
        "context_buffer_ratio",
    ),
]


@pytest.mark.parametrize("framework", BUILDERS)
@pytest.mark.parametrize(("options", "error", "message"), BAD)
def test_a_bad_option_is_refused_at_construction_naming_it(
    framework: str, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        BUILDERS[framework](**options)


@pytest.mark.parametrize("framework", BUILDERS)
def test_good_options_build(framework: str) -> None:
    assert BUILDERS[framework](**GOOD) is not None
