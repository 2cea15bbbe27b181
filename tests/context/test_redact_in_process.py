"""The shipped redactor's matching of a long text runs in a worker process (issue 28).

In a worker thread it held the event loop's GIL, and so the loop, for 100 to 240 ms at a
time on a loaded machine (``benchmarks/hostile_large_items.py --busy``): the OS stops a
thread that holds the GIL and the loop waits for it. The structure is checked here, not
the timing: no rule runs in this process for a long text (spied on here; the worker
process imports its own copy), and the result is the one call's, byte for byte.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextfold.context import _offload, redact_credentials
from contextfold.context import _redact as redact_module
from contextfold.context._redact_pieces import (
    PIECE,
    redact_messages_off_loop,
    redact_tool_result_off_loop,
)
from contextfold.message import Msg, ToolResultBlock

FILLER = "2026-12-04T05:00:00Z INFO worker-7 request served in 12 ms, status 200, bytes 4096\n"
SECRETS = (
    "export DB_PASSWORD=opensesame42-and-more\n"
    "Authorization: Bearer abcdefgh12345678ZZ\n"
    "token ghp_16C7e42F292c6912E7710c838347Ae178B4a\n"
)


@pytest.fixture
def rule_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of the texts the rules looked through in this process."""
    seen: list[int] = []
    real = redact_module._lower

    def spy(text: str) -> str:
        seen.append(len(text))
        return real(text)

    monkeypatch.setattr(redact_module, "_lower", spy)
    return seen


async def test_a_long_tool_result_is_matched_in_a_worker_process(
    rule_calls: list[int],
) -> None:
    text = FILLER * 4_000 + SECRETS + FILLER * 4_000 + SECRETS + FILLER
    assert len(text) > 2 * PIECE
    block = ToolResultBlock(id="t1", name="bash", output=text)
    done = await redact_tool_result_off_loop(block, redact_credentials)
    rule_calls.clear()  # the expected value is computed here, in one call
    assert done.output == redact_module.redact_credentials(text)
    assert "opensesame42" not in done.text()
    assert "ghp_16C7" not in done.text()
    rule_calls.clear()
    await redact_tool_result_off_loop(block, redact_credentials)
    assert rule_calls == [], "the rules ran over the long text in this process"


async def test_long_messages_are_matched_in_a_worker_process(rule_calls: list[int]) -> None:
    text = FILLER * 4_000 + SECRETS
    msgs = [Msg("user", text, "user"), Msg("user", "short: Bearer abcdefgh12345678ZZ", "user")]
    done = await redact_messages_off_loop(msgs, redact_credentials)
    assert [m.content for m in done] == [redact_credentials(text), "short: Bearer [REDACTED]"]
    rule_calls.clear()
    await redact_messages_off_loop(msgs, redact_credentials)
    assert rule_calls  # the short one is redacted here
    assert max(rule_calls) < PIECE


async def test_the_key_of_a_long_result_is_escaped_in_a_worker_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    escaped: list[int] = []
    real = json.dumps

    def spy(value: Any, *args: Any, **kwargs: Any) -> str:
        if isinstance(value, str):
            escaped.append(len(value))
        return real(value, *args, **kwargs)

    text = 'a "quoted" line\twith ünïcödé\n' * 40_000
    value = ["bash", text]
    want = _offload._digest("result", value)
    monkeypatch.setattr(_offload.json, "dumps", spy)
    got = await _offload._key("result", value)
    monkeypatch.undo()
    assert got == want
    assert escaped == [], "the long string was escaped in this process"
