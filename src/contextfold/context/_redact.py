"""Redaction: what leaves the context (offloaded or summarized) passes through a hook first.

Offloaded tool output and compressed messages often hold credentials; the workspace keeps
them for as long as the session lives and summaries carry them forward. With
``ContextConfig(redact=...)`` every text the engine hands to the offloader or to the
summarizer goes through the callable first; :func:`redact_credentials` is the shipped one.
The live context is left as it is: the model already saw it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from ..message import (
    ContentBlock,
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultContent,
    URLSource,
)

__all__ = [
    "REDACTED",
    "Redactor",
    "redact_credentials",
    "redact_messages",
    "redact_tool_result",
]

Redactor: TypeAlias = Callable[[str], str]
"""Takes a text, returns it with whatever must not be kept masked. Must be idempotent."""

REDACTED = "[REDACTED]"
"""What :func:`redact_credentials` puts in place of a secret."""

_TOKEN = r"[A-Za-z0-9\-._~+/]"
# (pattern, replacement): a replacement keeps the label (``Bearer``, ``user:``) so the
# agent still sees what was there.
_RULES: list[tuple[re.Pattern[str], str]] = [
    # PEM private keys; a key cut by truncation has no END line: mask its base64 run.
    (
        re.compile(
            r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[\s\S]{0,20000}?-----END \1PRIVATE KEY(?: BLOCK)?-----"
            r"|(?:[A-Za-z0-9+/=:,\-\s]|\\[rn])*)"
        ),
        f"{REDACTED} private key",
    ),
    # Authorization headers: a value with a digit, or a long one (not "Bearer tokens").
    (
        re.compile(
            rf"(?i)\b(bearer|basic)(\s+)(?:(?={_TOKEN}*\d){_TOKEN}{{8,}}|{_TOKEN}{{24,}})=*"
        ),
        rf"\1\2{REDACTED}",
    ),
    # OpenAI / Anthropic style keys (sk-..., sk-proj-..., sk-ant-...), Stripe keys.
    (re.compile(r"\bsk-(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{20,}"), REDACTED),
    (re.compile(r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"), REDACTED),
    # AWS access key ids and secret keys.
    (
        re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)[A-Z0-9]{16}\b"),
        REDACTED,
    ),
    (
        re.compile(r"(?i)(aws_secret_access_key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9/+=]{40}"),
        rf"\1{REDACTED}",
    ),
    # GitHub, Slack, Google API keys, JSON Web Tokens.
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"), REDACTED),
    (re.compile(r"\bxox[abprse]-[A-Za-z0-9\-]{10,}"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), REDACTED),
    # Passwords in URLs: scheme://user:password@host.
    (
        re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@\"'<>]*:)([^\s@/\"'<>]+)@"),
        rf"\1{REDACTED}@",
    ),
    # password = "literal" (quoted, so code such as password=os.environ[...] stays).
    (
        re.compile(
            r"(?i)\b((?:password|passwd|pwd|secret|client_secret|api[_-]?key|access[_-]?token"
            r"|auth[_-]?token)[\"']?\s*[:=]\s*)([\"'])(?!\[REDACTED\])[^\"'\s]{6,}\2"
        ),
        rf"\1\2{REDACTED}\2",
    ),
    # PASSWORD=value in environment files and shell lines.
    (
        re.compile(
            r"(?m)^(\s*(?:export\s+)?[A-Z0-9_]*(?:PASSWORD|SECRET|TOKEN|API_KEY)[A-Z0-9_]*=)"
            r"(?![\"']?\$|\[REDACTED\])[^\s\"']{6,}"
        ),
        rf"\1{REDACTED}",
    ),
]


def redact_credentials(text: str) -> str:
    """Mask common credential shapes: PEM private keys, ``Bearer``/``Basic`` header values,
    ``sk-``/``sk_live_`` keys, AWS key ids (``AKIA...``) and secret keys, GitHub, Slack and
    Google API tokens, JSON Web Tokens, passwords in URLs (``scheme://user:pw@host``),
    quoted ``password = "..."`` literals and ``PASSWORD=...`` environment lines.

    A heuristic: it errs towards keeping ordinary text (hashes, UUIDs, code that reads a
    secret from the environment) and will miss secrets of other shapes.
    """
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def _value(value: Any, redact: Redactor) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_value(v, redact) for v in value]
    if isinstance(value, dict):
        return {k: _value(v, redact) for k, v in value.items()}
    return value


def _data(block: DataBlock, redact: Redactor) -> DataBlock:
    if isinstance(block.source, URLSource) and not block.source.url.startswith("data:"):
        source = block.source.model_copy(update={"url": redact(block.source.url)})
        return block.model_copy(update={"source": source})
    return block


def redact_tool_result(block: ToolResultBlock, redact: Redactor) -> ToolResultBlock:
    """``block`` with its text (and data URLs) passed through ``redact``."""
    if isinstance(block.output, str):
        output: str | list[ToolResultContent] = redact(block.output)
    else:
        output = [
            b.model_copy(update={"text": redact(b.text)})
            if isinstance(b, TextBlock)
            else _data(b, redact)
            for b in block.output
        ]
    return block.model_copy(update={"output": output})


def _block(block: ContentBlock, redact: Redactor) -> ContentBlock:
    if isinstance(block, TextBlock):
        return block.model_copy(update={"text": redact(block.text)})
    if isinstance(block, ThinkingBlock):
        return block.model_copy(update={"thinking": redact(block.thinking)})
    if isinstance(block, HintBlock):
        return block.model_copy(update={"hint": redact(block.hint)})
    if isinstance(block, ToolCallBlock):
        raw = None if block.raw_input is None else redact(block.raw_input)
        return block.model_copy(update={"input": _value(block.input, redact), "raw_input": raw})
    if isinstance(block, ToolResultBlock):
        return redact_tool_result(block, redact)
    return _data(block, redact)


def redact_messages(msgs: Sequence[Msg], redact: Redactor) -> list[Msg]:
    """Copies of ``msgs`` (same ids) with every text passed through ``redact``."""
    out: list[Msg] = []
    for msg in msgs:
        if isinstance(msg.content, str):
            content: str | list[ContentBlock] = redact(msg.content)
        else:
            content = [_block(b, redact) for b in msg.content]
        out.append(msg.model_copy(update={"content": content}))
    return out
