"""Load recorded agent runs as ``Msg`` lists: mini-swe-agent ``.traj.json``, OpenAI
message lists (e.g. tau-bench runs) and our own JSONL.

mini-swe-agent has no tool-call field: an assistant turn is a THOUGHT followed by exactly
one ```bash block, answered by the next user turn (``<returncode>N</returncode>
<output>...</output>``). Such a turn becomes an assistant ``Msg`` with a ``TextBlock``
(the thought) and a ``ToolCallBlock`` named ``bash``; its answer becomes a user ``Msg``
with one ``ToolResultBlock`` (the return code in its metadata, ``is_error`` when it is not
0). Turns that do not fit (format errors, the task message) stay plain text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .._exceptions import MessageFormatError
from ..message import (
    ContentBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    Usage,
    from_openai_messages,
    msgs_from_jsonl,
)
from ._formats import (
    is_atif,
    is_claude_code,
    is_codex,
    is_openhands,
    is_pydantic_ai,
    is_swe_agent,
    load_atif,
    load_claude_code,
    load_codex,
    load_openhands,
    load_pydantic_ai,
    load_swe_agent,
)

__all__ = [
    "FORMATS",
    "Trajectory",
    "load_any",
    "load_msg_jsonl",
    "load_openai_runs",
    "load_trajectory",
]

# mini-swe-agent's own action regex: the command must be the only ```bash block
_ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_RESULT = re.compile(r"<returncode>(-?\d+)</returncode>\n(.*)", re.DOTALL)
_OUTPUT = re.compile(r"<output>\n(.*)</output>", re.DOTALL)
_ELIDED = re.compile(r"<elided_chars>\s*(\d+) characters elided")
_TIMEOUT = re.compile(r"The last command <command>.*?</command> timed out", re.DOTALL)
_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_UNSAFE_ID = re.compile(r"[^a-zA-Z0-9_-]")
_FORMATS = (
    "mini-swe-agent .traj.json, a JSON list of tau-bench style runs (objects with 'traj'), "
    "a JSON list of OpenAI messages, JSONL of Msg objects, Claude Code session JSONL, Codex "
    "rollout JSONL, OpenHands output.jsonl, SWE-agent .traj, ATIF trajectory JSON"
)


class Trajectory(BaseModel):
    """One recorded run. ``messages`` excludes the system prompt, which is in ``system``."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    system: str | None = None
    messages: list[Msg]
    info: dict[str, Any] = Field(default_factory=dict)
    format: str = ""
    """Where it came from: ``mini-swe-agent``, ``openai`` or ``msg-jsonl``."""

    def all_messages(self) -> list[Msg]:
        """The system prompt (as a system ``Msg``, when there is one) followed by
        ``messages``."""
        head = [] if self.system is None else [Msg("system", self.system, "system")]
        return head + list(self.messages)


def load_trajectory(path: str | Path, *, include_reasoning: bool = False) -> Trajectory:
    """Load a mini-swe-agent ``.traj.json`` file.

    Tool-call ids are ``<instance_id>-<message index>`` (characters outside
    ``[a-zA-Z0-9_-]`` become ``_``, as Anthropic requires), so loading is deterministic.
    The usage each model response reported becomes ``Msg.usage``.
    ``include_reasoning`` adds the model's reasoning text, when recorded, as an unsigned
    ``ThinkingBlock``.
    """
    path = Path(path)
    data = _read_json(path)
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
        elif pending is not None and role == "user":
            msgs.append(Msg("user", [_result(pending, content)], "user", id=msg_id))
            pending = None
        else:
            msgs.append(Msg(role, content, role, id=msg_id))
    info = data.get("info")
    return Trajectory(
        instance_id=instance_id,
        system=system,
        messages=msgs,
        info=info if isinstance(info, dict) else {},
        format=str(data.get("trajectory_format")),
    )


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


def load_openai_runs(path: str | Path) -> list[Trajectory]:
    """Load a JSON list of runs, each ``{"traj": [OpenAI messages], ...}`` (tau-bench).

    ``instance_id`` is ``<task_id>-<trial>``; the other keys of a run go to ``info``.
    """
    path = Path(path)
    data = _read_json(path)
    if not _is_openai_runs(data):
        raise MessageFormatError(f"{path}: expected a JSON list of runs with a 'traj' list")
    return [_openai_run(run, k, path) for k, run in enumerate(data)]


def _is_openai_runs(data: Any) -> bool:
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(r, dict) and isinstance(r.get("traj"), list) for r in data)
    )


def _openai_run(run: dict[str, Any], k: int, path: Path) -> Trajectory:
    try:
        msgs = from_openai_messages(run["traj"])
    except MessageFormatError as exc:
        raise MessageFormatError(f"{path}: run {k}: {exc}") from exc
    task, trial = run.get("task_id", k), run.get("trial")
    instance_id = f"{task}-{trial}" if trial is not None else str(task)
    return _split_system(
        msgs,
        instance_id=instance_id,
        info={key: v for key, v in run.items() if key != "traj"},
        fmt="openai",
    )


def _split_system(
    msgs: list[Msg], *, instance_id: str, info: dict[str, Any], fmt: str
) -> Trajectory:
    system: str | None = None
    if msgs and msgs[0].role == "system" and not msgs[0].metadata:
        system = msgs[0].text
        msgs = msgs[1:]
    return Trajectory(instance_id=instance_id, system=system, messages=msgs, info=info, format=fmt)


