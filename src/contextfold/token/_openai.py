"""Exact token counts for OpenAI's o200k_base and cl100k_base, offline.

Text is counted with ``toktok`` (vocabularies compiled in, ids identical to tiktoken's);
so are cuts: ``head`` with toktok's own truncation, ``tail`` by encoding the end of the text.

What is exact and what is not:

* Text: exact (tested equal to tiktoken).
* Message framing: OpenAI's published rule for Chat Completions (cookbook
  "How to count tokens with tiktoken"): 3 tokens per message, the role, 1 more per
  ``name``, and 3 priming the reply. OpenAI verified it against the API for plain text
  messages; we cannot call the API here.
* Tool calls in assistant messages and ``tool`` messages: no published rule. We count the
  function name, the arguments text as sent, and 3 tokens per call; ``tool_call_id`` is not
  counted. An estimate.
* Tool definitions: the community formula from OpenAI's cookbook (per function 7 tokens
  on o200k / 10 on cl100k, ``name:description``, 3 per property plus
  ``name:type:description``, enum items, 12 at the end). It was fitted on flat schemas; it
  ignores nested schemas, so we add the JSON text of nested parts (an over-estimate).
  Expect a few tokens of error per tool.
* Images: OpenAI's documented formulas from width and height (see ``_images``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import toktok

from .._exceptions import MessageFormatError
from .._logging import logger
from ..message import (
    Base64Source,
    DataBlock,
    DataSource,
    Msg,
    ToolSpec,
    URLSource,
    openai_wire_texts,
    to_openai_messages,
)
from ._images import block_image_size, openai_patch_image_tokens, openai_tile_image_tokens
from ._render import render_openai
from ._vocab import ENCODINGS, text_counter, token_codec

__all__ = ["ImagePricing", "OpenAITokenCounter"]

ImagePricing = Literal["tile", "tile-mini", "patch-1.62", "patch-2.46", "patch-1.72"]
"""How images are counted: OpenAI's 512px-tile formula (``tile``; ``tile-mini`` is GPT-4o
mini's 2833 + 5667 per tile) or the 32px-patch formula with the model's multiplier."""

_PER_MESSAGE = 3
_PER_NAME = 1
_REPLY_PRIMING = 3
_PER_TOOL_CALL = 3
# Cookbook constants for function definitions (fitted on gpt-4o / gpt-4 / gpt-3.5).
_FUNC_INIT = {"o200k_base": 7, "cl100k_base": 10}
_PROP_INIT = 3
_PROP_KEY = 3
_ENUM_INIT = -3
_ENUM_ITEM = 3
_FUNC_END = 12
_NESTED_KEYS = ("properties", "items", "anyOf", "oneOf", "allOf", "$ref", "additionalProperties")


class OpenAITokenCounter:
    """Counts OpenAI Chat Completions requests for one encoding.

    ``count_message`` covers every Chat Completions message a :class:`Msg` becomes (an
    assistant turn with its tool calls, or one ``tool`` message per tool result) and is
    cached on the message. Also a :class:`TokenSlicer` (``head``/``tail``).
    """

    exact = True

    def __init__(self, encoding: str = "o200k_base", *, images: ImagePricing = "tile") -> None:
        if encoding not in ENCODINGS:
            raise ValueError(
                f"unknown encoding {encoding!r}; OpenAITokenCounter supports {', '.join(ENCODINGS)}"
            )
        self.encoding = encoding
        self.images = images
        self._tokenize = text_counter(encoding)
        self._recent: dict[str, int] = {}
        """Counts of the last few long texts: a tool result is counted as a block when it
        arrives (is it over the limit?) and again inside its message; the second count
        is a lookup."""
        suffix = "" if images == "tile" else f"/{images}"
        self.name = f"openai-chat/{encoding}{suffix}"

    def __repr__(self) -> str:
        return f"OpenAITokenCounter({self.encoding!r}, images={self.images!r})"

    # -- text ---------------------------------------------------------------------------

    def count_text(self, text: str) -> int:
        """Tokens in ``text`` (special-token strings count as ordinary text, as the API does)."""
        return self._count(text) if text else 0

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each of ``texts``, in one call to the tokenizer."""
        count = self._count
        return [count(t) if t else 0 for t in texts]

    def _count(self, text: str) -> int:
        if len(text) < _REMEMBERED:
            return self._tokenize(text)
        recent = self._recent
        count = recent.get(text)
        if count is None:
            count = recent[text] = self._tokenize(text)
            if len(recent) > _RECENT:
                del recent[next(iter(recent))]
        return count

    def head(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` within ``max_tokens`` tokens."""
        if max_tokens <= 0:
            return ""
        cut, total = toktok.truncate(text, max_tokens, self.encoding)
        while total > max_tokens and (total := self.count_text(cut)) > max_tokens:
            cut = cut[:-1]  # re-tokenizing a prefix can merge differently; rare
        return str(cut)

    def tail(self, text: str, max_tokens: int) -> str:
        """The longest suffix of ``text`` within ``max_tokens`` tokens, cut where a token
        starts.

        Only a window at the end is encoded (doubled until it holds more than the
        budget): encoding a whole 2 MB log for its last 3,000 tokens cost tens of
        milliseconds. The last tokens of a window are those of the whole text except
        where a word straddles the window's start, far from the cut; the cut is counted
        alone at the end anyway.
        """
        if max_tokens <= 0:
            return ""
        codec = token_codec(self.encoding)
        window = max_tokens * 8 + 16
        while True:
            piece = text[-window:] if window < len(text) else text
            tokens = codec.encode_ordinary(piece)
            if len(tokens) > max_tokens:
                break
            if piece is text:
                return text
            window *= 2
        keep = max_tokens
        while keep > 0:
            raw: bytes = codec.decode_bytes(tokens[-keep:])
            start = 0
            while start < len(raw) and raw[start] & 0xC0 == 0x80:
                start += 1  # a character split across the cut: drop its tail bytes
            cut = raw[start:].decode("utf-8", errors="replace")
            if self.count_text(cut) <= max_tokens:
                return cut
            keep -= 1
        return ""

    # -- messages -----------------------------------------------------------------------

    def count_message(self, msg: Msg) -> int:
        """Tokens ``msg`` costs in a request, framing included; cached on the message."""
        cached = msg.cached_tokens(self.name)
        if cached is not None:
            return cached
        wire = openai_wire_texts(msg)
        if wire is None:
            count = self._count_converted(msg)
        else:
            count = 0
            for texts, calls in wire:
                count += _PER_MESSAGE + _PER_TOOL_CALL * calls + sum(self.count_texts(texts))
        # Chat Completions drops thinking; counting it anyway errs high, never low. (The
        # shortcut takes no other message with thinking in it.)
        if wire is None or msg.role == "assistant":
            count += sum(self.count_text(b.thinking) for b in msg.thinking)
        msg.cache_tokens(self.name, count)
        return count

    def _count_converted(self, msg: Msg) -> int:
        """The count from the converter's wire messages (any shape; thinking aside)."""
        images = {_data_key(b.source): b for b in msg.iter_data()}
        return sum(self._count_wire(m, images) for m in _wire(msg))

    def count_openai_messages(self, messages: Sequence[dict[str, Any]]) -> int:
        """Tokens of Chat Completions messages given as wire dicts, reply priming included
        (the cookbook's ``num_tokens_from_messages``). Not cached."""
        return sum(self._count_wire(m) for m in messages) + _REPLY_PRIMING

    def count_tools(self, tools: Sequence[ToolSpec]) -> int:
        """Tokens the function definitions add (the cookbook formula; see module doc)."""
        if not tools:
            return 0
        texts: list[str] = []
        total = _FUNC_END
        for tool in tools:
            total += _FUNC_INIT[self.encoding]
            texts.append(f"{tool.name}:{tool.description.removesuffix('.')}")
            props = tool.parameters.get("properties") or {}
            if props:
                total += _PROP_INIT
            for key, schema in props.items():
                total += _PROP_KEY
                if not isinstance(schema, dict):
                    texts.append(f"{key}:{json.dumps(schema)}")
                    continue
                enum = schema.get("enum")
                if isinstance(enum, list):
                    total += _ENUM_INIT + _ENUM_ITEM * len(enum)
                    texts.extend(str(item) for item in enum)
                p_type = schema.get("type", "")
                if not isinstance(p_type, str):
                    p_type = json.dumps(p_type)
                desc = str(schema.get("description", "")).removesuffix(".")
                texts.append(f"{key}:{p_type}:{desc}")
                nested = {k: schema[k] for k in _NESTED_KEYS if k in schema}
                if nested:
                    texts.append(json.dumps(nested, ensure_ascii=False))
            extra = {k: v for k, v in tool.parameters.items() if k in ("$defs", "definitions")}
            if extra:
                texts.append(json.dumps(extra, ensure_ascii=False))
        return total + sum(self.count_texts(texts))

    def count_request(self, messages: Sequence[Msg], tools: Sequence[ToolSpec] = ()) -> int:
        """Tokens of the whole request: messages, tool definitions, reply priming."""
        return (
            sum(self.count_message(m) for m in messages)
            + self.count_tools(tools)
            + (_REPLY_PRIMING)
        )

    # -- one wire message ---------------------------------------------------------------

    def _count_wire(
        self, message: dict[str, Any], images: Mapping[str, DataBlock] | None = None
    ) -> int:
        texts: list[str] = [str(message.get("role", ""))]
        total = _PER_MESSAGE
        name = message.get("name")
        if isinstance(name, str):
            texts.append(name)
            total += _PER_NAME
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for part in content:
                total += self._count_part(part, texts, images or {})
        for key in ("refusal",):
            value = message.get(key)
            if isinstance(value, str):
                texts.append(value)
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            texts.append(str(function.get("name", "")))
            texts.append(str(function.get("arguments", "")))
            total += _PER_TOOL_CALL
        return total + sum(self.count_texts(texts))

    def _count_part(
        self, part: dict[str, Any], texts: list[str], images: Mapping[str, DataBlock]
    ) -> int:
        kind = part.get("type")
        if kind == "text":
            texts.append(str(part.get("text", "")))
            return 0
        if kind == "data":
            return self._count_block(part["block"])
        if kind == "image_url":
            image = part.get("image_url") or {}
            url = str(image.get("url", ""))
            detail = str(image.get("detail", "auto"))
            key = url.split(",", 1)[1] if url.startswith("data:") else url
            block = images.get(key) or DataBlock(source=URLSource(url=url, media_type="image/*"))
            return self._count_block(block, detail=detail)
        # audio and file parts: no published size rule; count their payload as text
        texts.append(json.dumps(part, ensure_ascii=False, default=str))
        return 0

    def _count_block(self, block: DataBlock, *, detail: str = "auto") -> int:
        if block.kind != "image":
            payload = getattr(block.source, "data", None) or getattr(block.source, "url", "")
            return self.count_text(str(payload))
        size = block_image_size(block)
        if self.images == "tile":
            return openai_tile_image_tokens(size, detail=detail)
        if self.images == "tile-mini":
            return openai_tile_image_tokens(size, detail=detail, base=2833, per_tile=5667)
        return openai_patch_image_tokens(size, multiplier=float(self.images.split("-")[1]))


def _data_key(source: DataSource) -> str:
    """What identifies a data block inside the wire form: its base64 text or its URL."""
    if isinstance(source, Base64Source):
        return source.data
    url = source.url
    return url.split(",", 1)[1] if url.startswith("data:") else url


_REMEMBERED = 128
"""Texts of at least this many characters are remembered: counting 128 characters costs
about 0.5 µs here, looking one up 0.1 µs; shorter ones are counted again."""
_RECENT = 8


def _wire(msg: Msg) -> list[dict[str, Any]]:
    """The Chat Completions messages ``msg`` is sent as, from the library's converter.

    A message alone: hints of an assistant message then become their own user message
    rather than joining the next one (3-4 tokens more, erring high). Content OpenAI cannot
    carry makes the converter raise; the request would fail too, but counting must not,
    so such a message is counted from its blocks.
    """
    try:
        return to_openai_messages([msg])
    except MessageFormatError as exc:
        logger.debug("counting message %s from its blocks: %s", msg.id, exc)
        return render_openai(msg)
