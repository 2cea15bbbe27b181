"""OpenHands event histories (``output.jsonl``, one run per line): actions with
``tool_call_metadata`` are tool calls (grouped by model response), their observations the
results; usage from each response."""

from __future__ import annotations

from typing import Any

from ...message import Msg, ToolResultBlock, Usage, from_openai_message
from .._trajectory import Trajectory
from ._fields import as_dict, as_int, call
from ._recording import Recording, RecordingKind, ShapedLoader

__all__ = ["OPENHANDS"]


class _OpenHands(ShapedLoader):
    """Each run: the system action as the prompt, then calls and observations."""

    name = "openhands"
    kind: RecordingKind = "jsonl"

    def fits(self, parsed: Any) -> bool:
        """Runs (one per line) with a ``history`` of events and an ``instance_id``."""
        return bool(parsed) and all(
            isinstance(r.get("history"), list) and "instance_id" in r for r in parsed
        )

    def read(self, recording: Recording, parsed: Any) -> list[Trajectory]:
        runs = []
        for row in parsed:
            system, msgs = _run(row)
            info = {"metrics": row.get("metrics")} if row.get("metrics") is not None else {}
            runs.append(
                Trajectory(
                    instance_id=str(row["instance_id"]),
                    system=system,
                    messages=msgs,
                    info=info,
                    format=self.name,
                )
            )
        return runs


OPENHANDS = _OpenHands()


def _run(run: dict[str, Any]) -> tuple[str | None, list[Msg]]:
    system: str | None = None
    msgs: list[Msg] = []
    response_of: dict[str, str] = {}  # tool_call_id -> model response id
    for event in run["history"]:
        if not isinstance(event, dict):
            continue
        meta = event.get("tool_call_metadata")
        if "action" in event:
            args = as_dict(event.get("args"))
            if event["action"] == "system":
                system = str(args.get("content") or event.get("message") or "")
                continue
            if isinstance(meta, dict):
                _call(msgs, meta, response_of)
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


def _call(msgs: list[Msg], meta: dict[str, Any], response_of: dict[str, str]) -> None:
    response = as_dict(meta.get("model_response"))
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
            [call(str(meta.get("tool_call_id")), str(meta.get("function_name")), {})],
            "assistant",
        )
    usage = response.get("usage")
    if isinstance(usage, dict):
        details = usage.get("prompt_tokens_details") or {}
        msg.usage = Usage(
            input_tokens=as_int(usage.get("prompt_tokens")),
            output_tokens=as_int(usage.get("completion_tokens")),
            cache_read_tokens=as_int(details.get("cached_tokens"))
            if isinstance(details, dict)
            else 0,
        )
    for tool_call in msg.tool_calls:
        response_of[tool_call.id] = rid
    msgs.append(msg)
