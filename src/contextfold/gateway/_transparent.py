"""Transparent mode: context management for clients that ask for none (Claude Code behind
``ANTHROPIC_BASE_URL``), built so it never costs more than no gateway.

The provider's prompt cache pays for a prefix once and reads it at a tenth of the price
after; a gateway that rewrites old content every turn turns those reads into writes
(users of other gateways report bills 2-7x higher). So what is forwarded is a function
of the client's history and one small per-conversation state (:class:`SessionState`):

- the client's first ``cut`` messages are replaced by one user message holding the
  summary of the latest compaction (none before the first): the prefix changes once per
  compaction, never in between;
- every other message is forwarded as the client sent it, except a tool result larger
  than ``tool_result_limit``, cut to its head and tail by a pure function of its content:
  the same bytes every time it is resent, so only new content is ever transformed;
- a compaction happens when the forwarded request passes ``trigger`` x ``window`` tokens;
  it keeps the newest messages (up to ``keep`` x ``window`` tokens, from an assistant
  message so no tool call loses its result) and summarizes the rest, but only when the
  rewritten part costs no more than reading what it replaces (``cost_guard``), unless the
  request would not fit the window;
- cache breakpoints are added where the client placed none, and at the end of what was
  forwarded last time (:mod:`._breakpoints`).

A history that does not start with the messages the state summarized (the client
compacted or rewrote it, or a side request shares the key) is forwarded as a new
conversation; the state is replaced only if that request compacts itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from .._logging import logger
from ..context import (
    DEFAULT_COMPRESSION_PROMPT,
    DEFAULT_SUMMARY_TEMPLATE,
    BackgroundConfig,
    Summarizer,
    SummaryRequest,
    SummarySchema,
    render_summary,
    safe_format,
)
from ..message import Msg
from ..token import TokenCounter
from ._breakpoints import place_breakpoints
from ._compaction import SUMMARY_PREFIX
from ._count import CountCache, Tally, message_of
from ._prefix import Counted, Known
from ._result_cut import TRUNCATION_NOTE, ResultCut, cut_message
from ._retrieval import READ_TOOL, Offload, anthropic_read_tool
from ._sessions import SessionState, content_digest

__all__ = [
    "ANTHROPIC_SHAPE",
    "TRUNCATION_NOTE",
    "Forwarded",
    "ResultCut",
    "TransparentPolicy",
    "WireShape",
    "forward",
    "offloading",
    "offloading_tools",
    "view",
]


@dataclass(frozen=True)
class TransparentPolicy:
    """What transparent mode does on one route (``serve --window ...``).

    ``window`` is the model's context window in the gateway counter's tokens; the
    forwarded request is compacted when it passes ``trigger`` x ``window`` and keeps its
    newest ``keep`` x ``window`` tokens word for word. ``tool_result_limit`` (tokens;
    ``None``: off) cuts larger tool results to their head and tail when they arrive.
    ``summarize_with`` is who writes summaries: the app's summarizer (extractive by
    default, no model call) or ``"model"``, the request's own model through the upstream.
    ``breakpoints`` adds Anthropic cache breakpoints (see :mod:`._breakpoints`).
    ``offload`` keeps the whole of each cut result in the conversation's workspace and
    adds the read-back tool (:mod:`._retrieval`) to requests that carry tools; the
    gateway answers the model's calls to it itself, in at most ``read_rounds`` extra
    upstream calls per request.
    """

    window: int = 200_000
    trigger: float = 0.8
    keep: float = 0.25
    tool_result_limit: int | None = None
    summarize_with: Literal["extractive", "model"] = "extractive"
    breakpoints: bool = True
    cost_guard: float | None = 0.08
    """A compaction rewrites the summary and the kept messages at the cache-write price,
    where sending the request uncompacted would read its messages at the cache-read
    price: it happens only when the rewritten messages are at most this fraction of
    those read (Anthropic: $0.30 read / $3.75 write = 0.08), so the compacting turn
    costs no more than the turn it replaces, and every later turn, being shorter with
    the same prefix rules, costs no more either. ``keep`` is lowered for that when it
    must; a request over ``window`` is compacted regardless. ``None``: no guard."""
    offload: bool = True
    read_rounds: int = 4
    """Extra upstream calls per request in which the gateway answers the model's calls
    to the read-back tool itself; 0 offers no read-back tool, so nothing is offloaded."""
    background: BackgroundConfig | None = None
    """Compaction prepared in the background (the engine's own
    :class:`~contextfold.context.BackgroundConfig` and policy, see
    :mod:`._transparent_ahead`): the summary is written while the client works, and
    the request that passes the trigger does not wait for it. ``None``: at the trigger."""

    def __post_init__(self) -> None:
        if self.window <= 0:
            raise ValueError(f"window must be positive, got {self.window}")
        if not 0 < self.trigger <= 1:
            raise ValueError(f"trigger must be in (0, 1], got {self.trigger}")
        if not 0 < self.keep < self.trigger:
            raise ValueError(f"keep must be in (0, trigger), got {self.keep}")
        if self.tool_result_limit is not None and self.tool_result_limit < 64:
            raise ValueError(f"tool_result_limit must be at least 64, got {self.tool_result_limit}")
        if self.cost_guard is not None and not 0 < self.cost_guard <= 1:
            raise ValueError(f"cost_guard must be in (0, 1], got {self.cost_guard}")
        start = self.background.start_ratio if self.background is not None else None
        if start is not None and not self.keep < start < self.trigger:
            raise ValueError(f"background.start_ratio must be in (keep, trigger), got {start}")
        if not 0 <= self.read_rounds <= 16:
            raise ValueError(f"read_rounds must be in [0, 16], got {self.read_rounds}")
        if self.summarize_with not in ("extractive", "model"):
            raise ValueError(
                f"summarize_with must be 'extractive' or 'model', got {self.summarize_with!r}"
            )


@dataclass(frozen=True)
class Forwarded:
    """What to send upstream for one request, and the conversation's state after it."""

    body: dict[str, Any]
    state: SessionState
    compacted: bool
    input_tokens: int
    """Tokens of ``body`` by the gateway's counter."""
    original_tokens: int
    """Tokens of the client's request as sent."""
    offloads: tuple[Offload, ...] = ()
    """The whole text of every result cut in ``body``, to keep in the workspace before
    ``body`` is sent (its notes name them)."""

    @property
    def reads(self) -> bool:
        """Whether ``body`` carries the read-back tool (the answer must be watched)."""
        tools = self.body.get("tools")
        return isinstance(tools, list) and any(
            isinstance(t, dict) and t.get("name") == READ_TOOL for t in tools
        )

    counted: Counted | None = None
    """How it was counted (what the conversation's next request can reuse)."""


