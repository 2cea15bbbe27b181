"""Transparent mode's compaction prepared in the background (``TransparentPolicy.background``),
so the request that passes the trigger does not wait for a summary.

The engine's own policy, through :class:`~contextfold.context.Prefetch` (one per
conversation): once the forwarded request passes the lower mark, and at the rate it grows
the point where the client would wait comes within the summary's latency, the summary of a
snapshot (the request as it stands, keeping no more than a compaction at the trigger
would once the growth until then is added, its newest turn folded too when there is no
room for it: the model reads it before the swap) is written in a task of its own
while this request and the next ones are forwarded from the full context. At the trigger
the prepared state is swapped in, keeping every message that arrived after the snapshot;
if it is not ready, the request waits only for what is left of it, unless the whole
context still fits below ``wait_ratio`` of the window, in which case it is forwarded whole
(``background_deferred_total``). At most one summary is in flight per conversation.

Sound here because transparent mode's compaction is the gateway's own (the client asked
for none, and sees the same answer either way); it keeps the gateway's rules:

- never more than going direct: a request forwarded whole is what the client sent; a
  swap passes the same cost guard as a compaction at the trigger (rewritten messages at
  most ``cost_guard`` of those read), or it is dropped and the request is decided as
  without background; a conversation whose compaction the guard would refuse gets no
  background summary at all (it would be paid for and dropped); a background summary's
  tokens are counted (``summary_tokens_total{when="background"}``), dropped ones included;
- the state is the truth: a prepared summary applies only to the state it was made from
  (the same cut, digest and summary: not when another request or replica compacted) and
  to a history that still starts with the messages it folds; one the client edited or
  rewound is dropped at its next request, the others at the trigger, and one whose
  conversation left the memory (``size``) or whose gateway stopped is dropped too, each
  counted (``background_discarded_total`` by reason). Cancellation or failure leaves the
  conversation's state as it was: the swap is one state written under the conversation's
  hold, like any decision.

Not done where the client asked for compaction itself: Anthropic's ``compact_20260112``
(its ``compaction`` block must stand for every message before it, in the answer to the
request that crossed ``trigger``: a summary of an earlier snapshot would lose the messages
after it, and folding them in would take a second summary call, which Anthropic's one call
does not cost) and OpenAI's ``compact_threshold`` and ``/v1/responses/compact`` (the same:
one compaction item standing for the whole input, at the threshold). There the summary is
written when the trigger is crossed, as documented. The prepared summaries live in this
process's memory: with several replicas, one taken by another replica is not found there,
and that replica compacts at the trigger as before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._logging import logger
from ..context import (
    BackgroundCompactionEvent,
    ContextConfig,
    ContextEvent,
    Prefetch,
    Summarizer,
    SummaryRequest,
    SummaryResult,
)
from ..message import Usage
from ..token import TokenCounter
from ._count import CountCache
from ._metrics import Metrics
from ._prefix import Known
from ._sessions import SessionState, content_digest
from ._transparent import ANTHROPIC_SHAPE, Forwarded, TransparentPolicy, WireShape, forward

__all__ = ["Ahead", "MeteredSummarizer", "PreparedCut"]

_REASONS = {
    "the context changed": "stale",
    "refused by the cost guard": "cost_guard",
    "nothing to fold": "nothing",
}


def _reason(text: str | None) -> str:
    if text is None:
        return "other"
    if text.startswith("failed"):
        return "failed"
    return _REASONS.get(text, "ended")


class MeteredSummarizer:
    """A summarizer whose calls' cost is added to the gateway's metrics (``when``:
    ``blocking`` or ``background``): the result's usage, else what ``spent`` (the
    request's model) grew by. Remembers whether its last call failed."""

    def __init__(
        self,
        inner: Summarizer,
        metrics: Metrics,
        when: str,
        spent: Callable[[], Usage] | None = None,
    ) -> None:
        self._inner = inner
        self._metrics = metrics
        self._when = when
        self._spent = spent
        self.failed = False

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        before = self._spent() if self._spent is not None else Usage()
        self.failed = False
        try:
            result = await self._inner.summarize(request)
        except BaseException:
            self.failed = True
            self._record(before)
            raise
        self._record(before, result.usage)
        return result

    def _record(self, before: Usage, usage: Usage | None = None) -> None:
        if usage is None and self._spent is not None:
            now = self._spent()
            usage = Usage(
                input_tokens=now.input_tokens - before.input_tokens,
                output_tokens=now.output_tokens - before.output_tokens,
                cache_read_tokens=now.cache_read_tokens - before.cache_read_tokens,
                cache_write_tokens=now.cache_write_tokens - before.cache_write_tokens,
            )
        if usage is None:
            return
        for kind, n in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
        ):
            if n:
                self._metrics.summary_tokens[(self._when, kind)] += n


