"""The llama.cpp grammars (GBNF text) the embedded model decodes under, built once per
shape."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from .._logging import logger
from ..message import ToolSpec
from ._local_runtime import cyllama

__all__ = ["GrammarCache", "bounded_strings"]


class GrammarCache:
    """Grammars by their source: converting a schema costs more than a short completion."""

    def __init__(self) -> None:
        self._grammars: dict[str, str] = {}

    def _grammar(self, key: str, build: Callable[[], str]) -> str:
        if key not in self._grammars:
            self._grammars[key] = build()
        return self._grammars[key]

    def schema(self, schema: dict[str, Any]) -> str:
        """JSON matching ``schema``, or any JSON object when llama.cpp cannot express it."""
        convert = cyllama().json_schema_to_grammar

        # In the schema's own order: properties are written in that order, so a later
        # field's allowed values can depend on an earlier one (through ``anyOf``).
        text = json.dumps(schema)

        def build() -> str:
            try:
                return str(convert(text))
            except Exception as exc:  # llama.cpp cannot express every schema as a grammar
                logger.info("schema not expressible as a grammar (%s); using plain JSON", exc)
                return str(convert(_ANY_OBJECT))

        return self._grammar("schema:" + text, build)

    def choice(self, tools: Sequence[ToolSpec], *, allow_message: bool) -> str:
        """``functions.<name>:`` for one of ``tools``, or ``message:`` if allowed."""
        options = [json.dumps(f"functions.{t.name}:") for t in tools]
        if allow_message:
            options.append(json.dumps("message:"))
        rule = "root ::= " + " | ".join(options)
        return self._grammar(rule, lambda: rule)


_ANY_OBJECT = json.dumps({"type": "object"})


_CHARS_PER_TOKEN = 3
"""A conservative ratio for SmolLM2's tokenizer on prose (3.7 measured on English)."""


def bounded_strings(schema: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """``schema`` with a ``maxLength`` on each string property of its top-level object
    that has none, so the whole object fits ``max_tokens`` and the grammar closes it.

    Without a bound the small model can run one field on until the answer is cut, and
    the cut JSON is no answer at all (the demo's summary failed on two seeds of four).
    The room is shared evenly after the object's own keys and punctuation; a field is
    never bounded below 16 characters.
    """
    properties = schema.get("properties")
    if schema.get("type", "object") != "object" or not isinstance(properties, dict):
        return schema
    open_strings = [
        name
        for name, spec in properties.items()
        if isinstance(spec, dict) and spec.get("type") == "string" and "maxLength" not in spec
    ]
    if not open_strings:
        return schema
    skeleton = len(json.dumps(dict.fromkeys(properties, ""), ensure_ascii=False))
    room = max_tokens * _CHARS_PER_TOKEN - skeleton
    each = max(16, room // len(open_strings))
    bounded = {
        name: {**spec, "maxLength": each} if name in open_strings else spec
        for name, spec in properties.items()
    }
    return {**schema, "properties": bounded}