def load_msg_jsonl(path: str | Path) -> Trajectory:
    """Load messages written by ``msgs_to_jsonl``; ``instance_id`` is the file's stem."""
    path = Path(path)
    try:
        msgs = msgs_from_jsonl(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise MessageFormatError(f"{path}: not a JSONL file of Msg objects: {exc}") from exc
    return _split_system(msgs, instance_id=path.stem, info={}, fmt="msg-jsonl")


FORMATS = (
    "mini-swe-agent",
    "openai-runs",
    "openai",
    "msg-jsonl",
    "claude-code",
    "codex",
    "openhands",
    "swe-agent",
    "atif",
    "pydantic-ai",
)
"""What ``load_any(..., format=...)`` and ``contextfold replay --format`` accept."""


def load_any(path: str | Path, *, format: str | None = None) -> list[Trajectory]:
    """Load any supported recording (:data:`FORMATS`), telling the format from the content
    unless ``format`` names it.

    Raises ``MessageFormatError`` naming the file and the formats it knows otherwise.
    """
    path = Path(path)
    if format is not None and format not in FORMATS:
        raise MessageFormatError(
            f"unknown format {format!r}; accepted formats: {', '.join(FORMATS)}"
        )
    if path.suffix == ".jsonl":
        return _load_jsonl(path, format)
    data = _read_json(path)
    found = format or _detect_json(data)
    if found == "mini-swe-agent" and _is_mini_swe(data):
        return [_mini_swe(data, path, include_reasoning=False)]
    if found == "openai-runs" and _is_openai_runs(data):
        return load_openai_runs(path)
    if found == "atif" and is_atif(data):
        system, msgs = load_atif(data, path)
        info = {k: data[k] for k in ("agent", "final_metrics") if k in data}
        sid = str(data.get("session_id") or path.stem)
        return [Trajectory(instance_id=sid, system=system, messages=msgs, info=info, format="atif")]
    if found == "pydantic-ai" and is_pydantic_ai(data):
        system, msgs = load_pydantic_ai(data, path)
        return [
            Trajectory(instance_id=path.stem, system=system, messages=msgs, format="pydantic-ai")
        ]
    if found == "swe-agent" and is_swe_agent(data):
        system, msgs, version = load_swe_agent(data, path)
        info = {"version": version, **(data.get("info") or {})}
        name = path.name.removesuffix(".traj")
        return [
            Trajectory(
                instance_id=name, system=system, messages=msgs, info=info, format="swe-agent"
            )
        ]
    if found == "openai" and _is_openai_list(data):
        try:
            msgs = from_openai_messages(data)
        except MessageFormatError as exc:
            raise MessageFormatError(f"{path}: {exc}") from exc
        return [_split_system(msgs, instance_id=path.stem, info={}, fmt="openai")]
    raise MessageFormatError(_unrecognised(path, format))


def _detect_json(data: Any) -> str | None:
    if _is_mini_swe(data):
        return "mini-swe-agent"
    if _is_openai_runs(data):
        return "openai-runs"
    if is_atif(data):
        return "atif"
    if is_pydantic_ai(data):
        return "pydantic-ai"
    if is_swe_agent(data):
        return "swe-agent"
    if _is_openai_list(data):
        return "openai"
    return None


def _is_openai_list(data: Any) -> bool:
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(m, dict) and "role" in m for m in data)
    )


def _load_jsonl(path: Path, format: str | None) -> list[Trajectory]:
    if format in (None, "msg-jsonl"):
        try:
            return [load_msg_jsonl(path)]
        except MessageFormatError:
            if format is not None:
                raise
    rows = _jsonl_rows(path, format)
    if format in (None, "claude-code") and is_claude_code(rows):
        msgs = load_claude_code(path, rows)
        sid = next((str(r["sessionId"]) for r in rows if "sessionId" in r), path.stem)
        return [_split_system(msgs, instance_id=sid, info={}, fmt="claude-code")]
    if format in (None, "codex") and is_codex(rows):
        system, msgs = load_codex(path, rows)
        meta: Any = next((r["payload"] for r in rows if r.get("type") == "session_meta"), {})
        sid = str(meta.get("id") or path.stem) if isinstance(meta, dict) else path.stem
        return [Trajectory(instance_id=sid, system=system, messages=msgs, format="codex")]
    if format in (None, "openhands") and is_openhands(rows):
        runs = []
        for row in rows:
            system, msgs = load_openhands(row, path)
            info = {"metrics": row.get("metrics")} if row.get("metrics") is not None else {}
            runs.append(
                Trajectory(
                    instance_id=str(row["instance_id"]),
                    system=system,
                    messages=msgs,
                    info=info,
                    format="openhands",
                )
            )
        return runs
    raise MessageFormatError(_unrecognised(path, format))


def _jsonl_rows(path: Path, format: str | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise MessageFormatError(
                f"{path}:{n}: not a JSON line ({exc}); {_known(format)}"
            ) from exc
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _unrecognised(path: Path, format: str | None) -> str:
    if format is not None:
        return f"{path}: not a {format} recording"
    return f"{path}: unrecognised recording; {_known(None)}"


def _known(format: str | None) -> str:
    return "accepted formats: " + ", ".join(FORMATS) + f" ({_FORMATS})"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise MessageFormatError(
            f"{path}: not valid JSON ({exc}); accepted formats: {_FORMATS}"
        ) from exc