@dataclass(frozen=True)
class PreparedCut:
    """A conversation's next state, prepared from ``base`` (its cut, digest and summary)
    and not yet written: the client's first ``cut`` messages (chained digest
    ``cut_digest``) replaced by ``summary``. ``snapshot`` messages were sent when it
    started (chained digest ``snapshot_digest``)."""

    base: tuple[int, str, str | None]
    cut: int
    cut_digest: str
    summary: str
    compactions: int
    snapshot: int
    snapshot_digest: str


_REPLY: dict[str, Any] = {"role": "assistant", "content": "(the reply to this request)"}
"""Stands for the model's reply after a snapshot taken below the trigger: where the kept
messages start when the snapshot's newest turn is folded (a turn start on every route)."""


def _core(state: SessionState) -> tuple[int, str, str | None]:
    return (state.cut, state.cut_digest, state.summary)


def _digest_at(
    client: Sequence[Any], state: SessionState, k: int, known: Known | None = None
) -> str | None:
    """The chained digest of ``client[:k]``: from what the conversation's previous request
    showed (``known``, computed once per request), else from ``state``'s (which
    ``client`` continues), hashing only the messages after its cut."""
    if not state.cut <= k <= len(client):
        return None
    if known is not None:
        return known.digests[k]
    digest = state.cut_digest
    for message in client[state.cut : k]:
        digest = content_digest(digest, message)
    return digest


def _state_of(state: SessionState, prepared: PreparedCut) -> SessionState:
    """``state`` with ``prepared``'s cut and summary (what the previous request showed
    kept, for its breakpoint)."""
    return replace(
        state,
        cut=prepared.cut,
        cut_digest=prepared.cut_digest,
        summary=prepared.summary,
        compactions=prepared.compactions,
    )


def _messages_tokens(done: Forwarded) -> tuple[int, int]:
    """Tokens of the forwarded messages, and how many there are."""
    assert done.counted is not None
    n = len(done.body.get("messages") or [])
    return done.counted.forwarded.messages_before(n), n