def _digests(messages: Sequence[Any]) -> list[str]:
    """``out[i]``: the chained digest of ``messages[:i]``."""
    out = [""]
    for message in messages:
        out.append(content_digest(out[-1], message))
    return out


def _offloads(policy: TransparentPolicy) -> bool:
    """Offload on, results cut, and at least one read-back round allowed (with none, the
    tool could never be answered: results are only cut)."""
    return policy.offload and policy.tool_result_limit is not None and policy.read_rounds > 0


def offloading(body: dict[str, Any], policy: TransparentPolicy) -> bool:
    """Whether ``body`` gets offload and the read-back tool: the policy says so, results
    are cut, and the client sends tools (an agent; the tool goes after them). A client
    tool of the tool's own name is refused (``ValueError``: the request fails open)."""
    tools = body.get("tools")
    if not _offloads(policy) or not isinstance(tools, list):
        return False
    if any(isinstance(t, dict) and t.get("name") == READ_TOOL for t in tools):
        raise ValueError(f"the client has a tool named {READ_TOOL}: offload is off")
    return bool(tools)


def offloading_tools(tools: Any, names: list[Any], policy: TransparentPolicy) -> bool:
    """:func:`offloading` for OpenAI's tool shapes (``names``: the client's tool names)."""
    if not _offloads(policy) or not isinstance(tools, list):
        return False
    if READ_TOOL in names:
        raise ValueError(f"the client has a tool named {READ_TOOL}: offload is off")
    return bool(tools)


