"""Exact token counts for GGUF models run by llama.cpp (the embedded model by default).

Two framings are counted, both exactly:

``local``
    The prompt :class:`~contextfold.model.LocalChatModel` sends: ChatML turns with the
    tool-call syntax of llama-cpp-python's ``chatml-function-calling`` format
    (``functions.<name>:\\n<json arguments>``), tool results as user turns, and the tool
    list in a system turn of its own before the conversation. Every turn starts with the
    special token ``<|im_start|>``, and llama.cpp tokenizes the text between special
    tokens separately, so a request's tokens are exactly the concatenation of its turns'
    tokens: ``count_request == sum(count_message) + count_tools + count_request([], ())``
    holds exactly, tools included.

``server``
    What a llama-cpp-python server started with ``--chat_format chatml-function-calling``
    renders for the OpenAI messages of :func:`contextfold.message.to_openai_messages`,
    using a verbatim copy of that format's Jinja template (0.3.36; a test checks the copy).
    That template is not additive when tools are offered: it appends the tool list to
    *every* system message (so a request with tools costs ``(n_system - 1) * T`` more than
    the identity says, where ``T = count_tools(tools)``, or ``T`` less when there is no
    system message, give or take a token where a system text's end merges with the list's
    leading blank line), and it prefixes ``message:\\n`` (3 tokens for SmolLM2) to every
    assistant text. :meth:`LlamaTokenCounter.count_request` renders the whole prompt, so it
    stays exact. The template also drops the content of ``tool`` messages (only the
    ``<|im_start|>tool`` header is sent) and HTML-escapes text; the count follows it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .._embedded import close_at_exit, embedded_model_path
from .._exceptions import MissingDependencyError
from ..message import (
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSpec,
)

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["Framing", "LlamaTokenCounter"]

Framing = Literal["local", "server"]

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


_vocab_lock = threading.Lock()


@functools.cache
def _vocab(path: Path) -> Llama:
    """The GGUF's tokenizer alone (no weights), loaded once per path."""
    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise MissingDependencyError("llama-cpp-python", "local") from exc
    try:
        from llama_cpp._utils import suppress_stdout_stderr
    except ImportError:  # private helper; without it llama.cpp prints one harmless warning
        quiet: Any = contextlib.nullcontext()
    else:
        quiet = suppress_stdout_stderr(disable=False)
    # A vocab-only model has no trained context length, which llama.cpp warns about.
    with _vocab_lock, quiet:
        llama = Llama(str(path), vocab_only=True, verbose=False)
    close_at_exit(llama)
    return llama


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


def render_tools(tools: Sequence[ToolSpec]) -> str:
    """The local framing's system turn that lists the tools."""
    lines = [_TOOLS_INTRO]
    for tool in tools:
        lines.append(f"\nfunctions.{tool.name}:\n")
        if tool.description:
            lines.append(f"// {tool.description}\n")
        lines.append(json.dumps(tool.parameters, ensure_ascii=False, sort_keys=True) + "\n")
    return f"{_START}system\n{''.join(lines)}{_TOOLS_OUTRO}{_END}\n"


def call_arguments(call: ToolCallBlock) -> str:
    """A call's argument text as the model wrote it, or its JSON form."""
    if call.raw_input is not None:
        return call.raw_input
    return json.dumps(call.input, ensure_ascii=False)


def _data_note(block: DataBlock) -> str:
    label = block.name or block.media_type
    return f"[{block.kind} {label} not shown: this model reads text only]"


def _result_text(result: ToolResultBlock) -> str:
    if isinstance(result.output, str):
        return result.output
    return "\n".join(b.text if isinstance(b, TextBlock) else _data_note(b) for b in result.output)


def render_message(msg: Msg) -> str:
    """One message in the local framing: zero or more ChatML turns."""
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
            calls.append(f"functions.{block.name}:\n{call_arguments(block)}")
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
    body = "\n".join([*parts, *calls])
    if body or not turns:
        turns.append(f"{_START}{msg.role}\n{body}{_END}\n")
    return "".join(turns)


