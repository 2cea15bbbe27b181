"""Counting for models without a local tokenizer: an over-estimate, corrected by usage."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..message import (
    DataBlock,
    HintBlock,
    Marker,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Usage,
    marker_of,
)
from ._images import ANTHROPIC_MAX_IMAGE_TOKENS, anthropic_image_tokens, block_image_size
from ._protocol import TokenCounter
from ._vocab import text_counter

__all__ = ["AnthropicEstimator", "CalibratedCounter"]

# Anthropic documents the tool-use system prompt (346 tokens with tool_choice auto/none,
# 313 with any/tool for Claude 4 models); the framing below is not published, so these
# are generous guesses that err high.
_TOOLS_SYSTEM_PROMPT = 346
_PER_MESSAGE = 7
_PER_BLOCK = 3
_PER_TOOL = 10
_REQUEST = 10


class AnthropicEstimator:
    """An over-estimate of Claude token counts (Claude's tokenizer is not public).

    Text: o200k_base tokens times ``factor`` (default 1.4), rounded up. Claude tokenizers
    produce more tokens than o200k_base for the same text (newer ones more still), and
    the factor is a margin chosen, not measured here: there is no Claude tokenizer or API
    to measure against offline. Images: Anthropic's documented ``width * height / 750``
    after scaling the long edge to 1568px, capped at 1600 (unknown size: 1600). Tools:
    the documented 346-token tool system prompt plus each definition's JSON. Framing:
    7 tokens per message, 3 per block, 10 per request (unpublished; guesses that err
    high). Wrap it in :class:`CalibratedCounter` to correct it with reported usage.
    """

    exact = False

    def __init__(
        self,
        *,
        factor: float = 1.4,
        image_max_edge: int = 1568,
        image_max_tokens: int = ANTHROPIC_MAX_IMAGE_TOKENS,
    ) -> None:
        if factor <= 0:
            raise ValueError(f"factor must be positive, got {factor}")
        self.factor = factor
        self.image_max_edge = image_max_edge
        self.image_max_tokens = image_max_tokens
        self.name = f"anthropic-estimate/o200k_base*{factor:g}/{image_max_edge}:{image_max_tokens}"

    def __repr__(self) -> str:
        return f"AnthropicEstimator(factor={self.factor})"

    def _scaled(self, texts: list[str]) -> int:
        if not texts:
            return 0
        count = text_counter("o200k_base")
        raw = sum(count(t) for t in texts)
        return math.ceil(raw * self.factor)

    def count_text(self, text: str) -> int:
        """Estimated tokens in ``text`` (never below its o200k_base count)."""
        return self._scaled([text]) if text else 0

    def _image(self, block: DataBlock) -> int:
        if block.kind != "image":  # documents: no local rule, count the payload as text
            payload = getattr(block.source, "data", None) or getattr(block.source, "url", "")
            return self.count_text(str(payload))
        return anthropic_image_tokens(
            block_image_size(block),
            max_edge=self.image_max_edge,
            max_tokens=self.image_max_tokens,
        )

    def count_message(self, msg: Msg) -> int:
        """Estimated tokens of ``msg`` with framing; cached on the message."""
        cached = msg.cached_tokens(self.name)
        if cached is not None:
            return cached
        texts: list[str] = [msg.role]
        fixed = _PER_MESSAGE
        for block in msg.blocks():
            fixed += _PER_BLOCK
            if isinstance(block, TextBlock):
                texts.append(block.text)
            elif isinstance(block, HintBlock):
                texts.append(block.hint)
            elif isinstance(block, ThinkingBlock):
                texts.append(block.thinking)
            elif isinstance(block, DataBlock):
                fixed += self._image(block)
            elif isinstance(block, ToolCallBlock):
                texts += [block.id, block.name, json.dumps(block.input, ensure_ascii=False)]
            elif isinstance(block, ToolResultBlock):
                texts.append(block.id)
                if isinstance(block.output, str):
                    texts.append(block.output)
                else:
                    for part in block.output:
                        if isinstance(part, TextBlock):
                            texts.append(part.text)
                        else:
                            fixed += self._image(part)
        count = fixed + self._scaled(texts)
        msg.cache_tokens(self.name, count)
        return count

    def count_tools(self, tools: Sequence[ToolSpec]) -> int:
        """The tool system prompt plus each definition as sent (``input_schema`` JSON)."""
        if not tools:
            return 0
        texts = [
            json.dumps(
                {"name": t.name, "description": t.description, "input_schema": t.parameters},
                ensure_ascii=False,
            )
            for t in tools
        ]
        return _TOOLS_SYSTEM_PROMPT + _PER_TOOL * len(tools) + self._scaled(texts)

    def count_request(self, messages: Sequence[Msg], tools: Sequence[ToolSpec] = ()) -> int:
        """Estimated tokens of a request."""
        return sum(self.count_message(m) for m in messages) + self.count_tools(tools) + _REQUEST


def _key(msg: Msg) -> str:
    # The system message is rebuilt for every request (new id), so it is keyed by content.
    if msg.role == "system":
        return (
            "system:" + hashlib.sha1(msg.model_dump_json(include={"content"}).encode()).hexdigest()
        )
    return msg.id


def _tools_key(tools: Sequence[ToolSpec]) -> str:
    text = json.dumps([t.model_dump() for t in tools], sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()


_MIN_GROWTH = 32
"""Estimated growth (tokens) between two observations below which no ratio is learned: a
few tokens of framing would make a noisy sample."""

_SMOOTHING = 0.5
"""Weight of a new ratio sample (the first one is taken as it is)."""


@dataclass(frozen=True)
class _Observation:
    length: int
    first: str
    last: str
    tools: str
    reported: int
    estimated: int


class CalibratedCounter:
    """A counter corrected by the input tokens the provider reported.

    After :meth:`observe` (the messages and tools of a request, and its reported usage),
    :meth:`calibrated_request` of a request that extends that one (same first and last
    message of the observed prefix, same tools) is ``reported + ratio x estimate(added
    since)``; any other request (after a compaction) gets the plain estimate, scaled up by
    the last observation's reported/estimated ratio when the estimator undercounted there
    (never scaled down). ``ratio`` is learned from
    consecutive observations that extend each other (reported growth over estimated
    growth: the first sample as it is, then smoothed; 1 until two such observations, and
    kept within [0.5, 2]): how the
    provider's tokenizer counts what our estimator counts, on this conversation's content.
    The ``TokenCounter`` methods delegate to the wrapped counter unchanged, so the
    running-total identity still holds; the correction is separate (:meth:`correction`,
    O(1) given the caller's estimate), to add to a running total.

    Error bound: the observed prefix contributes no error; only the messages added since
    the observation (true count ``A``) do, by the ratio's error on them. A request that does
    not extend the observation errs by how far that ratio is from its own. Without a learned
    ratio (``learn_ratio=False``, or before two observations) and with an estimator that
    errs within ``[-u, +o]`` times the true count, the error is within ``[-u * A, +o * A]``:
    with :class:`AnthropicEstimator` (which errs high, ``u = 0``) it never undercounts.
    A prefix message edited in place under the same id (a truncated tool
    result) keeps its observed, larger count: an overcount. The bound assumes the
    provider reports the whole prompt in ``Usage.input_tokens`` (our adapters do).
    """

    def __init__(self, inner: TokenCounter, *, learn_ratio: bool = True) -> None:
        self.inner = inner
        self.name = inner.name
        self.exact = inner.exact
        self.learn_ratio = learn_ratio
        self.ratio = 1.0
        """Provider tokens per estimated token of added content (see the class doc)."""
        self._samples = 0
        self._last: _Observation | None = None

    def __repr__(self) -> str:
        return f"CalibratedCounter({self.inner!r})"

    def count_text(self, text: str) -> int:
        """The wrapped counter's count."""
        return self.inner.count_text(text)

    def count_message(self, msg: Msg) -> int:
        """The wrapped counter's count (cached by it)."""
        return self.inner.count_message(msg)

    def count_tools(self, tools: Sequence[ToolSpec]) -> int:
        """The wrapped counter's count."""
        return self.inner.count_tools(tools)

    def count_request(self, messages: Sequence[Msg], tools: Sequence[ToolSpec] = ()) -> int:
        """The wrapped counter's estimate (uncorrected, so the identity holds)."""
        return self.inner.count_request(messages, tools)

    def observe(
        self, messages: Sequence[Msg], tools: Sequence[ToolSpec], usage: Usage | int
    ) -> None:
        """Learn from a request whose prompt the provider reported as ``usage``."""
        reported = usage if isinstance(usage, int) else usage.input_tokens
        # A trailing runtime note (the engine's usage hint) is sent but never stored, so
        # the next request will not extend it: match on the prefix before it.
        kept = len(messages)
        while kept and marker_of(messages[kept - 1]) is Marker.USAGE_HINT:
            kept -= 1
        if reported <= 0 or not kept:
            return  # nothing reported (some servers send no usage): keep what we had
        # The whole request as sent, trailing note included: the next request's correction
        # then takes the note's tokens back out.
        estimated = self.inner.count_request(messages, tools)
        previous = self._last
        if (
            self.learn_ratio
            and previous is not None
            and self._extends(previous, messages[:kept], tools)
            and estimated - previous.estimated >= _MIN_GROWTH
        ):
            sample = (reported - previous.reported) / (estimated - previous.estimated)
            blended = (
                sample if not self._samples else self.ratio + _SMOOTHING * (sample - self.ratio)
            )
            self.ratio = min(2.0, max(0.5, blended))
            self._samples += 1
        self._last = _Observation(
            length=kept,
            first=_key(messages[0]),
            last=_key(messages[kept - 1]),
            tools=_tools_key(tools),
            reported=reported,
            estimated=estimated,
        )

    @staticmethod
    def _extends(obs: _Observation, messages: Sequence[Msg], tools: Sequence[ToolSpec]) -> bool:
        return (
            len(messages) >= obs.length
            and _key(messages[0]) == obs.first
            and _key(messages[obs.length - 1]) == obs.last
            and _tools_key(tools) == obs.tools
        )

    def correction(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec] = (),
        *,
        estimate: int | None = None,
    ) -> int:
        """What to add to ``count_request(messages, tools)`` (``estimate``, when the caller
        has it): 0 unless it extends the last observed request, else that request's
        ``reported - estimated`` plus ``(ratio - 1)`` times the estimate of what was added;
        a request that does not extend it is scaled up by that request's reported/estimated
        ratio when the estimator undercounted (never down)."""
        obs = self._last
        if obs is None:
            return 0
        if not self._extends(obs, messages, tools):
            return self._scaled(obs, messages, tools, estimate)
        if self.ratio == 1.0:
            return obs.reported - obs.estimated
        current = self.count_request(messages, tools) if estimate is None else estimate
        return obs.reported - obs.estimated + round((self.ratio - 1) * (current - obs.estimated))

    def _scaled(
        self,
        obs: _Observation,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        estimate: int | None,
    ) -> int:
        """A request that does not extend the observed one (after a compaction): scaled by
        the observed whole-request ratio when the estimator undercounted, never down, so an
        estimator that errs high keeps its no-undercount guarantee."""
        if not self.learn_ratio or obs.estimated <= 0 or obs.reported <= obs.estimated:
            return 0
        current = self.count_request(messages, tools) if estimate is None else estimate
        return round((obs.reported / obs.estimated - 1) * current)

    def calibrated_request(self, messages: Sequence[Msg], tools: Sequence[ToolSpec] = ()) -> int:
        """Reported input tokens of the last observed request plus the estimate of what
        was added since; the plain estimate when the request does not extend it."""
        return self.count_request(messages, tools) + self.correction(messages, tools)
