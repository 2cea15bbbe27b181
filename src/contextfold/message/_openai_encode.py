"""Conversion to the OpenAI Chat Completions message format.

A user ``Msg`` that mixes tool results with other content becomes ``tool`` messages
followed by one user message. ``HintBlock`` is sent as user text wrapped in
``<system-reminder>``. Thinking blocks are dropped: Chat Completions has no field for them
(and servers that return ``reasoning_content`` reject it when sent back).
``ToolResultBlock.is_error`` has no OpenAI field either; the result text is sent as is.
What the decoder kept in ``Msg.metadata["openai"]`` is restored (see ``_openai_shapes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_never

from .._exceptions import MessageFormatError
from ._blocks import (
    ContentBlock,
    DataBlock,
    HintBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    URLSource,
)
from ._msg import Msg
from ._openai_shapes import AUDIO_MEDIA, KEY, assistant_default_shape, default_shape
from ._toolspec import ToolChoice, ToolSpec
from ._wire import (
    as_dict,
    copy_wire,
    data_kind,
    dump_arguments,
    fail,
    split_data_url,
    wrap_hint,
)

__all__ = [
    "openai_wire_texts",
    "to_openai_messages",
    "to_openai_tool_choice",
    "to_openai_tools",
    "to_openai_with_origins",
]


def to_openai_messages(msgs: Sequence[Msg]) -> list[dict[str, Any]]:
    """Convert messages to an OpenAI Chat Completions ``messages`` list.

    Raises ``MessageFormatError`` for content OpenAI cannot carry (a tool call in a user
    message, an image in an assistant message, audio by URL, video).
    """
    return to_openai_with_origins(msgs)[0]


WireTexts = list[tuple[list[str], int]]
"""Per Chat Completions message: the texts it carries (role first) and its tool calls."""


def openai_wire_texts(msg: Msg) -> WireTexts | None:
    """The texts ``to_openai_messages([msg])`` would send, without building the messages:
    for each wire message its role, content texts, each call's name and arguments, and how
    many tool calls it holds. ``None`` for any shape but the common ones (plain text,
    an assistant's text and calls, text-only tool results, no ``metadata["openai"]``).

    Counting calls this on every new message; building the dicts cost as much as the rest
    of a step. A property test holds it equal to the converter's output.
    """
    if isinstance(msg.metadata.get(KEY), dict):
        return None
    role = msg.role
    content = msg.content
    if isinstance(content, str):
        return [([role, content], 0)]
    if role == "assistant":
        texts: list[str] = ["assistant"]
        calls: list[ToolCallBlock] = []
        said: list[str] = []
        for block in content:
            if isinstance(block, TextBlock):
                said.append(block.text)
            elif isinstance(block, ToolCallBlock):
                calls.append(block)
            elif not isinstance(block, ThinkingBlock):
                return None
        if said or not calls:
            texts.extend(said if len(said) > 1 else ["".join(said)])
        try:
            for call in calls:
                texts.append(call.name)
                texts.append(dump_arguments(call, index=0))
        except MessageFormatError:
            return None
        return [(texts, len(calls))]
    wire_role = "system" if role == "system" else "user"
    if not content:
        return [([wire_role, ""], 0)]
    if isinstance(content[0], ToolResultBlock) and role != "system":
        wire: WireTexts = []
        for block in content:
            if not isinstance(block, ToolResultBlock):
                return None
            output = block.output
            if isinstance(output, str):
                wire.append((["tool", output], 0))
                continue
            parts = ["tool"]
            for part in output:
                if not isinstance(part, TextBlock):
                    return None
                parts.append(part.text)
            wire.append((parts, 0))
        return wire
    plain: list[str] = [wire_role]
    for block in content:
        if isinstance(block, TextBlock):
            plain.append(block.text)
        elif isinstance(block, HintBlock):
            plain.append(wrap_hint(block.hint))
        else:
            return None
    return [(plain, 0)]


def to_openai_with_origins(msgs: Sequence[Msg]) -> tuple[list[dict[str, Any]], list[int]]:
    """The messages plus, for each, the index of the ``Msg`` it came from.

    Each message's wire form is built once and remembered on it (:meth:`Msg.cache_wire`):
    an agent sends its whole history every step, and building it again cost several
    microseconds a message. A message converted right after an assistant's hints (which
    it carries) is built afresh; everything else is copied from what was remembered.
    """
    out: list[dict[str, Any]] = []
    origin: list[int] = []
    pending: list[tuple[int, str]] = []  # hints from assistant messages, sent as user text

    def flush() -> None:
        if pending:
            out.append({"role": "user", "content": _text_content([t for _, t in pending])})
            origin.append(pending[0][0])
            pending.clear()

    for i, msg in enumerate(msgs):
        if not isinstance(msg, Msg):
            raise MessageFormatError(f"message {i}: expected a Msg, got {type(msg).__name__}")
        if msg.role != "user":
            flush()
        carries_hints = bool(pending)  # then its form is this request's alone
        remembered: _Remembered | None = None if carries_hints else msg.cached_wire(KEY)
        if remembered is not None:
            wire, hints = copy_wire(remembered[0]), remembered[1]
        else:
            wire, hints = _one_to_openai(msg, i, pending)
            if not carries_hints:
                msg.cache_wire(KEY, (copy_wire(wire), hints))
        out.extend(wire)
        origin.extend([i] * len(wire))
        pending.extend((i, h) for h in hints)
    flush()
    return out, origin


_Remembered = tuple[list[dict[str, Any]], list[str]]
"""A message's wire messages and the hints it leaves for the next user message."""


