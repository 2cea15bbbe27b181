"""The ChatML prompt of llama-cpp-python's ``chatml-function-calling`` format.

Two renderings of the same protocol:

:func:`chatml_prompt`
    What :class:`~contextfold.model.LocalChatModel` sends to llama.cpp: ChatML turns with
    the format's tool-call syntax (``functions.<name>:\\n<json arguments>``), tool results
    as user turns, and the tool list in a system turn of its own before the conversation,
    so that the prompt is the concatenation of independently rendered turns.

:func:`chatml_server_prompt`
    What a llama-cpp-python server started with ``--chat_format chatml-function-calling``
    renders for the OpenAI messages of :func:`to_openai_messages`, using a verbatim copy
    of that format's Jinja template (:data:`CHATML_FUNCTION_CALLING_TEMPLATE`). It appends
    the tool list to every system message, prefixes ``message:\\n`` to assistant text when
    tools are on, drops the content of ``tool`` messages and HTML-escapes text. Needs
    ``jinja2`` (the ``local`` extra).

A forced tool call ends either prompt with ``functions.<name>:\\n``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any, assert_never

from ._blocks import (
    DataBlock,
    HintBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ._msg import Msg
from ._openai_encode import to_openai_messages, to_openai_tools
from ._toolspec import ToolChoice, ToolSpec

__all__ = [
    "CHATML_FUNCTION_CALLING_TEMPLATE",
    "chatml_call_arguments",
    "chatml_message",
    "chatml_prompt",
    "chatml_server_prompt",
    "chatml_tools",
    "forced_tool",
    "tools_shown",
]

_START, _END = "<|im_start|>", "<|im_end|>"
_GENERATION_PROMPT = f"{_START}assistant\n"

# The instructions chatml-function-calling gives the model, kept word for word so the
# in-process model and a server see the same protocol.
_TOOLS_INTRO = "You have access to the following functions:\n"
_TOOLS_OUTRO = (
    "\n\nYou can respond to users messages with either a single message or one or more "
    "function calls."
    "\n\nTo respond with a message begin the message with 'message:', use the following format:"
    "\n\nmessage:\n<message>"
    "\n\nTo respond with one or more function calls begin the message with "
    "'functions.<function_name>:', use the following format:"
    "\n\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
    "\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
)

# Verbatim from llama_cpp/llama_chat_format.py 0.3.36, chatml_function_calling().
CHATML_FUNCTION_CALLING_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message.role }}\n"
    "{% if message.role == 'system' %}"
    "{{ message.content }}"
    "{% if tool_calls %}"
    "\n\nYou have access to the following functions:\n"
    "{% for tool in tools %}"
    "\nfunctions.{{ tool.function.name }}:\n"
    "{{ tool.function.parameters | tojson }}"
    "\n{% endfor %}"
    "\n\nYou can respond to users messages with either a single message or one or more "
    "function calls."
    "\n\nTo respond with a message begin the message with 'message:', use the following format:"
    "\n\nmessage:"
    "\n<message>"
    "\n\nTo respond with one or more function calls begin the message with "
    "'functions.<function_name>:', use the following format:"
    "\n\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
    "\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
    "{% endif %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if message.role == 'user' %}"
    "{{ message.content }}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if message.role == 'assistant' %}"
    "{% if message.content and message.content | length > 0 %}"
    "{% if tool_calls %}"
    "message:\n"
    "{% endif %}"
    "{{ message.content }}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if 'tool_calls' in message %}"
    "{% for tool_call in message.tool_calls %}"
    "functions.{{ tool_call.function.name }}:\n"
    "{{ tool_call.function.arguments }}"
    "{% endfor %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def forced_tool(tools: Sequence[ToolSpec], tool_choice: ToolChoice | None) -> str | None:
    """The tool a request forces, if any (``required`` with a single tool forces it)."""
    if not tools or tool_choice in (None, "auto", "none"):
        return None
    if tool_choice == "required":
        return tools[0].name if len(tools) == 1 else None
    return tool_choice


def tools_shown(tools: Sequence[ToolSpec], tool_choice: ToolChoice | None) -> bool:
    """Whether the tool list is part of the prompt (not with ``tool_choice="none"``)."""
    return bool(tools) and tool_choice != "none"


def chatml_prompt(
    messages: Sequence[Msg],
    tools: Sequence[ToolSpec] = (),
    tool_choice: ToolChoice | None = None,
) -> str:
    """The whole local prompt of a request, generation prompt (and forced call) included."""
    shown = tools_shown(tools, tool_choice)
    prompt = (chatml_tools(tools) if shown else "") + "".join(chatml_message(m) for m in messages)
    return _forced_call(prompt + _GENERATION_PROMPT, tools, tool_choice)


def chatml_tools(tools: Sequence[ToolSpec]) -> str:
    """The local prompt's system turn that lists the tools."""
    lines = [_TOOLS_INTRO]
    for tool in tools:
        lines.append(f"\nfunctions.{tool.name}:\n")
        if tool.description:
            lines.append(f"// {tool.description}\n")
        lines.append(json.dumps(tool.parameters, ensure_ascii=False, sort_keys=True) + "\n")
    return f"{_START}system\n{''.join(lines)}{_TOOLS_OUTRO}{_END}\n"