class Ahead:
    """The background compaction of every conversation in transparent mode, for one app:
    one :class:`~contextfold.context.Prefetch` per conversation, the most recent ``size``
    kept (a conversation pushed out has its summary dropped: ``ended``)."""

    def __init__(self, metrics: Metrics, *, size: int = 1024) -> None:
        self._metrics = metrics
        self._size = size
        self._runs: OrderedDict[str, Prefetch[PreparedCut]] = OrderedDict()
        self._snapshots: dict[str, PreparedCut | tuple[tuple[int, str, str | None], int, str]] = {}
        self._refused: dict[str, tuple[int, str, str | None]] = {}
        """Conversations whose swap the cost guard refused, by the state it was refused in:
        none is prepared again until that state changes."""

    async def _emit(self, event: ContextEvent) -> None:
        if not isinstance(event, BackgroundCompactionEvent):
            return
        self._metrics.background[event.phase] += 1
        if event.phase == "discarded":
            self._metrics.background_discarded[_reason(event.reason)] += 1
        if event.phase in ("applied", "discarded"):
            self._metrics.background_wait_sum += event.waited_s
        logger.debug(
            "gateway: background compaction %s (%.3f s, waited %.3f s%s)",
            event.phase,
            event.duration_s,
            event.waited_s,
            f", {event.reason}" if event.reason else "",
        )

    async def _run(self, key: str) -> Prefetch[PreparedCut]:
        run = self._runs.get(key)
        if run is not None:
            self._runs.move_to_end(key)
            return run
        run = Prefetch[PreparedCut](self._emit)
        self._runs[key] = run
        while len(self._runs) > self._size:
            old, gone = self._runs.popitem(last=False)
            self._snapshots.pop(old, None)
            self._refused.pop(old, None)
            await gone.discard("the session ended")
        return run

    async def close(self) -> None:
        """Drop every summary in flight or prepared (the gateway stops)."""
        runs, self._runs = self._runs, OrderedDict()
        self._snapshots.clear()
        for run in runs.values():
            await run.discard("the gateway stopped")

    async def forward(
        self,
        key: str,
        body: dict[str, Any],
        state: SessionState,
        policy: TransparentPolicy,
        *,
        counter: TokenCounter,
        summarizer: Summarizer,
        spent: Callable[[], Usage] | None = None,
        counts: CountCache | None = None,
        known: Known | None = None,
        shape: WireShape = ANTHROPIC_SHAPE,
    ) -> Forwarded:
        """What to forward for ``body`` (see :func:`._transparent.forward`; ``shape``: the
        route's, ``body["messages"]`` its messages), with the
        conversation's summary prepared in the background when ``policy.background`` is
        set (see the module docstring)."""
        blocking = MeteredSummarizer(summarizer, self._metrics, "blocking", spent)
        metered = MeteredSummarizer(summarizer, self._metrics, "background", spent)
        common: dict[str, Any] = {
            "counter": counter,
            "counts": counts,
            "known": known,
            "shape": shape,
        }
        background = policy.background
        if background is None:
            return await forward(body, state, policy, summarizer=blocking, **common)
        plain = await forward(body, state, policy, summarizer=blocking, compaction=False, **common)
        if plain.counted is None or plain.counted.state is not state:
            # A new conversation, or a side request under the key: decided as it was.
            return await forward(body, state, policy, summarizer=blocking, **common)
        client: list[Any] = body["messages"]
        run = await self._run(key)
        await self._drop_stale(key, run, client, state, known)
        tokens = plain.input_tokens
        run.observe(tokens)
        config = ContextConfig(
            trigger_ratio=policy.trigger, reserve_ratio=policy.keep, background=background
        )
        trigger = int(policy.trigger * policy.window)
        deadline = Prefetch.deadline(config, policy.window)

        # What the swap needs, bound to this request.
        def verdict(p: PreparedCut, *, early: bool = False) -> bool | str:
            return self._verdict(key, p, client, state, policy, plain, common, early=early)

        async def swap() -> Forwarded | None:
            taken = await run.take(verdict)
            self._snapshots.pop(key, None)
            if taken is None:
                return None
            done = await forward(
                body, _state_of(state, taken[0]), policy, summarizer=blocking, **common
            )
            return replace(done, compacted=True)

        if tokens <= trigger:
            ready = run.peek()
            if ready is not None and verdict(ready, early=True) is True:
                # Fast growth: the next summary is due as soon as this one is swapped in,
                # so it is swapped in now (as the engine does), when it frees enough.
                after = (
                    tokens - _messages_tokens(plain)[0] + self._after(ready, state, plain, common)
                )
                worth = max(int(policy.keep * policy.window), run.typical_step)
                if tokens - after >= worth and run.due(after, config, policy.window):
                    swapped = await swap()
                    if swapped is not None:
                        return swapped
            if not run.busy and run.due(tokens, config, policy.window):
                await self._start(key, run, body, state, policy, plain, metered, common)
            return plain
        if not run.busy and tokens <= deadline:
            # Past the trigger at one step with none in flight: one starts here, and the
            # request goes whole while it fits (as the engine does).
            await self._start(key, run, body, state, policy, plain, metered, common)
        if run.busy and run.defers(tokens, deadline):
            self._metrics.background_deferred += 1
            return plain
        if run.busy:
            swapped = await swap()
            if swapped is not None:
                return swapped
        return await forward(body, state, policy, summarizer=blocking, **common)

    async def _drop_stale(
        self,
        key: str,
        run: Prefetch[PreparedCut],
        client: Sequence[Any],
        state: SessionState,
        known: Known | None,
    ) -> None:
        """Drop the conversation's summary as soon as it cannot apply: its state was
        replaced (another request or replica compacted), or the client did not extend its
        previous request and the history no longer starts with the snapshot."""
        refused = self._refused.get(key)
        if refused is not None and refused != _core(state):
            del self._refused[key]
        snapshot = self._snapshots.get(key)
        if snapshot is None or not run.busy:
            return
        base, size, digest = (
            (snapshot.base, snapshot.snapshot, snapshot.snapshot_digest)
            if isinstance(snapshot, PreparedCut)
            else snapshot
        )
        stale = base != _core(state)
        if not stale and _digest_at(client, state, state.seen, known) != state.seen_digest:
            stale = _digest_at(client, state, size, known) != digest
        if stale:
            self._snapshots.pop(key, None)
            await run.discard("the context changed")

    def _verdict(
        self,
        key: str,
        prepared: PreparedCut,
        client: Sequence[Any],
        state: SessionState,
        policy: TransparentPolicy,
        plain: Forwarded,
        common: dict[str, Any],
        *,
        early: bool = False,
    ) -> bool | str:
        """Whether ``prepared`` applies to this request (``False``: stale), or why not;
        ``early``: asked below the trigger, a refusal is not remembered."""
        known: Known | None = common["known"]
        shape: WireShape = common["shape"]
        k = prepared.cut
        if prepared.base != _core(state) or not state.cut < k < len(client):
            return False
        if not shape.turn_start(client, k):
            return False
        if _digest_at(client, state, k, known) != prepared.cut_digest:
            return False
        if policy.cost_guard is None or plain.input_tokens > policy.window:
            return True
        before, _ = _messages_tokens(plain)
        if self._after(prepared, state, plain, common) <= policy.cost_guard * before:
            return True
        if not early:
            self._refused[key] = _core(state)
        return "refused by the cost guard"

    @staticmethod
    def _after(
        prepared: PreparedCut, state: SessionState, plain: Forwarded, common: dict[str, Any]
    ) -> int:
        """Tokens of the forwarded messages once ``prepared`` is swapped in: its summary
        and every message from its cut (it applies to ``state``)."""
        assert plain.counted is not None
        tally, shape = plain.counted.forwarded, common["shape"]
        before, _ = _messages_tokens(plain)
        head = 1 if state.summary is not None else 0
        kept = before - tally.messages_before(prepared.cut - state.cut + head)
        return int(tally.measure(shape.summary_message(prepared.summary))) + kept

    async def _start(
        self,
        key: str,
        run: Prefetch[PreparedCut],
        body: dict[str, Any],
        state: SessionState,
        policy: TransparentPolicy,
        plain: Forwarded,
        summarizer: MeteredSummarizer,
        common: dict[str, Any],
    ) -> None:
        """Start the summary of this request's history, unless the cost guard would refuse
        its swap anyway (the summary would be paid for and dropped)."""
        if self._refused.get(key) == _core(state):
            return
        client = list(body["messages"])
        tokens = plain.input_tokens
        window = policy.window
        below = tokens <= int(policy.trigger * window)
        # What arrives before the swap, which keeps it all: until the trigger, or while
        # the summary is written (at the rate of the last requests), whichever is later.
        latency = run.latency
        if latency is None and policy.background is not None:
            latency = policy.background.assumed_latency_s
        growth = max(int(policy.trigger * window) - tokens, int((run.rate or 0) * (latency or 0)))
        # ... but the request waits for it at the deadline (``wait_ratio``): no later.
        wait = policy.background.wait_ratio if policy.background is not None else policy.trigger
        growth = min(growth, max(int(max(wait, policy.trigger) * window) - tokens, 0))
        budget = int(policy.keep * window)
        if policy.cost_guard is not None and tokens <= window:
            # Estimated: the newest turn (folded below the trigger only when there is no
            # room for it) and the last summary's size.
            assert plain.counted is not None
            tally = plain.counted.forwarded
            before, n = _messages_tokens(plain)
            newest = before - tally.messages_before(max(n - 2, 0))
            head = tally.count(0) if state.summary is not None else 0
            passable = int(policy.cost_guard * (before + growth)) - head
            if newest + growth > passable:
                return
            budget = min(budget, passable)
        digest = _digest_at(client, state, len(client), common.get("known"))
        if digest is None:
            return
        # Below the trigger, the snapshot's newest turn may be folded too: the model reads
        # it in this request, before the swap, and kept it would sit beside everything that
        # arrives until then (one turn more than a compaction at the trigger keeps; the
        # engine folds it too). The model's reply, not yet known, is where the kept part
        # would start: a stand-in marks that place, never summarized or sent.
        snapshot = {**body, "messages": [*client, _REPLY] if below else client}
        # The compaction a trigger would run, forced now: it keeps at most what the
        # trigger would keep once the growth until then is added.
        now = replace(
            policy,
            trigger=min(max((tokens - 1) / window, 1e-9), 1.0),
            keep=min(max(budget - growth, 1) / window, max((tokens - 1) / window, 1e-9) / 2),
            cost_guard=None,
            background=None,
            breakpoints=False,
        )
        base = _core(state)
        self._snapshots[key] = (base, len(client), digest)
        counts = {k: common[k] for k in ("counter", "counts", "shape")}

        async def job() -> PreparedCut | None:
            done = await forward(snapshot, state, now, summarizer=summarizer, **counts)
            if summarizer.failed:
                raise RuntimeError("the summary failed")
            if not done.compacted or done.state.summary is None:
                return None
            cut = PreparedCut(
                base,
                done.state.cut,
                done.state.cut_digest,
                done.state.summary,
                done.state.compactions,
                len(client),
                digest,
            )
            if isinstance(self._snapshots.get(key), tuple):
                self._snapshots[key] = cut
            return cut

        await run.start((base, len(client), digest), job, tokens=tokens)
