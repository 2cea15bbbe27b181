"""Loaders for other agents' session formats: Claude Code, Codex, OpenHands, SWE-agent, ATIF,
Pydantic AI.

Each gives the tool calls, their results and, where the format records it, the provider's
usage of every model call on the assistant ``Msg`` (``Msg.usage``) exactly as recorded:
``input_tokens`` is the whole prompt (cache reads and writes included, as our adapters
report it), ``cache_read_tokens`` and ``cache_write_tokens`` the parts served from and
written to the provider's cache.

* Claude Code (``~/.claude/projects/**/<session>.jsonl``): one API response spans several
  lines with the same ``message.id``; they become one message, its usage counted once
  with ``output_tokens`` from the last line. Sub-agent (side-chain) lines are left out of
  a session; a sub-agent's own file (``agent-*.jsonl``) is a run of its own.
* Codex rollouts (``rollout-*.jsonl``): Responses items; the ``token_count`` event after a
  response carries its usage (``last_token_usage``).
* OpenHands event histories (``output.jsonl``, one run per line): actions with
  ``tool_call_metadata`` are tool calls (grouped by model response), their observations
  the results; usage from each response.
* SWE-agent ``.traj``: 1.x native tool calls, 0.x text actions (``action`` of an assistant
  turn, answered by the next user turn); usage is per run only (``info.model_stats``).
* ATIF v1.7 (``schema_version: ATIF-v1.x``): steps with tool calls, observations and
  per-step metrics.
* Pydantic AI message histories (``ModelMessagesTypeAdapter.dump_json(result.all_messages())``):
  requests (system prompt, user prompts, tool returns, retry prompts) and responses (text,
  thinking, tool calls) with each response's usage.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._exceptions import MessageFormatError
from ..message import (
    Base64Source,
    ContentBlock,
    DataBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    Usage,
    from_openai_message,
    from_openai_messages,
)

__all__ = [
    "is_atif",
    "is_claude_code",
    "is_codex",
    "is_openhands",
    "is_pydantic_ai",
    "is_swe_agent",
    "load_atif",
    "load_claude_code",
    "load_codex",
    "load_openhands",
    "load_pydantic_ai",
    "load_swe_agent",
]


# -------------------------------------------------------------------------- shared helpers


def _parse_args(raw: Any) -> tuple[dict[str, Any], str | None, str | None]:
    """``(input, raw_input, input_error)`` of recorded tool-call arguments."""
    if isinstance(raw, dict):
        return raw, None, None
    if not isinstance(raw, str):
        return {}, None, f"arguments are {type(raw).__name__}, not a JSON object"
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return {}, raw, "arguments are not valid JSON"
    if not isinstance(value, dict):
        return {}, raw, "arguments are not a JSON object"
    return value, raw, None


def _call(call_id: str, name: str, raw: Any) -> ToolCallBlock:
    value, raw_input, error = _parse_args(raw)
    return ToolCallBlock(id=call_id, name=name, input=value, raw_input=raw_input, input_error=error)


def _text_of(content: Any) -> str:
    """Text of a string or a list of text parts (``text``, ``input_text``, ``output_text``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# ------------------------------------------------------------------------------ Claude Code


def is_claude_code(rows: list[dict[str, Any]]) -> bool:
    """Lines with ``type`` user/assistant, a ``sessionId`` and a ``message``."""
    return any(
        r.get("type") in ("user", "assistant") and "sessionId" in r and "message" in r for r in rows
    )


def load_claude_code(path: Path, rows: list[dict[str, Any]]) -> list[Msg]:
    """A Claude Code session's main chain as messages, one per API response."""
    msgs: list[Msg] = []
    last_id: str | None = None
    chat = [r for r in rows if r.get("type") in ("user", "assistant")]
    # A sub-agent's own file is all side chain: keep it; in a session file, leave it out.
    sidechain_file = bool(chat) and all(r.get("isSidechain") for r in chat)
    for row in chat:
        if row.get("isSidechain") and not sidechain_file:
            continue
        message = row.get("message")
        if not isinstance(message, dict):
            continue
        if row["type"] == "assistant":
            blocks = _claude_blocks(message.get("content"), path)
            mid = message.get("id")
            if mid is not None and mid == last_id and msgs and msgs[-1].role == "assistant":
                merged = [*msgs[-1].blocks(), *blocks]
                msgs[-1] = msgs[-1].model_copy(
                    update={"content": merged, "usage": _claude_usage(message)}
                )
                continue
            msg = Msg("assistant", blocks, "assistant", usage=_claude_usage(message))
            if message.get("model"):
                msg.metadata["model"] = message["model"]
            msgs.append(msg)
            last_id = mid
        else:
            last_id = None
            content = message.get("content")
            if isinstance(content, str):
                msg = Msg("user", content, "user")
            else:
                msg = Msg("user", _claude_blocks(content, path), "user")
            if row.get("isCompactSummary"):
                msg.metadata["compact_summary"] = True
            msgs.append(msg)
    return _name_results(msgs)


def _claude_blocks(content: Any, path: Path) -> list[ContentBlock]:
    if isinstance(content, str):
        return [TextBlock(text=content)] if content else []
    blocks: list[ContentBlock] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            blocks.append(TextBlock(text=str(part.get("text", ""))))
        elif kind == "thinking":
            blocks.append(
                ThinkingBlock(
                    thinking=str(part.get("thinking", "")), signature=part.get("signature")
                )
            )
        elif kind == "redacted_thinking":
            blocks.append(ThinkingBlock(thinking="", redacted=str(part.get("data", ""))))
        elif kind == "tool_use":
            blocks.append(_call(str(part.get("id")), str(part.get("name")), part.get("input", {})))
        elif kind == "tool_result":
            output = part.get("content")
            blocks.append(
                ToolResultBlock(
                    id=str(part.get("tool_use_id")),
                    name="",
                    output=_text_of(output) if not isinstance(output, str) else output,
                    is_error=bool(part.get("is_error")),
                )
            )
        elif kind == "image":
            source = part.get("source") or {}
            if source.get("type") == "base64":
                blocks.append(
                    DataBlock(
                        source=Base64Source(
                            media_type=str(source.get("media_type")), data=str(source.get("data"))
                        )
                    )
                )
    return blocks


def _claude_usage(message: dict[str, Any]) -> Usage | None:
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return None
    read = _int(usage.get("cache_read_input_tokens"))
    write = _int(usage.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=_int(usage.get("input_tokens")) + read + write,
        output_tokens=_int(usage.get("output_tokens")),
        cache_read_tokens=read,
        cache_write_tokens=write,
    )


def _name_results(msgs: list[Msg]) -> list[Msg]:
    """Tool results named after their calls (formats that name only the call)."""
    names: dict[str, str] = {}
    out: list[Msg] = []
    for msg in msgs:
        for call in msg.tool_calls:
            names[call.id] = call.name
        if any(isinstance(b, ToolResultBlock) and not b.name for b in msg.blocks()):
            blocks = [
                b.model_copy(update={"name": names.get(b.id, "")})
                if isinstance(b, ToolResultBlock) and not b.name
                else b
                for b in msg.blocks()
            ]
            msg = msg.model_copy(update={"content": blocks})
        out.append(msg)
    return out


# ------------------------------------------------------------------------------------ Codex


def is_codex(rows: list[dict[str, Any]]) -> bool:
    """``{"timestamp", "type", "payload"}`` lines with ``response_item`` or ``session_meta``."""
    return any(r.get("type") in ("response_item", "session_meta") and "payload" in r for r in rows)


def load_codex(path: Path, rows: list[dict[str, Any]]) -> tuple[str | None, list[Msg]]:
    """A Codex rollout: leading developer messages as the system prompt, then the run."""
    msgs: list[Msg] = []
    system: list[str] = []
    seen_total: int | None = None
    for row in rows:
        payload = row.get("payload")
        if not isinstance(payload, dict):
            continue
        if row.get("type") == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info")
            if not isinstance(info, dict):
                continue
            total = (info.get("total_token_usage") or {}).get("total_tokens")
            if total is not None and total == seen_total:
                continue  # the same count again, not a new call
            seen_total = total
            last = info.get("last_token_usage")
            target = next(
                (i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "assistant"), None
            )
            if isinstance(last, dict) and target is not None and msgs[target].usage is None:
                msgs[target] = msgs[target].model_copy(
                    update={
                        "usage": Usage(
                            input_tokens=_int(last.get("input_tokens")),
                            output_tokens=_int(last.get("output_tokens")),
                            cache_read_tokens=_int(last.get("cached_input_tokens")),
                        )
                    }
                )
            continue
        if row.get("type") != "response_item":
            continue
        kind = payload.get("type")
        if kind == "message":
            role = payload.get("role")
            text = _text_of(payload.get("content"))
            if role in ("developer", "system"):
                if not msgs:
                    system.append(text)
                else:
                    msgs.append(Msg("developer", text, "user", metadata={"role": "developer"}))
            elif role == "assistant":
                _assistant_block(msgs, TextBlock(text=text))
            else:
                msgs.append(Msg("user", text, "user"))
        elif kind == "reasoning":
            summary = _text_of(payload.get("summary"))
            if summary:
                _assistant_block(msgs, ThinkingBlock(thinking=summary))
        elif kind == "function_call":
            _assistant_block(
                msgs,
                _call(
                    str(payload.get("call_id")), str(payload.get("name")), payload.get("arguments")
                ),
            )
        elif kind == "custom_tool_call":
            _assistant_block(
                msgs,
                ToolCallBlock(
                    id=str(payload.get("call_id")),
                    name=str(payload.get("name")),
                    input={"input": payload.get("input", "")},
                ),
            )
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = payload.get("output")
            text = output if isinstance(output, str) else _text_of(output) or json.dumps(output)
            result = ToolResultBlock(id=str(payload.get("call_id")), name="", output=text)
            if msgs and msgs[-1].role == "user" and msgs[-1].tool_results and not msgs[-1].text:
                msgs[-1] = msgs[-1].model_copy(update={"content": [*msgs[-1].blocks(), result]})
            else:
                msgs.append(Msg("tool", [result], "user"))
    return ("\n\n".join(system) or None), _name_results(msgs)


def _assistant_block(msgs: list[Msg], block: ContentBlock) -> None:
    """Add ``block`` to the open assistant turn, or open one (any other item ends a turn)."""
    if msgs and msgs[-1].role == "assistant" and msgs[-1].usage is None:
        msgs[-1] = msgs[-1].model_copy(update={"content": [*msgs[-1].blocks(), block]})
    else:
        msgs.append(Msg("assistant", [block], "assistant"))


# -------------------------------------------------------------------------------- OpenHands


def is_openhands(rows: list[dict[str, Any]]) -> bool:
    """Runs (one per line) with a ``history`` of events and an ``instance_id``."""
    return bool(rows) and all(
        isinstance(r.get("history"), list) and "instance_id" in r for r in rows
    )


def load_openhands(run: dict[str, Any], path: Path) -> tuple[str | None, list[Msg]]:
    """One OpenHands run: the system action as the prompt, then calls and observations."""
    system: str | None = None
    msgs: list[Msg] = []
    response_of: dict[str, str] = {}  # tool_call_id -> model response id
    for event in run["history"]:
        if not isinstance(event, dict):
            continue
        meta = event.get("tool_call_metadata")
        if "action" in event:
            args = _dict(event.get("args"))
            if event["action"] == "system":
                system = str(args.get("content") or event.get("message") or "")
                continue
            if isinstance(meta, dict):
                _openhands_call(msgs, meta, response_of)
            elif event["action"] == "message":
                text = str(args.get("content") or event.get("message") or "")
                role = "assistant" if event.get("source") == "agent" else "user"
                msgs.append(Msg(role, text, role))
        elif "observation" in event and isinstance(meta, dict):
            call_id = str(meta.get("tool_call_id"))
            result = ToolResultBlock(
                id=call_id,
                name=str(meta.get("function_name", "")),
                output=str(event.get("content", "")),
            )
            if msgs and msgs[-1].role == "user" and msgs[-1].tool_results:
                msgs[-1] = msgs[-1].model_copy(update={"content": [*msgs[-1].blocks(), result]})
            else:
                msgs.append(Msg("tool", [result], "user"))
    return system, msgs


def _openhands_call(msgs: list[Msg], meta: dict[str, Any], response_of: dict[str, str]) -> None:
    response = _dict(meta.get("model_response"))
    rid = str(response.get("id", ""))
    if rid and rid in response_of.values():
        return  # another action of a response already added with all its calls
    choices = response.get("choices") or []
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    if isinstance(message, dict):
        msg = from_openai_message(
            {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
        )
    else:
        msg = Msg(
            "assistant",
            [_call(str(meta.get("tool_call_id")), str(meta.get("function_name")), {})],
            "assistant",
        )
    usage = response.get("usage")
    if isinstance(usage, dict):
        details = usage.get("prompt_tokens_details") or {}
        msg.usage = Usage(
            input_tokens=_int(usage.get("prompt_tokens")),
            output_tokens=_int(usage.get("completion_tokens")),
            cache_read_tokens=_int(details.get("cached_tokens"))
            if isinstance(details, dict)
            else 0,
        )
    for call in msg.tool_calls:
        response_of[call.id] = rid
    msgs.append(msg)


# -------------------------------------------------------------------------------- SWE-agent


def is_swe_agent(data: Any) -> bool:
    """An object with ``history`` (messages) and ``trajectory`` (steps)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("history"), list)
        and isinstance(data.get("trajectory"), list)
    )


def load_swe_agent(data: dict[str, Any], path: Path) -> tuple[str | None, list[Msg], str]:
    """``(system, messages, version)``: 1.x native tool calls, or 0.x text actions."""
    history = [m for m in data["history"] if isinstance(m, dict)]
    native = any(m.get("role") == "tool" for m in history)
    system: str | None = None
    msgs: list[Msg] = []
    if native:
        wire: list[dict[str, Any]] = []
        for m in history:
            role = m.get("role")
            if role == "tool":
                ids = m.get("tool_call_ids") or [m.get("tool_call_id")]
                for call_id in ids:
                    wire.append(
                        {
                            "role": "tool",
                            "tool_call_id": str(call_id),
                            "content": m.get("content", ""),
                        }
                    )
            elif role == "assistant":
                entry: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
                if m.get("tool_calls"):
                    entry["tool_calls"] = [{"type": "function", **c} for c in m["tool_calls"]]
                wire.append(entry)
            else:
                wire.append({"role": role, "content": _text_of(m.get("content"))})
        try:
            converted = from_openai_messages(wire, strict=False)
        except MessageFormatError as exc:
            raise MessageFormatError(f"{path}: {exc}") from exc
        if converted and converted[0].role == "system":
            system, converted = converted[0].text, converted[1:]
        return system, converted, "1.x"
    pending: ToolCallBlock | None = None
    for k, m in enumerate(history):
        role, text = m.get("role"), _text_of(m.get("content"))
        if role == "system" and system is None and not msgs:
            system = text
        elif role == "assistant":
            action = m.get("action")
            blocks: list[ContentBlock] = [TextBlock(text=str(m.get("thought", text)))]
            pending = None
            if isinstance(action, str) and action.strip():
                pending = ToolCallBlock(
                    id=f"call_{k}", name=action.split()[0], input={"command": action.rstrip("\n")}
                )
                blocks.append(pending)
            msgs.append(Msg("assistant", blocks, "assistant"))
        elif pending is not None:
            msgs.append(
                Msg(
                    "tool", [ToolResultBlock(id=pending.id, name=pending.name, output=text)], "user"
                )
            )
            pending = None
        else:
            msgs.append(
                Msg("user", text, "user", metadata={"demo": True} if m.get("is_demo") else {})
            )
    return system, msgs, "0.x"


# ------------------------------------------------------------------------------------- ATIF


def is_atif(data: Any) -> bool:
    """An object whose ``schema_version`` starts with ``ATIF``."""
    return isinstance(data, dict) and str(data.get("schema_version", "")).startswith("ATIF")


def load_atif(data: dict[str, Any], path: Path) -> tuple[str | None, list[Msg]]:
    """ATIF steps: user and agent messages, tool calls with their observations, metrics."""
    system: list[str] = []
    msgs: list[Msg] = []
    for step in _steps(data, path):
        source, text = step.get("source"), step.get("message")
        text = text if isinstance(text, str) else _text_of(text)
        if source == "system":
            system.append(text)
            continue
        if source != "agent":
            msgs.append(Msg("user", text, "user"))
            continue
        blocks: list[ContentBlock] = []
        if step.get("reasoning_content"):
            blocks.append(ThinkingBlock(thinking=str(step["reasoning_content"])))
        if text:
            blocks.append(TextBlock(text=text))
        for call in step.get("tool_calls") or []:
            blocks.append(
                _call(
                    str(call.get("tool_call_id")),
                    str(call.get("function_name")),
                    call.get("arguments", {}),
                )
            )
        msg = Msg("assistant", blocks, "assistant", usage=_atif_usage(step.get("metrics")))
        msgs.append(msg)
        results = ((step.get("observation") or {}).get("results")) or []
        if results:
            msgs.append(
                Msg(
                    "tool",
                    [
                        ToolResultBlock(
                            id=str(r.get("source_call_id")),
                            name="",
                            output=_text_of(r.get("content")),
                        )
                        for r in results
                        if isinstance(r, dict)
                    ],
                    "user",
                )
            )
    return ("\n\n".join(system) or None), _name_results(msgs)


def _steps(data: dict[str, Any], path: Path) -> Iterable[dict[str, Any]]:
    steps = data.get("steps")
    if not isinstance(steps, list):
        raise MessageFormatError(f"{path}: an ATIF trajectory needs a 'steps' list")
    return [s for s in steps if isinstance(s, dict)]


def _atif_usage(metrics: Any) -> Usage | None:
    if not isinstance(metrics, dict):
        return None
    extra = _dict(metrics.get("extra"))
    return Usage(
        input_tokens=_int(metrics.get("prompt_tokens")),
        output_tokens=_int(metrics.get("completion_tokens")),
        cache_read_tokens=_int(metrics.get("cached_tokens")),
        cache_write_tokens=_int(extra.get("cache_creation_input_tokens")),
    )


# ------------------------------------------------------------------------------ Pydantic AI


def is_pydantic_ai(data: Any) -> bool:
    """A list of Pydantic AI messages: objects of ``kind`` request or response with parts."""
    return (
        isinstance(data, list)
        and bool(data)
        and all(
            isinstance(m, dict)
            and m.get("kind") in ("request", "response")
            and isinstance(m.get("parts"), list)
            for m in data
        )
    )


def _json_text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def load_pydantic_ai(data: list[dict[str, Any]], path: Path) -> tuple[str | None, list[Msg]]:
    """Requests become user turns (tool returns and retry prompts of a request in one tool
    message), responses assistant turns with their usage; system prompts and
    instructions the system prompt."""
    system: list[str] = []
    msgs: list[Msg] = []
    for i, message in enumerate(data):
        parts = [p for p in message["parts"] if isinstance(p, dict)]
        if message["kind"] == "response":
            msgs.append(_pydantic_response(parts, _dict(message.get("usage")), path, i))
            continue
        instructions = message.get("instructions")
        if isinstance(instructions, str) and instructions and instructions not in system:
            system.append(instructions)
        results: list[ContentBlock] = []
        prompts: list[str] = []
        for part in parts:
            kind = part.get("part_kind")
            if kind == "system-prompt":
                system.append(_json_text(part.get("content", "")))
            elif kind == "user-prompt":
                content = part.get("content")
                texts = content if isinstance(content, list) else [content]
                prompts.append("\n".join(t for t in texts if isinstance(t, str)))
            elif kind in ("tool-return", "retry-prompt") and part.get("tool_call_id"):
                results.append(
                    ToolResultBlock(
                        id=str(part["tool_call_id"]),
                        name=str(part.get("tool_name") or ""),
                        output=_json_text(part.get("content", "")),
                        # 2.x records a retry as a tool return with its outcome
                        is_error=kind == "retry-prompt"
                        or part.get("outcome") not in (None, "success"),
                    )
                )
            elif kind == "retry-prompt":  # a retry of the final answer, not of a tool
                prompts.append(_json_text(part.get("content", "")))
        if results:
            msgs.append(Msg("tool", results, "user"))
        msgs.extend(Msg("user", text, "user") for text in prompts if text)
    return ("\n\n".join(system) or None), _name_results(msgs)


def _pydantic_response(
    parts: list[dict[str, Any]], usage: dict[str, Any], path: Path, i: int
) -> Msg:
    blocks: list[ContentBlock] = []
    for part in parts:
        kind = part.get("part_kind")
        if kind == "text":
            blocks.append(TextBlock(text=_json_text(part.get("content", ""))))
        elif kind == "thinking":
            blocks.append(ThinkingBlock(thinking=_json_text(part.get("content", ""))))
        elif kind == "tool-call":
            if not part.get("tool_call_id") or not part.get("tool_name"):
                raise MessageFormatError(
                    f"{path}: message {i}: a tool-call part needs a name and an id"
                )
            blocks.append(
                _call(str(part["tool_call_id"]), str(part["tool_name"]), part.get("args"))
            )
    recorded = Usage(
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cache_read_tokens=_int(usage.get("cache_read_tokens")),
        cache_write_tokens=_int(usage.get("cache_write_tokens")),
    )
    return Msg("assistant", blocks, "assistant", usage=recorded if usage else None)