class LlamaTokenCounter:
    """Counts tokens with a GGUF model's own tokenizer, exactly as llama.cpp does.

    ``model_path`` defaults to the embedded model. The vocabulary is loaded once per path
    (``vocab_only``; no weights). ``framing`` is ``"local"`` for what
    :class:`~contextfold.model.LocalChatModel` sends and ``"server"`` for a
    llama-cpp-python server using ``chatml-function-calling`` (see the module docstring
    for where the server framing is not additive).
    """

    exact = True

    def __init__(self, model_path: str | Path | None = None, *, framing: Framing = "local") -> None:
        if model_path is None:
            model_path = embedded_model_path()
        self.model_path = Path(model_path)
        if framing not in ("local", "server"):
            raise ValueError(f"framing must be 'local' or 'server', got {framing!r}")
        self.framing: Framing = framing
        self.name = f"llama/{self.model_path.stem}/{framing}"

    def tokenize(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Token ids of ``text``, special tokens such as ``<|im_end|>`` parsed as llama.cpp
        does for a prompt. ``add_bos`` adds BOS only if the GGUF asks for it."""
        return list(_vocab(self.model_path).tokenize(text.encode(), add_bos=add_bos, special=True))

    def count_text(self, text: str) -> int:
        """Tokens in ``text`` as it would appear inside a prompt."""
        return len(self.tokenize(text)) if text else 0

    def count_message(self, msg: Msg) -> int:
        """Tokens of the message's turns (without tools on offer; see the module docstring)."""
        cached = msg.cached_tokens(self.name)
        if cached is not None:
            return cached
        if self.framing == "local":
            count = self.count_text(render_message(msg))
        else:
            count = self.count_text(self._render_server([msg], (), tools_on=False, gen=False))
        msg.cache_tokens(self.name, count)
        return count

    def count_tools(self, tools: Sequence[ToolSpec]) -> int:
        """Tokens the tool list adds: its own system turn (local), or the block appended
        to one system message (server)."""
        if not tools:
            return 0
        if self.framing == "local":
            return self.count_text(render_tools(tools))
        # Measured after a one-letter system text: an empty one would let the block's
        # leading blank line merge with the header's newline.
        probe = Msg("system", "x", "system")
        with_tools = self._render_server([probe], tools, tools_on=True, gen=False)
        return self.count_text(with_tools) - self.count_text(
            self._render_server([probe], (), tools_on=False, gen=False)
        )

    def count_request(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec] = (),
        *,
        tool_choice: ToolChoice | None = None,
    ) -> int:
        """Tokens of the prompt llama.cpp evaluates for this request.

        With a forced ``tool_choice`` the prompt ends with ``functions.<name>:\\n``, which
        llama.cpp counts as prompt tokens; pass the same ``tool_choice`` as the request.
        """
        if self.framing == "local" and forced_tool(tools, tool_choice) is None:
            shown = tools if tools_shown(tools, tool_choice) else ()
            return (
                sum(self.count_message(m) for m in messages)
                + self.count_tools(shown)
                + len(self.tokenize(_GENERATION_PROMPT, add_bos=True))
            )
        return len(self.tokenize(self.render_prompt(messages, tools, tool_choice), add_bos=True))

    def render_prompt(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
    ) -> str:
        """The whole prompt text of a request, generation prompt (and forced call) included."""
        shown = tools_shown(tools, tool_choice)
        if self.framing == "local":
            prompt = (render_tools(tools) if shown else "") + "".join(
                render_message(m) for m in messages
            )
            prompt += _GENERATION_PROMPT
        else:
            prompt = self._render_server(messages, tools if shown else (), tools_on=shown, gen=True)
        forced = forced_tool(tools, tool_choice) if shown else None
        if forced is not None:
            prompt += f"functions.{forced}:\n"
        return prompt

    @staticmethod
    def _render_server(
        messages: Sequence[Msg], tools: Sequence[ToolSpec], *, tools_on: bool, gen: bool
    ) -> str:
        from ..message import to_openai_messages, to_openai_tools

        rendered: str = _server_template().render(
            messages=to_openai_messages(list(messages)),
            tools=to_openai_tools(list(tools)) if tools_on else [],
            tool_calls=True if tools_on else None,
            add_generation_prompt=gen,
        )
        return rendered

    def head(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` within ``max_tokens`` tokens."""
        return self._cut(text, max_tokens, from_end=False)

    def tail(self, text: str, max_tokens: int) -> str:
        """The longest suffix of ``text`` within ``max_tokens`` tokens."""
        return self._cut(text, max_tokens, from_end=True)

    def _cut(self, text: str, max_tokens: int, *, from_end: bool) -> str:
        if max_tokens <= 0:
            return ""
        if self.count_text(text) <= max_tokens:
            return text

        def piece(n: int) -> str:
            return text[len(text) - n :] if from_end else text[:n]

        # Token counts of prefixes are not monotonic in general; binary search finds a
        # long piece that fits and the result is checked, so the bound always holds.
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count_text(piece(mid)) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return piece(lo)
