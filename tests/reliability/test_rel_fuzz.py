"""Hostile input: converters, trajectory loaders, summary parsing and rendering, read-back.

Whatever arrives, the library answers with a result or with its own documented error
(``MessageFormatError`` for bad messages and recordings; ``Error:`` text from the
read-back tools), never another exception, never a hang, never a read outside the
workspace. Example counts scale with ``CONTEXTFOLD_SOAK``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold._exceptions import MessageFormatError, StructuredOutputError
from contextfold.context import DEFAULT_SUMMARY_TEMPLATE, SummarySchema, safe_format
from contextfold.context._summary import render_summary
from contextfold.message import (
    Msg,
    from_anthropic_message,
    from_anthropic_messages,
    from_openai_message,
    from_openai_messages,
    to_anthropic_request,
    to_openai_messages,
)
from contextfold.replay import load_any, load_trajectory
from contextfold.tool import readback_tools
from contextfold.workspace import LocalWorkspace

from .rel_support import SOAK, record, scripted, summary_fields

EXAMPLES = 100 * SOAK
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# -- hostile JSON shaped like provider messages -----------------------------------------

# Finite floats: JSON has no inf/NaN (see the xfail test below for what happens to them).
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = [
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "function",
    "arguments",
    "id",
    "type",
    "text",
    "image_url",
    "url",
    "input",
    "tool_use_id",
    "thinking",
    "signature",
    "source",
    "data",
    "media_type",
    "is_error",
    "reasoning_content",
    "refusal",
    "usage",
]
ROLES = ["system", "user", "assistant", "tool", "developer", "function", "", "bogus"]
TYPES = ["text", "image_url", "input_audio", "file", "tool_use", "tool_result", "thinking",
         "redacted_thinking", "image", "document", "function", "x"]  # fmt: skip
shaped: st.SearchStrategy[Any] = st.recursive(
    scalars | st.sampled_from(ROLES) | st.sampled_from(TYPES),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=6)
    ),
    max_leaves=20,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(ROLES)}, optional={k: shaped for k in KEYS if k != "role"}
    ),
    max_size=6,
)


def _converts_or_format_error(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except MessageFormatError:
        return None


@FUZZ
@given(raw=messages | json_values)
def test_openai_converter_accepts_or_raises_message_format_error(raw: Any) -> None:
    msgs = _converts_or_format_error(from_openai_messages, raw)
    _converts_or_format_error(from_openai_messages, raw, strict=False)
    if isinstance(raw, list) and raw:
        _converts_or_format_error(from_openai_message, raw[0])
    if msgs:
        _round_trip(msgs)
    record("hostile input", "OpenAI message lists (hypothesis)")


@FUZZ
@given(raw=messages | json_values, system=st.none() | shaped)
def test_anthropic_converter_accepts_or_raises_message_format_error(raw: Any, system: Any) -> None:
    msgs = _converts_or_format_error(from_anthropic_messages, raw, system=system)
    if isinstance(raw, list) and raw:
        _converts_or_format_error(from_anthropic_message, raw[0])
    if msgs:
        _round_trip(msgs)
    record("hostile input", "Anthropic message lists (hypothesis)")


def _round_trip(msgs: list[Msg]) -> None:
    """Whatever was accepted converts out again (or says clearly why it cannot)."""
    _converts_or_format_error(to_openai_messages, msgs)
    _converts_or_format_error(to_anthropic_request, msgs)
    for m in msgs:
        assert Msg.model_validate_json(m.model_dump_json()) == m


def test_unknown_non_finite_field_survives_a_json_round_trip() -> None:
    (msg,) = from_openai_messages([{"role": "user", "content": "x", "usage": float("inf")}])
    assert Msg.model_validate_json(msg.model_dump_json()) == msg


# -- recordings ---------------------------------------------------------------------------

recordings = (
    json_values.map(json.dumps)
    | messages.map(json.dumps)
    | st.fixed_dictionaries(
        {"info": shaped, "messages": messages | json_values},
        optional={
            "trajectory_format": st.sampled_from(["mini-swe-agent-1", "x"]),
            "instance_id": shaped,
        },
    ).map(json.dumps)
    | st.binary(max_size=200).map(lambda b: b.decode("latin-1"))
)


@FUZZ
@given(text=recordings, suffix=st.sampled_from([".json", ".traj.json", ".jsonl"]))
def test_trajectory_loaders_accept_or_raise_message_format_error(
    text: str, suffix: str, tmp_path: Path
) -> None:
    path = tmp_path / f"rec{suffix}"
    path.write_text(text, encoding="utf-8")
    for loader in (load_any, load_trajectory):
        with contextlib.suppress(MessageFormatError):
            loader(path)
    record("hostile input", "recordings (hypothesis)")


# -- summary rendering and structured output --------------------------------------------

FIELDS = list(SummarySchema.model_fields)
templates = st.lists(
    st.sampled_from(["{", "}", "{{", "}}", "{0}", "{!r}", "{:>99999}", "{task_overview.__class__}",
                     "{task_overview[0]}", "{__init__}", "{current_state!s}", "%s", "\\", "\x00"])
    | st.sampled_from([f"{{{f}}}" for f in FIELDS])
    | st.text(max_size=10),
    max_size=12,
).map("".join)  # fmt: skip
field_values = st.dictionaries(
    st.sampled_from([*FIELDS, "__class__", "0", "extra"]),
    json_values | st.text(alphabet=string.printable + "{}", max_size=50),
    max_size=7,
)


@FUZZ
@given(template=templates, fields=field_values)
def test_summary_rendering_never_raises_or_evaluates_fields(
    template: str, fields: dict[str, Any]
) -> None:
    out = render_summary(template, fields)
    assert isinstance(out, str)
    assert "<class" not in out or "<class" in template + json.dumps(fields, default=str)
    assert (
        len(out)
        <= len(template)
        + sum(len(json.dumps(v, indent=1)) + 40 * (len(json.dumps(v)) + 1) for v in fields.values())
        + 1
    )
    assert safe_format(template, {}) == safe_format(template, {})
    record("hostile input", "summary templates and fields (hypothesis)")


@settings(max_examples=40 * SOAK, deadline=None)
@given(answers=st.lists(st.text(max_size=60) | field_values, min_size=1, max_size=3))
def test_structured_summary_parsing_returns_valid_fields_or_a_clear_error(
    answers: list[Any],
) -> None:
    schema = SummarySchema.model_json_schema()
    model = scripted([*answers, *answers, *answers])

    async def ask() -> dict[str, Any] | None:
        try:
            return await model.structured(
                [Msg("user", "summarise", "user")], schema, name="write_summary", max_attempts=3
            )
        except StructuredOutputError:
            return None

    out = asyncio.run(ask())
    if out is not None:
        assert set(FIELDS) <= set(out)
        assert all(isinstance(out[f], str) for f in FIELDS)
        render_summary(DEFAULT_SUMMARY_TEMPLATE, out)
    record("hostile input", "structured summary answers (hypothesis)")


def test_valid_summary_renders_every_field() -> None:
    fields = summary_fields("x")
    out = render_summary(DEFAULT_SUMMARY_TEMPLATE, fields)
    assert all(v in out for v in fields.values())


# -- read-back tools --------------------------------------------------------------------

CANARY = "CANARY-outside-the-workspace"


@pytest.fixture
async def tools(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "secret.txt").write_text(CANARY)
    ws = LocalWorkspace(tmp_path / "ws")
    await ws.initialize()
    await ws.offload_context("s1", [Msg("user", "hello a" + "a" * 5000 + "b", "user")])
    await ws.offload_context("s2", [Msg("user", "other session", "user")])
    # A short limit: catastrophic patterns are among the fuzzed ones, and each waits it out.
    return {f.__name__: f for f in readback_tools(ws, session_id="s1", grep_timeout=0.05)}


paths = (
    st.sampled_from(["../secret.txt", "../../secret.txt", "/etc/passwd",
                     "sessions/s2/context.jsonl",
                     "sessions/s1/../../secret.txt", "sessions/s1/context.jsonl/..", "~", "\x00",
                     "sessions/%2e%2e/secret.txt", "C:\\secret.txt", "sessions/s1/context.jsonl"])
    | st.text(max_size=40)
)  # fmt: skip
patterns = st.sampled_from(["(a+)+$", "(a|aa)+b", "(.*a){20}", "[", "(?P<x", "\\", "a{999}",
                            "(?i)HELLO", "^", ""]) | st.text(max_size=12)  # fmt: skip


@FUZZ
@given(path=paths, pattern=patterns, glob=st.none() | paths, offset=st.integers(-5, 10**9))
async def test_readback_tools_answer_hostile_paths_and_patterns_with_text(
    tools: dict[str, Any], path: str, pattern: str, glob: str | None, offset: int
) -> None:
    outputs = [
        await tools["Read"](path, offset=offset),
        await tools["Grep"](pattern, path=path if offset % 2 else None, glob=glob),
        await tools["Glob"](path),
    ]
    for out in outputs:
        assert isinstance(out, str)
        assert CANARY not in out
        assert "other session" not in out
    record("hostile input", "read-back paths, patterns and globs (hypothesis)")


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)+$", "(a*)*b$", "(.*a){25}$"])
async def test_catastrophic_regex_times_out_with_an_error_text(
    tools: dict[str, Any], pattern: str
) -> None:
    out = await tools["Grep"](pattern)
    assert out.startswith("Error:")
    assert "did not finish" in out
    record("hostile input", "catastrophic regexes")


_HUGE_REPEAT = """
import asyncio, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from contextfold.workspace import MemoryWorkspace
from contextfold.message import Msg
from contextfold.tool import readback_tools
async def main():
    ws = MemoryWorkspace()
    await ws.initialize()
    await ws.offload_context("s1", [Msg("user", "aaaa", "user")])
    grep = readback_tools(ws, session_id="s1", grep_timeout=0.5)[1]
    print(await grep(sys.argv[1]))
asyncio.run(main())
"""


@pytest.mark.parametrize("pattern", ["a{99999999}", "((a{1000}){1000}){1000}"])
def test_huge_repeat_count_is_refused_with_an_error_text(pattern: str) -> None:
    # In a child process with 1 GiB of address space, so the bug cannot take pytest down.
    src = str(Path(__file__).parents[2] / "src")  # pytest's pythonpath does not reach a child
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", _HUGE_REPEAT, pattern],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.startswith("Error:")