def _with_tool(out: dict[str, Any], cut: ResultCut) -> dict[str, Any]:
    """``out`` with the read-back tool last in ``tools`` when this request offloads."""
    if cut.offload:
        out["tools"] = [*out["tools"], anthropic_read_tool()]
    return out


def _summary_message(summary: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": SUMMARY_PREFIX + summary}]}


def _is_assistant(items: Sequence[Any], k: int) -> bool:
    return isinstance(items[k], dict) and items[k].get("role") == "assistant"


def _decoded(messages: Sequence[Any]) -> list[Msg]:
    return [message_of(m) for m in messages]


@dataclass(frozen=True)
class WireShape:
    """What differs between APIs in transparent mode; the rules (cut points, trigger,
    cost guard, state, offload) are the same for every route.

    ``transform`` cuts a message's oversized tool results (a pure function of its
    content); ``summary_message`` is the message the summary travels in; ``turn_start``
    says whether the kept messages may start at ``items[k]`` (a model turn's first item,
    so no call loses its result); ``decode`` and ``count_as`` read wire messages as
    ``Msg`` for the summarizer and the counter; ``offloading`` and ``with_tool`` decide on
    and add the read-back tool; ``breakpoints``: Anthropic cache breakpoints.
    """

    transform: Callable[[Any, ResultCut], Any]
    summary_message: Callable[[str], dict[str, Any]]
    breakpoints: bool
    decode: Callable[[Sequence[Any]], list[Msg]] = _decoded
    turn_start: Callable[[Sequence[Any], int], bool] = _is_assistant
    count_as: Callable[[Any], Msg] = message_of
    offloading: Callable[[dict[str, Any], TransparentPolicy], bool] = offloading
    with_tool: Callable[[dict[str, Any], ResultCut], dict[str, Any]] = _with_tool


ANTHROPIC_SHAPE = WireShape(cut_message, _summary_message, breakpoints=True)
"""Anthropic Messages: ``tool_result`` blocks cut, the summary as a text block."""


def _messages(
    client: Sequence[Any], state: SessionState, cut: ResultCut, shape: WireShape
) -> list[Any]:
    tail = [shape.transform(m, cut) for m in client[state.cut :]]
    return [shape.summary_message(state.summary), *tail] if state.summary is not None else tail


def _cut_for(
    body: dict[str, Any], policy: TransparentPolicy, counter: TokenCounter, shape: WireShape
) -> ResultCut:
    return ResultCut(policy.tool_result_limit, counter, shape.offloading(body, policy), {})


def _continued(state: SessionState, digests: Sequence[str]) -> SessionState:
    """``state`` if the history still starts with what it summarized, else a new state."""
    if state.cut < len(digests) and digests[state.cut] == state.cut_digest:
        return state
    return SessionState()


def view(
    body: dict[str, Any],
    state: SessionState,
    policy: TransparentPolicy,
    counter: TokenCounter,
    shape: WireShape = ANTHROPIC_SHAPE,
    *,
    known: Known | None = None,
) -> dict[str, Any]:
    """The body that would be forwarded with ``state``, no compaction run (what
    ``count_tokens`` counts); ``known`` as for :func:`forward`."""
    client = body.get("messages") or []
    state = _continued(state, known.digests if known is not None else _digests(client))
    cut = _cut_for(body, policy, counter, shape)
    return shape.with_tool({**body, "messages": _messages(client, state, cut, shape)}, cut)


def _new_cut(
    client: Sequence[Any], state: SessionState, budget: int, tally: Tally, shape: WireShape
) -> int | None:
    """Where the kept messages start after a compaction: the earliest turn start (an
    assistant message on Anthropic's wire) after ``state.cut`` from which the rest fits
    ``budget``, else the latest one (the newest turn is always kept); ``None`` when there
    is nothing to summarize."""
    candidates = [k for k in range(state.cut + 1, len(client)) if shape.turn_start(client, k)]
    if not candidates:
        return None
    sizes = [tally.measure(m) for m in client]
    suffix = [0] * (len(client) + 1)
    for i in range(len(client) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + sizes[i]
    for k in candidates:
        if suffix[k] <= budget:
            return k
    return candidates[-1]


async def _summarize(
    messages: Sequence[Any], previous: str | None, summarizer: Summarizer, shape: WireShape
) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    shown = [shape.summary_message(previous), *messages] if previous is not None else messages
    request = SummaryRequest(
        messages=shape.decode(shown),
        previous=None,
        instructions=safe_format(DEFAULT_COMPRESSION_PROMPT, {"current_time": now}),
        hints=(),
        schema=SummarySchema.model_json_schema(),
    )
    result = await summarizer.summarize(request)
    return render_summary(DEFAULT_SUMMARY_TEMPLATE, result.fields)


ITEMS_HEADING = "Tool results the gateway keeps whole (read them with " + READ_TOOL + "):"
"""Heads the list of offloaded items a summary ends with, so they stay readable after
the messages that named them were summarized."""
_ITEM_LINE = re.compile(r"^- item r[0-9a-f]{16}: .*$", re.MULTILINE)
MAX_LISTED_ITEMS = 50


def _listed(
    summary: str,
    previous: str | None,
    summarized: Sequence[Any],
    cut: ResultCut,
    shape: WireShape,
) -> str:
    """``summary`` followed by the items offloaded from ``summarized`` and those the
    ``previous`` summary listed (the newest :data:`MAX_LISTED_ITEMS`): a pure function of
    the history, written once per compaction, so the prefix stays byte-stable."""
    if not cut.offload:
        return summary
    probe = ResultCut(cut.limit, cut.counter, True, {})
    for message in summarized:
        shape.transform(message, probe)
    lines = _ITEM_LINE.findall(previous or "")
    for offload in probe.offloads.values():
        first = offload.text.strip().split("\n", 1)[0][:80]
        lines.append(f"- item {offload.id}: {len(offload.text)} characters, starting {first!r}")
    kept = list(dict.fromkeys(lines))[-MAX_LISTED_ITEMS:]
    return f"{summary}\n\n{ITEMS_HEADING}\n" + "\n".join(kept) if kept else summary


async def _compacted(
    client: Sequence[Any],
    digests: Sequence[str],
    state: SessionState,
    policy: TransparentPolicy,
    forwarded: Sequence[Any],
    tokens: int,
    tally: Tally,
    summarizer: Summarizer,
    offload: ResultCut,
    shape: WireShape,
) -> SessionState | None:
    """The state after a compaction of the request whose messages are ``forwarded``
    (``tokens`` in all, counted by ``tally``), or
    ``None`` when it should not happen (nothing to summarize, the summarizer failed, or
    the cost guard refused and the request still fits the window)."""
    before = sum(tally.measure(m) for m in forwarded)  # read again if not compacted
    shown = _cut_for({}, policy, tally.counter, shape)  # the summarizer reads cut results
    budget = int(policy.keep * policy.window)
    # A model's summary costs a call: none is made for an attempt the cost guard refuses
    # whatever the summary says (the kept messages alone over it, the request within the
    # window), and the first attempt keeps no more than the guard can pass.
    passable: float | None = None
    if policy.summarize_with == "model" and policy.cost_guard is not None:
        passable = policy.cost_guard * before if tokens <= policy.window else None
    if passable is not None:
        budget = min(budget, int(passable))
    done: SessionState | None = None
    for _ in range(2):
        cut = _new_cut(client, state, budget, tally, shape)
        if cut is None:
            return None
        if passable is not None and sum(tally.measure(m) for m in client[cut:]) > passable:
            return None
        try:
            summary = await _summarize(
                [shape.transform(m, shown) for m in client[state.cut : cut]],
                state.summary,
                summarizer,
                shape,
            )
            summary = _listed(summary, state.summary, client[state.cut : cut], offload, shape)
        except Exception as exc:  # fail open: forward uncompacted, state unchanged
            logger.warning("gateway: transparent compaction failed (%s)", type(exc).__name__)
            return None
        done = SessionState(
            cut=cut, cut_digest=digests[cut], summary=summary, compactions=state.compactions + 1
        )
        head = tally.measure(shape.summary_message(summary))
        after = head + sum(tally.measure(m) for m in client[cut:])
        if policy.cost_guard is None or after <= policy.cost_guard * before:
            return done
        budget = int(policy.cost_guard * before) - head
        if budget <= 0:
            break
    return done if tokens > policy.window else None


async def forward(
    body: dict[str, Any],
    state: SessionState,
    policy: TransparentPolicy,
    *,
    counter: TokenCounter,
    summarizer: Summarizer,
    counts: CountCache | None = None,
    shape: WireShape = ANTHROPIC_SHAPE,
    compaction: bool = True,
    known: Known | None = None,
) -> Forwarded:
    """What to forward for ``body`` given the conversation's ``state`` (see the module
    docstring); compacts when the trigger is passed (unless ``compaction`` is false: the
    caller will not save the state, see ``SessionBusy``). A request that does not continue a
    compacted state is forwarded as a new conversation, and the state is kept unless
    that request compacts itself. A summarizer that fails leaves the
    state as it was (the request is forwarded uncompacted: fail open). ``known`` is
    what the conversation's previous request showed (:mod:`._prefix`): only the
    messages after it are digested and counted."""
    client = body.get("messages")
    if not isinstance(client, list):
        raise ValueError("messages: expected a list of messages")
    digests: Sequence[str] = known.digests if known is not None else _digests(client)
    kept = state
    state = _continued(state, digests)
    diverged = state is not kept and kept.summary is not None
    client_tally = Tally(
        counter, body, counts, base=known.client_base() if known else None, to_msg=shape.count_as
    )
    original = client_tally.total
    cut = _cut_for(body, policy, counter, shape)
    out = shape.with_tool({**body, "messages": _messages(client, state, cut, shape)}, cut)
    base = known.forwarded_base(state) if known is not None else None
    tally = Tally(counter, out, counts, base=base, to_msg=shape.count_as)
    tokens = tally.total
    compacted = False
    if compaction and tokens > policy.trigger * policy.window:
        done = await _compacted(
            client, digests, state, policy, out["messages"], tokens, tally, summarizer, cut, shape
        )
        if done is not None:
            state = done
            out = shape.with_tool({**body, "messages": _messages(client, state, cut, shape)}, cut)
            tally = Tally(counter, out, counts, to_msg=shape.count_as)
            tokens = tally.total
            compacted = True
    counted = Counted(state, client_tally, tally)
    previous_end: int | None = None
    seen, seen_digest = state.seen, state.seen_digest
    if seen == len(client) and seen_digest == digests[-1]:
        # The previous request again (a client's retry, maybe on another replica after
        # the first one died): its breakpoint where that request had it, same bytes.
        seen, seen_digest = state.before_seen, state.before_digest
    if state.cut < seen < len(digests) and digests[seen] == seen_digest:
        previous_end = seen - state.cut - 1 + (state.summary is not None)
    if policy.breakpoints and shape.breakpoints:
        out = place_breakpoints(out, previous_end=previous_end)
    state = SessionState(
        cut=state.cut,
        cut_digest=state.cut_digest,
        summary=state.summary,
        compactions=state.compactions,
        seen=len(client),
        seen_digest=digests[-1],
        before_seen=seen,
        before_digest=seen_digest,
    )
    if diverged and not compacted:
        # A side request under the same key (a probe, a rewind before the summary's end):
        # forwarded on its own, the conversation's compaction kept for its next turn.
        state = kept
    return Forwarded(out, state, compacted, tokens, original, tuple(cut.offloads.values()), counted)
