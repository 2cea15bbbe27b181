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
# Names that end in one of these hold a secret (``DB_PASSWORD``, ``SecretAccessKey``,
# ``client_secret``, ``GITHUB_TOKEN``); a name that goes on (``password_reset_view``,
# ``tokenizer``, ``max_tokens``) does not. Lower case: matched against the lowered text.
_NAME_END = (
    r"(?:password|passwd|secret|token|(?:api|access|private|secret)[_-]?key|apikey"
    r"|credentials?)"
)
# What is no value but code or a reference: ``$VAR``, ``${...}``, ``!vault``, ``[...``,
# or what is masked already.
_NOT_A_VALUE = r"(?![$!|>&*{\[(<%]|\[redacted\])"


def _keep_quotes(match: re.Match[str]) -> str:
    """``lead`` kept, the value masked inside its quotes (if it had any)."""
    value = match["value"]
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match['lead']}{quote}{REDACTED}{quote}"


_Replacement: TypeAlias = str | Callable[[re.Match[str]], str]


class _Rule:
    """A pattern, its replacement, and literals one of which any match contains: a text
    with none of them is not scanned (a scan of 10 MB costs 0.1-0.5 s; ``in`` 1 ms).

    Without a replacement, the pattern is lower case and matched against the lowered text
    (a case-insensitive scan is four times slower); its named groups are what is masked.
    """

    __slots__ = ("pattern", "replacement", "triggers")

    def __init__(self, pattern: str, replacement: _Replacement | None, *triggers: str) -> None:
        self.pattern = re.compile(pattern)
        self.replacement = replacement
        self.triggers = triggers

    def apply(self, text: str, lowered: str) -> str:
        """``text`` with this rule applied (``lowered`` is :func:`_lower` of it)."""
        if self.replacement is None:
            return _mask(self.pattern, text, lowered)
        return self.pattern.sub(self.replacement, text)


