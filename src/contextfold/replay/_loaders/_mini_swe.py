"""mini-swe-agent ``.traj.json`` files.

mini-swe-agent has no tool-call field: an assistant turn is a THOUGHT followed by exactly
one ```bash block, answered by the next user turn (``<returncode>N</returncode>
<output>...</output>``). Such a turn becomes an assistant ``Msg`` with a ``TextBlock``
(the thought) and a ``ToolCallBlock`` named ``bash``; its answer becomes a user ``Msg``
with one ``ToolResultBlock`` (the return code in its metadata, ``is_error`` when it is not
0). Turns that do not fit (format errors, the task message) stay plain text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..._exceptions import MessageFormatError
from ...message import (
    ContentBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    Usage,
)
from .._trajectory import Trajectory
from ._recording import Recording, RecordingKind, ShapedLoader

__all__ = ["MINI_SWE_AGENT", "load_trajectory"]

# mini-swe-agent's own action regex: the command must be the only ```bash block
_ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_RESULT = re.compile(r"<returncode>(-?\d+)</returncode>\n(.*)", re.DOTALL)
_OUTPUT = re.compile(r"<output>\n(.*)</output>", re.DOTALL)
_ELIDED = re.compile(r"<elided_chars>\s*(\d+) characters elided")
_TIMEOUT = re.compile(r"The last command <command>.*?</command> timed out", re.DOTALL)
_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_UNSAFE_ID = re.compile(r"[^a-zA-Z0-9_-]")


class _MiniSweAgent(ShapedLoader):
    """A trajectory, without the model's reasoning (see :func:`load_trajectory`)."""

    name = "mini-swe-agent"
    kind: RecordingKind = "json"

    def fits(self, parsed: Any) -> bool:
        return _is_mini_swe(parsed)

    def read(self, recording: Recording, parsed: Any) -> list[Trajectory]:
        return [_mini_swe(parsed, recording.path, include_reasoning=False)]


MINI_SWE_AGENT = _MiniSweAgent()


def load_trajectory(path: str | Path, *, include_reasoning: bool = False) -> Trajectory:
    """Load a mini-swe-agent ``.traj.json`` file.

    Tool-call ids are ``<instance_id>-<message index>`` (characters outside
    ``[a-zA-Z0-9_-]`` become ``_``, as Anthropic requires), so loading is deterministic.
    The usage each model response reported becomes ``Msg.usage``.
    ``include_reasoning`` adds the model's reasoning text, when recorded, as an unsigned
    ``ThinkingBlock``.
    """
    path = Path(path)
    data = Recording(path).document
    if not _is_mini_swe(data):
        raise MessageFormatError(f"{path}: not a mini-swe-agent trajectory")
    return _mini_swe(data, path, include_reasoning=include_reasoning)


def _is_mini_swe(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("messages"), list)
        and str(data.get("trajectory_format", "")).startswith("mini-swe-agent")
    )


def _mini_swe(data: dict[str, Any], path: Path, *, include_reasoning: bool) -> Trajectory:
    instance_id = str(data.get("instance_id") or path.name.removesuffix(".traj.json"))
    id_base = _UNSAFE_ID.sub("_", instance_id)
    system: str | None = None
    msgs: list[Msg] = []
    times: list[float | None] = []
    pending: ToolCallBlock | None = None
    for i, raw in enumerate(data["messages"]):
        if not isinstance(raw, dict):
            raise MessageFormatError(f"{path}: message {i} must be an object")
        role, content = raw.get("role"), raw.get("content")
        if not isinstance(content, str) or role not in ("system", "user", "assistant"):
            raise MessageFormatError(
                f"{path}: message {i} needs a role (system/user/assistant) and string content"
            )
        msg_id = f"{id_base}-m{i}"
        if role == "system" and system is None and not msgs:
            system = content
        elif role == "assistant":
            msg, pending = _assistant(raw, content, f"{id_base}-{i}", include_reasoning)
            msgs.append(msg.model_copy(update={"id": msg_id}))
            times.append(_created(raw))
        elif pending is not None and role == "user":
            msgs.append(Msg("user", [_result(pending, content)], "user", id=msg_id))
            pending = None
        else:
            msgs.append(Msg(role, content, role, id=msg_id))
        if len(times) < len(msgs):
            times.append(None)
    info = data.get("info")
    return Trajectory(
        instance_id=instance_id,
        system=system,
        messages=msgs,
        info=info if isinstance(info, dict) else {},
        format=str(data.get("trajectory_format")),
        times=times if any(t is not None for t in times) else [],
    )


def _created(raw: dict[str, Any]) -> float | None:
    """When the provider created the response (``extra.response.created``, Unix seconds)."""
    extra = raw.get("extra")
    response = extra.get("response") if isinstance(extra, dict) else None
    created = response.get("created") if isinstance(response, dict) else None
    if isinstance(created, int | float) and not isinstance(created, bool):
        return float(created)
    return None


def _assistant(
    raw: dict[str, Any], content: str, call_id: str, include_reasoning: bool
) -> tuple[Msg, ToolCallBlock | None]:
    response = raw.get("extra", {}).get("response") if isinstance(raw.get("extra"), dict) else None
    usage = _usage(response)
    blocks: list[ContentBlock] = []
    if include_reasoning:
        reasoning = _reasoning(response)
        if reasoning:
            blocks.append(ThinkingBlock(thinking=reasoning))
    actions = _ACTION.findall(content)
    if len(actions) != 1:
        # the harness rejects such a turn with a format error: no command ran
        if not blocks:
            return Msg("assistant", content, "assistant", usage=usage), None
        return Msg("assistant", [*blocks, TextBlock(text=content)], "assistant", usage=usage), None
    # the thought is all the text around the one bash block, kept verbatim
    match = _ACTION.search(content)
    assert match is not None
    before, after = content[: match.start()].rstrip(), content[match.end() :].strip()
    thought = f"{before}\n\n{after}" if before and after else before or after
    call = ToolCallBlock(id=call_id, name="bash", input={"command": actions[0]})
    if thought:
        blocks.append(TextBlock(text=thought))
    blocks.append(call)
    return Msg("assistant", blocks, "assistant", usage=usage), call


def _usage(response: Any) -> Usage | None:
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    return Usage(
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cache_read_tokens=int(cached or 0),
    )


def _reasoning(response: Any) -> str | None:
    try:
        reasoning = response["choices"][0]["message"].get("reasoning")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return reasoning if isinstance(reasoning, str) else None


def _result(call: ToolCallBlock, content: str) -> ToolResultBlock:
    match = _RESULT.match(content)
    if match is not None:
        returncode = int(match.group(1))
        rest = match.group(2)
        output = _OUTPUT.fullmatch(rest)
        metadata: dict[str, Any] = {"returncode": returncode}
        if output is None:
            # too long for the harness: a warning plus head and tail of the output
            elided = _ELIDED.search(rest)
            if elided is not None:
                metadata["elided_chars"] = int(elided.group(1))
        return ToolResultBlock(
            id=call.id,
            name=call.name,
            output=rest if output is None else output.group(1),
            is_error=returncode != 0,
            metadata=metadata,
        )
    if _TIMEOUT.match(content):
        return ToolResultBlock(
            id=call.id, name=call.name, output=content, is_error=True, metadata={"timeout": True}
        )
    command = str(call.input.get("command", ""))
    metadata = {"submission": True} if _SUBMIT in command else {}
    return ToolResultBlock(id=call.id, name=call.name, output=content, metadata=metadata)
