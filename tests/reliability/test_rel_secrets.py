"""Secrets: an API key never shows up in logs, offloaded files, events, state or errors.

The real SDK adapters are built with ``tests.model.model_fakes.SECRET`` and pointed at a fake server
that answers with errors quoting the key (as OpenAI's 401 does), 5xx, timeouts and cut
streams. Everything observable is collected and searched for the key and its tail.
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai", reason="needs contextfold[openai]")
pytest.importorskip("anthropic", reason="needs contextfold[anthropic]")

from contextfold._exceptions import ContextfoldError
from contextfold.context import ContextConfig
from contextfold.workspace import LocalWorkspace
from tests.model.model_fakes import SECRET, FakeServer

from .rel_support import filler, make_agent, record

NEEDLES = (SECRET, SECRET[12:])  # the key, and its tail should a prefix be kept


def _texts_of(exc: BaseException) -> list[str]:
    out = ["".join(traceback.format_exception(exc))]
    seen: BaseException | None = exc
    while seen is not None:
        out += [str(seen), repr(seen), str(getattr(seen, "args", ""))]
        seen = seen.__cause__
    return out


@pytest.mark.parametrize("fault", ["401", "500", "timeout", "connect", "cut", "context_length"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_api_key_never_appears_anywhere(
    provider: str, fault: str, stream: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="contextfold")
    fake = FakeServer(provider)  # type: ignore[arg-type]
    model = fake.model(context_size=4000, retries=1)
    ws = LocalWorkspace(tmp_path / "ws")
    await ws.initialize()
    events: list[str] = []
    config = ContextConfig(trigger_ratio=0.5, reserve_ratio=0.1, tool_result_limit=100)
    agent = make_agent(model, offloader=ws, config=config)
    agent.engine.on_event = lambda e: events.append(e.model_dump_json())
    for i in range(3):  # history, a compression with offload
        await agent.reply(filler(i, 80))
    fake.fail("reason", fault, fault)
    fake.fail("summary", fault, fault)
    observed: list[str] = []
    try:
        if stream:
            async for event in agent.stream(filler(9, 80)):
                observed.append(repr(event))
        else:
            observed.append(repr(await agent.reply(filler(9, 80))))
    except ContextfoldError as exc:
        observed += _texts_of(exc)
    await agent.save_session()
    observed += [caplog.text, *events, repr(model), repr(agent), agent.state.model_dump_json()]
    observed += [
        p.read_bytes().decode("utf-8", "replace") for p in ws.workdir.rglob("*") if p.is_file()
    ]
    observed += [str(r.msg) % r.args if r.args else str(r.msg) for r in caplog.records]
    assert fake.requests
    assert any(SECRET in str(h) for h in fake.headers), "the key was never sent"
    if fault == "401":  # the provider's error quoted the key; the exception still came out
        assert any("HTTP 401" in text for text in observed)
    for text in observed:
        for needle in NEEDLES:
            assert needle not in text
    record("secrets", f"key hidden after {fault} [{provider}, {'stream' if stream else 'whole'}]")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_model_repr_does_not_show_the_key(provider: str) -> None:
    model: Any = FakeServer(provider).model()  # type: ignore[arg-type]
    assert SECRET not in repr(model)
    assert SECRET not in str(vars(model).get("extra_params"))
