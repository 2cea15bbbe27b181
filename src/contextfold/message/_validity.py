"""Is a message list a request the provider will accept? The tool-call pairing rules.

Both providers reject a request in which a tool call has no result, a result has no
call, or an id repeats within one turn. OpenAI also wants the ``tool`` messages directly
after the assistant message that made the calls, but accepts an id reused in a later turn
(recorded GPT-4o runs do this). Anthropic wants roles to alternate, each assistant turn's
``tool_result`` blocks at the start of the next user message, and ids unique across the
request (``to_anthropic_request`` renames repeats, so converted messages pass).

``check_provider_valid`` first checks the rules on our messages, then converts them
(``to_openai_messages`` / ``to_anthropic_request``) and checks what would be sent, so a
problem in the conversion shows up too. ``check_openai_request`` and
``check_anthropic_request`` check wire-format message lists directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._exceptions import MessageFormatError
from ._anthropic_encode import to_anthropic_with_origins
from ._blocks import ToolCallBlock, ToolResultBlock
from ._msg import Msg
from ._openai_encode import to_openai_with_origins

__all__ = [
    "Provider",
    "ValidityProblem",
    "assert_provider_valid",
    "check_anthropic_request",
    "check_anthropic_valid",
    "check_openai_request",
    "check_openai_valid",
    "check_provider_valid",
]

Provider = Literal["openai", "anthropic"]
_ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")


@dataclass(frozen=True)
class ValidityProblem:
    """One broken rule: the index of the message it was found at, and what is wrong."""

    index: int
    problem: str

    def __str__(self) -> str:
        return f"message {self.index}: {self.problem}"


def check_provider_valid(msgs: Sequence[Msg], *, provider: Provider) -> list[ValidityProblem]:
    """Every reason ``provider`` would reject ``msgs`` as a request (``[]`` when valid).

    Indices refer to ``msgs``.
    """
    problems = _check_msgs(msgs)
    if problems:
        return problems
    try:
        if provider == "openai":
            wire, origin = to_openai_with_origins(msgs)
            found = check_openai_request(wire)
        else:
            _, wire, origin, _ = to_anthropic_with_origins(msgs)
            found = check_anthropic_request(wire)
    except MessageFormatError as exc:
        return [ValidityProblem(_index_of(str(exc)), f"cannot be converted: {exc}")]
    return [
        ValidityProblem(origin[p.index] if p.index < len(origin) else p.index, p.problem)
        for p in found
    ]


def check_openai_valid(msgs: Sequence[Msg]) -> list[ValidityProblem]:
    """``check_provider_valid(msgs, provider="openai")``."""
    return check_provider_valid(msgs, provider="openai")


def check_anthropic_valid(msgs: Sequence[Msg]) -> list[ValidityProblem]:
    """``check_provider_valid(msgs, provider="anthropic")``."""
    return check_provider_valid(msgs, provider="anthropic")


def assert_provider_valid(
    msgs: Sequence[Msg], *, providers: Iterable[Provider] = ("openai", "anthropic")
) -> None:
    """Raise ``MessageFormatError`` listing every problem ``providers`` would reject."""
    lines = [
        f"{provider}: {p}"
        for provider in providers
        for p in check_provider_valid(msgs, provider=provider)
    ]
    if lines:
        raise MessageFormatError("the messages are not a valid request:\n  " + "\n  ".join(lines))


def _index_of(error: str) -> int:
    match = re.match(r"message (\d+):", error)
    return int(match.group(1)) if match else 0


def _check_msgs(msgs: Sequence[Msg]) -> list[ValidityProblem]:
    """The pairing rules both providers share, on our own messages."""
    problems: list[ValidityProblem] = []
    seen_calls: set[str] = set()
    answered: set[str] = set()
    open_calls: dict[str, int] = {}  # id -> index of the assistant message that made it
    for i, msg in enumerate(msgs):
        if not isinstance(msg, Msg):
            problems.append(ValidityProblem(i, f"is a {type(msg).__name__}, not a Msg"))
            continue
        calls = msg.get_blocks(ToolCallBlock)
        results = msg.get_blocks(ToolResultBlock)
        if msg.role == "assistant":
            problems.extend(_unanswered(open_calls, at_end=False))
            open_calls = {}
            for call in calls:
                if call.id in open_calls:
                    problems.append(
                        ValidityProblem(i, f"tool call id {call.id!r} is used twice in one turn")
                    )
                seen_calls.add(call.id)
                answered.discard(call.id)
                open_calls[call.id] = i
            if results:
                problems.append(ValidityProblem(i, "an assistant message holds tool results"))
            continue
        if calls:
            problems.append(ValidityProblem(i, f"a {msg.role} message holds tool calls"))
        for result in results:
            if result.id in open_calls:
                del open_calls[result.id]
                answered.add(result.id)
            elif result.id in answered:
                problems.append(ValidityProblem(i, f"tool call {result.id!r} has a second result"))
            elif result.id in seen_calls:
                problems.append(
                    ValidityProblem(
                        i, f"result for tool call {result.id!r} comes after a later assistant turn"
                    )
                )
            else:
                problems.append(
                    ValidityProblem(i, f"result for tool call {result.id!r}, which was never made")
                )
    problems.extend(_unanswered(open_calls, at_end=True))
    return problems


def _unanswered(open_calls: dict[str, int], *, at_end: bool) -> list[ValidityProblem]:
    where = "" if at_end else " before the next assistant turn"
    return [
        ValidityProblem(index, f"tool call {call_id!r} has no result{where}")
        for call_id, index in open_calls.items()
    ]


# -------------------------------------------------------------------------- wire formats


def check_openai_request(messages: Sequence[Mapping[str, Any]]) -> list[ValidityProblem]:
    """Tool-call pairing problems in an OpenAI Chat Completions ``messages`` list."""
    problems: list[ValidityProblem] = []
    expecting: dict[str, int] | None = None  # calls of the assistant message just before
    for j, m in enumerate(messages):
        role = m.get("role") if isinstance(m, Mapping) else None
        if role == "tool":
            call_id = m.get("tool_call_id")
            if expecting is None:
                problems.append(
                    ValidityProblem(j, "tool message does not follow an assistant tool call")
                )
            elif call_id in expecting:
                del expecting[call_id]
            else:
                problems.append(
                    ValidityProblem(
                        j, f"tool message {call_id!r} answers no call of the assistant message"
                    )
                )
            continue
        if expecting:
            problems.extend(
                ValidityProblem(index, f"tool call {cid!r} has no tool message right after it")
                for cid, index in expecting.items()
            )
        expecting = None
        calls = m.get("tool_calls") if role == "assistant" else None
        if isinstance(calls, list) and calls:
            expecting = {}
            for call in calls:
                cid = call.get("id") if isinstance(call, Mapping) else None
                if not isinstance(cid, str):
                    problems.append(ValidityProblem(j, "a tool call has no string id"))
                    continue
                if cid in expecting:
                    problems.append(
                        ValidityProblem(j, f"tool call id {cid!r} is used twice in one turn")
                    )
                expecting[cid] = j
    if expecting:
        problems.extend(
            ValidityProblem(index, f"tool call {cid!r} has no tool message right after it")
            for cid, index in expecting.items()
        )
    return problems


def check_anthropic_request(messages: Sequence[Mapping[str, Any]]) -> list[ValidityProblem]:
    """Alternation and tool_use/tool_result problems in an Anthropic ``messages`` list."""
    problems: list[ValidityProblem] = []
    seen: set[str] = set()
    pending: dict[str, int] = {}
    prev_role: object = None
    for j, m in enumerate(messages):
        role = m.get("role") if isinstance(m, Mapping) else None
        if role not in ("user", "assistant"):
            problems.append(ValidityProblem(j, f"role must be user or assistant, got {role!r}"))
            continue
        if role == prev_role:
            problems.append(
                ValidityProblem(j, f"two {role} messages in a row; Anthropic needs alternation")
            )
        prev_role = role
        content = m.get("content")
        blocks = [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []
        if role == "assistant":
            problems.extend(_pending_problems(pending))
            pending = {}
            for b in blocks:
                if b.get("type") == "tool_result":
                    problems.append(ValidityProblem(j, "tool_result in an assistant message"))
                if b.get("type") != "tool_use":
                    continue
                cid = b.get("id")
                if not isinstance(cid, str) or not _ANTHROPIC_ID.fullmatch(cid):
                    problems.append(
                        ValidityProblem(j, f"tool_use id {cid!r} must match ^[a-zA-Z0-9_-]+$")
                    )
                    continue
                if cid in seen:
                    problems.append(ValidityProblem(j, f"tool_use id {cid!r} is used twice"))
                seen.add(cid)
                pending[cid] = j
            continue
        leading = True
        for b in blocks:
            kind = b.get("type")
            if kind == "tool_use":
                problems.append(ValidityProblem(j, "tool_use in a user message"))
            if kind != "tool_result":
                leading = False
                continue
            if not leading:
                problems.append(
                    ValidityProblem(j, "tool_result blocks must come before any other content")
                )
            cid = b.get("tool_use_id")
            if isinstance(cid, str) and cid in pending:
                del pending[cid]
            else:
                problems.append(
                    ValidityProblem(
                        j, f"tool_result {cid!r} answers no tool_use of the previous message"
                    )
                )
        problems.extend(_pending_problems(pending))
        pending = {}
    problems.extend(_pending_problems(pending))
    return problems


def _pending_problems(pending: dict[str, int]) -> list[ValidityProblem]:
    return [
        ValidityProblem(index, f"tool_use {cid!r} has no tool_result in the next user message")
        for cid, index in pending.items()
    ]