def chatml_call_arguments(call: ToolCallBlock) -> str:
    """A call's argument text as the model wrote it, or its JSON form."""
    if call.raw_input is not None:
        return call.raw_input
    return json.dumps(call.input, ensure_ascii=False)


def chatml_message(msg: Msg) -> str:
    """One message in the local prompt: zero or more ChatML turns."""
    turns: list[str] = []
    parts: list[str] = []
    calls: list[str] = []
    for block in msg.blocks():
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, HintBlock):
            parts.append(block.hint)
        elif isinstance(block, DataBlock):
            parts.append(_data_note(block))
        elif isinstance(block, ToolCallBlock):
            calls.append(f"functions.{block.name}:\n{chatml_call_arguments(block)}")
        elif isinstance(block, ToolResultBlock):
            if parts:
                turns.append(f"{_START}{msg.role}\n{chr(10).join(parts)}{_END}\n")
                parts = []
            verb = "failed" if block.is_error else "returned"
            turns.append(
                f"{_START}user\nfunctions.{block.name} {verb}:\n{_result_text(block)}{_END}\n"
            )
        elif isinstance(block, ThinkingBlock):
            continue  # SmolLM2 has no reasoning channel; thinking is not sent back
        else:
            assert_never(block)
    body = "\n".join([*parts, *calls])
    if body or not turns:
        turns.append(f"{_START}{msg.role}\n{body}{_END}\n")
    return "".join(turns)


def chatml_server_prompt(
    messages: Sequence[Msg],
    tools: Sequence[ToolSpec] = (),
    tool_choice: ToolChoice | None = None,
    *,
    generation_prompt: bool = True,
) -> str:
    """What the llama-cpp-python server renders for this request.

    Without ``generation_prompt`` the prompt stops after the last message (no assistant
    header, no forced call): the part a message or the tool list contributes.
    """
    shown = tools_shown(tools, tool_choice)
    rendered: str = _server_template().render(
        messages=to_openai_messages(list(messages)),
        tools=to_openai_tools(list(tools)) if shown else [],
        tool_calls=True if shown else None,
        add_generation_prompt=generation_prompt,
    )
    return _forced_call(rendered, tools, tool_choice) if generation_prompt else rendered


def _forced_call(prompt: str, tools: Sequence[ToolSpec], tool_choice: ToolChoice | None) -> str:
    forced = forced_tool(tools, tool_choice)
    return prompt if forced is None else prompt + f"functions.{forced}:\n"


@functools.cache
def _server_template() -> Any:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # Same environment as llama-cpp-python: autoescape is on for string templates.
    env = ImmutableSandboxedEnvironment(
        autoescape=jinja2.select_autoescape(["html", "xml"]),
        undefined=jinja2.StrictUndefined,
    )
    return env.from_string(CHATML_FUNCTION_CALLING_TEMPLATE)


def _data_note(block: DataBlock) -> str:
    label = block.name or block.media_type
    return f"[{block.kind} {label} not shown: this model reads text only]"


def _result_text(result: ToolResultBlock) -> str:
    if isinstance(result.output, str):
        return result.output
    return "\n".join(b.text if isinstance(b, TextBlock) else _data_note(b) for b in result.output)
