"""Exact token counts for GGUF models run by llama.cpp (the embedded model by default).

Two framings are counted, both exactly; the prompts themselves are rendered by
:mod:`contextfold.message` (``chatml-function-calling``):

``local``
    The prompt :class:`~contextfold.model.LocalChatModel` sends
    (:func:`~contextfold.message.chatml_prompt`). Every turn starts with the special token
    ``<|im_start|>``, and llama.cpp tokenizes the text between special tokens separately,
    so a request's tokens are exactly the concatenation of its turns' tokens:
    ``count_request == sum(count_message) + count_tools + count_request([], ())`` holds
    exactly, tools included.

``server``
    What a llama-cpp-python server started with ``--chat_format chatml-function-calling``
    renders (:func:`~contextfold.message.chatml_server_prompt`, a verbatim copy of that
    format's Jinja template, 0.3.36; a test checks the copy). That template is not
    additive when tools are offered: it appends the tool list to *every* system message
    (so a request with tools costs ``(n_system - 1) * T`` more than the identity says,
    where ``T = count_tools(tools)``, or ``T`` less when there is no system message, give
    or take a token where a system text's end merges with the list's leading blank line),
    and it prefixes ``message:\\n`` (3 tokens for SmolLM2) to every assistant text.
    :meth:`LlamaTokenCounter.count_request` renders the whole prompt, so it stays exact.
    The template also drops the content of ``tool`` messages (only the
    ``<|im_start|>tool`` header is sent) and HTML-escapes text; the count follows it.
"""

from __future__ import annotations

import atexit
import functools
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from .._embedded import embedded_model_path
from .._exceptions import MissingDependencyError
from ..message import (
    Msg,
    ToolChoice,
    ToolSpec,
    chatml_message,
    chatml_prompt,
    chatml_server_prompt,
    chatml_tools,
    forced_tool,
    tools_shown,
)

__all__ = ["Framing", "LlamaTokenCounter"]

Framing = Literal["local", "server"]

_vocab_lock = threading.Lock()


@functools.cache
def _vocab(path: Path) -> Any:
    """The GGUF's model for its tokenizer (cyllama's ``LlamaModel``), loaded once per path.

    The whole model is loaded (memory-mapped, not read): cyllama's build aborts the
    process on a vocab-only load of this GGUF (llama.cpp b9190, llama-hparams.cpp).
    """
    try:
        import cyllama.llama.llama_cpp as cy
    except ImportError as exc:
        raise MissingDependencyError("cyllama", "local") from exc
    cy.disable_logging()
    with _vocab_lock:
        model = cy.LlamaModel(str(path), cy.LlamaModelParams())
    atexit.register(model.close)  # cached for good; the binding has no weak references
    return model


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
        vocab = _vocab(self.model_path).get_vocab()
        return list(vocab.tokenize(text, add_special=add_bos, parse_special=True))

    def count_text(self, text: str) -> int:
        """Tokens in ``text`` as it would appear inside a prompt."""
        return len(self.tokenize(text)) if text else 0

    def count_message(self, msg: Msg) -> int:
        """Tokens of the message's turns (without tools on offer; see the module docstring)."""
        cached = msg.cached_tokens(self.name)
        if cached is not None:
            return cached
        if self.framing == "local":
            count = self.count_text(chatml_message(msg))
        else:
            count = self.count_text(chatml_server_prompt([msg], generation_prompt=False))
        msg.cache_tokens(self.name, count)
        return count

    def count_tools(self, tools: Sequence[ToolSpec]) -> int:
        """Tokens the tool list adds: its own system turn (local), or the block appended
        to one system message (server)."""
        if not tools:
            return 0
        if self.framing == "local":
            return self.count_text(chatml_tools(tools))
        # Measured after a one-letter system text: an empty one would let the block's
        # leading blank line merge with the header's newline.
        probe = [Msg("system", "x", "system")]
        with_tools = chatml_server_prompt(probe, tools, generation_prompt=False)
        return self.count_text(with_tools) - self.count_text(
            chatml_server_prompt(probe, generation_prompt=False)
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
                + len(self.tokenize(chatml_prompt(()), add_bos=True))
            )
        return len(self.tokenize(self.render_prompt(messages, tools, tool_choice), add_bos=True))

    def render_prompt(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
    ) -> str:
        """The whole prompt text of a request, generation prompt (and forced call) included."""
        if self.framing == "local":
            return chatml_prompt(messages, tools, tool_choice)
        return chatml_server_prompt(messages, tools, tool_choice)

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