# Replacements keep the label (``Bearer``, ``user:``, ``password=``) so the agent still
# sees what was there. Order matters only for speed: each rule skips what is masked. A
# pattern starts with its literal, the word boundary checked after it (``AIza(?<!\wAIza)``
# is ``\bAIza``): the scan then jumps from one occurrence of the literal to the next, 30
# to 50 times faster than trying ``\b`` at every position.
_RULES: tuple[_Rule, ...] = (
    # PEM private keys; a key cut by truncation has no END line: mask its base64 run.
    _Rule(
        r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]{0,20000}?-----END \1PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:[A-Za-z0-9+/=:,\-\s]|\\[rn])*)",
        f"{REDACTED} private key",
        "PRIVATE KEY",
    ),
    # Authorization headers: a value with a digit, or a long one (not "Bearer tokens").
    _Rule(
        rf"b(?<!\wb)(?:earer|asic)\s+(?P<value>(?:(?={_TOKEN}*\d){_TOKEN}{{8,}}|{_TOKEN}{{24,}})=*)",
        None,
        "bearer",
        "basic",
    ),
    # OpenAI / Anthropic style keys (sk-..., sk-proj-..., sk-ant-...), Stripe keys.
    _Rule(r"sk-(?<!\wsk-)(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{20,}", REDACTED, "sk-"),
    _Rule(r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}", REDACTED, "k_live_", "k_test_"),
    # AWS access key ids (secret keys and session tokens go by their names, below).
    _Rule(
        r"A(?<!\wA)(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|ROA|PKA)[A-Z0-9]{16}\b",
        REDACTED,
        *["AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "AROA", "APKA"],
    ),
    # GitHub, Slack, Google API keys, JSON Web Tokens.
    _Rule(
        r"g(?<!\wg)(?:h[pousr]_[A-Za-z0-9]{36,}|ithub_pat_[A-Za-z0-9_]{22,})",
        REDACTED,
        *["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
    ),
    _Rule(r"xox(?<!\wxox)[abprse]-[A-Za-z0-9\-]{10,}", REDACTED, "xox"),
    _Rule(r"AIza(?<!\wAIza)[0-9A-Za-z_\-]{35}", REDACTED, "AIza"),
    _Rule(
        r"eyJ(?<!\weyJ)[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
        REDACTED,
        "eyJ",
    ),
    # Passwords in URLs: scheme://user:password@host.
    _Rule(
        r"\b[a-z][a-z0-9+.\-]*://[^\s:/@\"'<>]*:(?P<value>[^\s@/\"'<>]+)@",
        None,
        "://",
    ),
)

# Secrets told by a name: every match lies within a line holding one of these (lower
# case), so only such lines are scanned (``key`` and ``token`` are common words, but a
# scan of a 10 MB text costs 0.3-1 s a rule, a ``find`` of a word a few milliseconds).
_NAMED_TRIGGERS = ("pass", "pwd", "secret", "token", "key", "credential")

# DB_PASSWORD=value, export / declare -x / Docker "Env": ["POSTGRES_PASSWORD=..."],
# anywhere in a line; quoted or not; not $VAR. Upper case: matched as written.
_ENV = _Rule(
    r"(?P<lead>(?:PASSWORD|PASSWD|_PASS|SECRET|TOKEN|API_?KEY|(?:ACCESS|PRIVATE|SECRET)_KEY"
    r"|CREDENTIALS?)=)(?P<value>\"(?!\$|\[REDACTED\])[^\"\n]+\""
    r"|'(?!\$|\[REDACTED\])[^'\n]+'"
    r"|(?![$!|>&*{\[(<%\"'=]|\[REDACTED\])[^\s\"';&|,)}\]]+)",
    _keep_quotes,
)

# Matched against the lowered text (a case-insensitive scan is four times slower); each
# group that matched is what is masked.
_LOWER: tuple[re.Pattern[str], ...] = (
    # name = "literal", "SecretAccessKey": "...", 'api_key': '...' (quoted, so code such
    # as password=os.environ[...] stays).
    re.compile(
        rf"{_NAME_END}[\"']?\s*[:=]\s*([\"'])(?!\[redacted\]|\$)(?P<value>[^\"'\s]{{6,}})\1"
    ),
    # Connection strings: "host=db user=u password=x", "Server=.;Pwd=x;", "?password=x&".
    re.compile(
        r"(?:^|[;?&\s])(?:password|passwd|pwd)=(?!\[redacted\]|\$)"
        r"(?P<value>[^;&\s\"'<>(),]+)(?=[;&\s\"']|$)"
    ),
    # Command-line flags: --password=x, --db-password x, --api-key 'x' (not $VAR, not a
    # next flag).
    re.compile(
        r"--[a-z0-9-]{0,40}?(?:password|passwd|token|secret|api-?key|access-?key)(?:=|[ \t]+)"
        r"(?:\"(?!\$)(?P<dq>[^\"\n]+)\"|'(?!\$)(?P<sq>[^'\n]+)'"
        rf"|{_NOT_A_VALUE}(?![-\"'])(?P<value>[^\s\"']+))"
    ),
)
# YAML / INI / .env lines: "password: x", "db_password = x", "- token: x". Not code: a
# value that is a name (password = password, self.token = token, None), a call or an
# index is left. Anchored at a line start.
_LINE = re.compile(
    r"(?m)^[ \t]*(?:-[ \t]+)?[\"']?[\w.\-]{0,64}?"
    rf"{_NAME_END}[\"']?[ \t]*[:=][ \t]*"
    rf"{_NOT_A_VALUE}(?![\"'])(?![a-z_.]+[ \t]*[;,]?[ \t]*(?:#|$))"
    r"(?P<value>[^\s#;,()\[\]{}]+)(?=[ \t]*[;,]?[ \t]*(?:#.*)?$)"
)


def redact_credentials(text: str) -> str:
    """Mask common credential shapes: PEM private keys, ``Bearer``/``Basic`` header values,
    ``sk-``/``sk_live_`` keys, AWS key ids (``AKIA...``), GitHub, Slack and Google API
    tokens, JSON Web Tokens, passwords in URLs (``scheme://user:pw@host``) and connection
    strings (``password=x;``), and the value of anything named like a secret
    (``*PASSWORD``, ``*_TOKEN``, ``*SECRET``, ``*_API_KEY``, ``SecretAccessKey``,
    ``SessionToken``): ``NAME=value`` anywhere in a line (``export``, ``declare -x``,
    Docker's ``"Env"``), ``"name": "value"`` literals, ``--password x`` flags and YAML /
    INI ``password: x`` lines.

    A heuristic: it errs towards keeping ordinary text (hashes, UUIDs, base64, code that
    reads a secret from the environment or passes it on by name) and will miss secrets of
    other shapes (an unquoted YAML value of letters only, a password with spaces).
    """
    # Lowered once: a rule's replacement adds no trigger ("[REDACTED]", labels kept), so
    # a trigger missing from the original text is missing from every later one.
    lowered = _lower(text)
    for rule in _RULES:
        haystack = lowered if rule.replacement is None else text
        if any(t in haystack for t in rule.triggers):
            masked = rule.apply(text, lowered)
            if masked is not text:
                text, lowered = masked, _lower(masked)
    parts: list[str] = []
    done = 0
    for start, end, whole in _spans_with(text, lowered, _NAMED_TRIGGERS):
        start = max(start, done)
        parts += (text[done:start], _named(text[start:end], whole=whole))
        done = end
    parts.append(text[done:])
    return "".join(parts)


def _lower(text: str) -> str:
    """``text`` in lower case, the same length (offsets in one are offsets in the other):
    the few characters that lower to two (``İ``) are kept as they are."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _named(text: str, *, whole: bool) -> str:
    """``text`` with the values of secrets told by a name masked; ``whole``: it is whole
    lines (else a part of a long line: the rule anchored at a line start is skipped)."""
    text = _ENV.apply(text, text)
    for pattern in (*_LOWER, _LINE) if whole else _LOWER:
        text = _mask(pattern, text, _lower(text))
    return text


def _mask(pattern: re.Pattern[str], text: str, lowered: str) -> str:
    """``text`` with the named groups of every match of ``pattern`` in ``lowered`` (of the
    same length) masked; ``text`` itself when nothing matched."""
    parts: list[str] = []
    done = 0
    for match in pattern.finditer(lowered):
        for name, value in match.groupdict().items():
            if value is not None:
                start, end = match.span(name)
                parts += (text[done:start], REDACTED)
                done = end
    return "".join((*parts, text[done:])) if parts else text


_GAP = 4096  # spans closer than this are scanned as one: fewer, larger scans
_LONG = 65_536  # a line longer (base64, minified code) is scanned around each trigger only
_AROUND = (256, 4096)  # that much before and after the trigger


def _spans_with(text: str, lowered: str, words: Sequence[str]) -> list[tuple[int, int, bool]]:
    """``(start, end, whole)`` spans of ``text`` to scan, in order: the line holding one
    of ``words`` (looked for in ``lowered``) and the next one (a value may follow its name
    on the next line), or, in a line over ``_LONG``, the part ``_AROUND`` the word
    (``whole`` False: rules anchored at a line start do not apply)."""
    spans: list[tuple[int, int, bool]] = []
    for word in words:
        at = lowered.find(word)
        while at != -1:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end == -1 else end
            if end - start > _LONG:
                start, end = max(start, at - _AROUND[0]), min(end, at + _AROUND[1])
                spans.append((start, end, False))
            else:
                after = text.find("\n", end + 1)
                end = len(text) if after == -1 or after - end > _LONG else after
                spans.append((start, end, True))
            at = lowered.find(word, end)
    spans.sort()
    merged: list[tuple[int, int, bool]] = []
    for start, end, whole in spans:
        if merged and whole == merged[-1][2] and start <= merged[-1][1] + _GAP:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end), whole)
        else:
            merged.append((start, end, whole))
    return merged


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