def _one_to_openai(
    msg: Msg, i: int, pending: list[tuple[int, str]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """``msg``'s wire messages (taking the ``pending`` hints into a user message) and the
    hints it leaves pending."""
    meta = _meta(msg)
    blocks = msg.blocks()
    if msg.role == "assistant":
        hints = [wrap_hint(b.hint) for b in blocks if isinstance(b, HintBlock)]
        return [_assistant_to(msg, i, meta)], hints
    if msg.role == "system":
        return [_plain_to(msg, i, meta, "system")], []
    out: list[dict[str, Any]] = []
    results = [b for b in blocks if isinstance(b, ToolResultBlock)]
    attachments: list[ContentBlock] = []
    for b in results:
        tool_msg, moved = _tool_to(b, i, meta if len(blocks) == 1 else {})
        out.append(tool_msg)
        attachments.extend(moved)
    if results and len(results) == len(blocks) and not attachments and not pending:
        return out, []
    rest = [b for b in blocks if not isinstance(b, ToolResultBlock)]
    if results:
        # the other content goes after the tool messages, as OpenAI requires
        rest_msg = msg.model_copy(update={"content": rest + attachments})
        meta = {}
    else:
        rest_msg = msg
    user = _plain_to(rest_msg, i, meta, "user")
    if pending:
        user["content"] = _prepend_text(user["content"], [t for _, t in pending])
        pending.clear()
    out.append(user)
    return out, []


def _meta(msg: Msg) -> dict[str, Any]:
    meta = msg.metadata.get(KEY)
    return meta if isinstance(meta, dict) else {}


def _text_content(texts: list[str]) -> str | list[dict[str, Any]]:
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": t} for t in texts]


def _prepend_text(content: Any, texts: list[str]) -> Any:
    parts = [{"type": "text", "text": t} for t in texts]
    if isinstance(content, str):
        return parts + ([{"type": "text", "text": content}] if content else [])
    return parts + list(content)


def _with_extra(d: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    extra = meta.get("extra")
    if isinstance(extra, dict):
        return {**extra, **d}
    return d


def _plain_to(msg: Msg, i: int, meta: dict[str, Any], role: str) -> dict[str, Any]:
    out: dict[str, Any] = {"role": meta.get("role", role) if role == "system" else role}
    if isinstance(msg.content, str):
        content: Any = msg.content
        shape = "string"
    else:
        blocks = [b for b in msg.content if not isinstance(b, ThinkingBlock)]
        shape = meta.get("content") or default_shape(blocks)
        if shape in ("absent", "null") and blocks:
            shape = default_shape(blocks)
        if shape == "string" and all(isinstance(b, TextBlock | HintBlock) for b in blocks):
            content = "\n".join(_block_text(b) for b in blocks)
        else:
            shape = "parts" if shape == "string" else shape
            content = [
                _part_to(b, i, j, meta, msg.role)
                for j, b in enumerate(msg.content)
                if not isinstance(b, ThinkingBlock)
            ]
    if shape == "null":
        out["content"] = None
    elif shape != "absent":
        out["content"] = content
    if "name" in meta:
        out["name"] = meta["name"]
    return _with_extra(out, meta)


def _block_text(block: ContentBlock) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, HintBlock):
        return wrap_hint(block.hint)
    raise AssertionError(f"not a text block: {block.type}")


def _part_meta_of(meta: dict[str, Any], j: int) -> dict[str, Any]:
    parts = meta.get("parts")
    entry = parts.get(str(j)) if isinstance(parts, dict) else None
    return entry if isinstance(entry, dict) else {}


def _part_to(
    block: ContentBlock, i: int, j: int, meta: dict[str, Any], role: str
) -> dict[str, Any]:
    pm = _part_meta_of(meta, j)
    inner_extra = as_dict(pm.get("inner"))
    part: dict[str, Any]
    if isinstance(block, TextBlock):
        if pm.get("refusal") is True:
            part = {"type": "refusal", "refusal": block.text}
        else:
            part = {"type": "text", "text": block.text}
    elif isinstance(block, HintBlock):
        part = {"type": "text", "text": wrap_hint(block.hint)}
    elif isinstance(block, DataBlock):
        if role == "assistant":
            fail(i, f"content[{j}]", "is data; OpenAI assistant messages carry only text")
        part = _data_to(block, i, j, inner_extra)
    elif isinstance(block, ToolCallBlock):
        fail(i, f"content[{j}]", "is a tool call; only assistant messages may hold tool calls")
    elif isinstance(block, ThinkingBlock | ToolResultBlock):
        fail(i, f"content[{j}]", f"is a {block.type} block, which cannot be sent here")
    else:
        assert_never(block)
    outer = pm.get("outer")
    if isinstance(outer, dict):
        part = {**outer, **part}
    return part


def _data_to(block: DataBlock, i: int, j: int, inner: dict[str, Any]) -> dict[str, Any]:
    src = block.source
    url = src.url if isinstance(src, URLSource) else f"data:{src.media_type};base64,{src.data}"
    split = split_data_url(url)
    kind = data_kind(block)
    if split is not None:
        # A data: URL carries its own media type, and that is what the provider sees.
        major = split[0].split("/", 1)[0]
        kind = major if major in ("image", "audio", "video") else "file"
    if kind == "image":
        return {"type": "image_url", "image_url": {**inner, "url": url}}
    if kind == "audio":
        if split is None:
            fail(i, f"content[{j}]", "is audio by URL; OpenAI accepts audio only inline (base64)")
        fmt = AUDIO_MEDIA.get(split[0], split[0].removeprefix("audio/"))
        return {"type": "input_audio", "input_audio": {**inner, "data": split[1], "format": fmt}}
    if kind == "video":
        fail(i, f"content[{j}]", "is video, which OpenAI Chat Completions does not accept")
    if split is None:
        fail(i, f"content[{j}]", "is a file by URL; OpenAI accepts files only inline (base64)")
    file: dict[str, Any] = {**inner, "file_data": url}
    if block.name is not None:
        file["filename"] = block.name
    return {"type": "file", "file": file}


def _assistant_to(msg: Msg, i: int, meta: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant"}
    blocks = msg.blocks()
    calls = [b for b in blocks if isinstance(b, ToolCallBlock)]
    texts = [b for b in blocks if isinstance(b, TextBlock)]
    for j, b in enumerate(blocks):
        if isinstance(b, ToolResultBlock):
            fail(i, f"content[{j}]", "is a tool result; tool results belong in user messages")
        if isinstance(b, DataBlock):
            fail(i, f"content[{j}]", "is data; OpenAI assistant messages carry only text")
    shape = meta.get("content")
    if shape not in ("string", "parts", "null", "absent") or (
        shape in ("null", "absent") and texts
    ):
        shape = assistant_default_shape(texts, has_calls=bool(calls))
    if isinstance(msg.content, str) and shape == "parts":
        shape = "string"
    if shape == "string":
        out["content"] = (
            msg.content if isinstance(msg.content, str) else "\n".join(t.text for t in texts)
        )
    elif shape == "parts":
        out["content"] = [
            _part_to(b, i, j, meta, "assistant")
            for j, b in enumerate(blocks)
            if isinstance(b, TextBlock)
        ]
    elif shape == "null":
        out["content"] = None
    if calls:
        call_meta = as_dict(meta.get("calls"))
        out["tool_calls"] = [_call_to(c, i, call_meta.get(str(k), {})) for k, c in enumerate(calls)]
    if "name" in meta:
        out["name"] = meta["name"]
    return _with_extra(out, meta)


def _call_to(call: ToolCallBlock, i: int, cm: Any) -> dict[str, Any]:
    cm = cm if isinstance(cm, dict) else {}
    fn: dict[str, Any] = {"name": call.name, "arguments": dump_arguments(call, index=i)}
    if isinstance(cm.get("inner"), dict):
        fn = {**cm["inner"], **fn}
    out: dict[str, Any] = {"id": call.id, "type": "function", "function": fn}
    if cm.get("no_type") is True:
        del out["type"]
    if isinstance(cm.get("outer"), dict):
        out = {**cm["outer"], **out}
    return out


def _tool_to(
    block: ToolResultBlock, i: int, meta: dict[str, Any]
) -> tuple[dict[str, Any], list[ContentBlock]]:
    """One ``tool`` message, plus data blocks that must follow in a user message."""
    out: dict[str, Any] = {"role": "tool", "tool_call_id": block.id}
    moved: list[ContentBlock] = []
    if isinstance(block.output, str):
        out["content"] = block.output
    else:
        texts = [b for b in block.output if isinstance(b, TextBlock)]
        moved = [b for b in block.output if isinstance(b, DataBlock)]
        if moved:
            note = f"[{len(moved)} attachment(s) follow in the next user message]"
            out["content"] = "\n".join([*(t.text for t in texts), note])
        else:
            out["content"] = [_part_to(t, i, j, meta, "user") for j, t in enumerate(texts)]
    if "name" in meta:
        out["name"] = meta["name"]
    return _with_extra(out, meta), moved


# ----------------------------------------------------------------------------------- tools


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as the ``tools`` parameter of Chat Completions."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            },
        }
        for t in tools
    ]


def to_openai_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """``auto``/``none``/``required`` as is; a tool name as a forced function choice."""
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}
