"""The compaction planner: everything decidable without I/O, as one value.

:func:`plan_compaction` reads a snapshot of the engine's state and decides where the
history splits (pair-safe, within ``reserve_ratio``, never into the newest turn when it can
fit), whether observation masking suffices, whether the compaction is worth its cost,
what the summarizer is asked, and whether the summary layer gets a part appended or is
rewritten (with the ledgers and budgets of either). The engine hands the plan to its
tiers (:mod:`._compaction`), which do the I/O (summarize, offload) and return what to
commit. A plan is computed under the engine's lock and never changes the state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from .._logging import logger
from ..message import Msg, marker_of
from ..token import TokenCounter
from ._config import ContextConfig
from ._facts import extract_ledger
from ._layer import (
    PartBudget,
    SummaryLayer,
    ledger_budget,
    request_budget,
    select_requests,
    summary_budget,
)
from ._ledger import ArtifactLedger
from ._masking import MaskingPlan, plan_masking
from ._redact import redact_messages
from ._summarizer import SummaryRequest
from ._summary import part_ledger, safe_format
from ._trim import MIN_KEPT_RESULT, choose_split, safe_boundaries
from ._types import CompressionRequest, ContextUsage, ModelInput

__all__ = ["CompactionPlan", "SummaryPlan", "newest_turn", "plan_compaction", "protected_start"]


@dataclass(frozen=True)
class SummaryPlan:
    """What the summary tier asks and how it builds the new layer."""

    request: SummaryRequest
    """The summarizer's request (``previous_stays`` when a part is appended)."""
    rewrite: SummaryRequest
    """The request when the layer is rewritten after all."""
    ledger: ArtifactLedger
    """The layer's whole ledger, as a rewrite (or a fallback) lists it."""
    part: PartBudget | None
    """Room for an appended part; ``None`` when this compaction rewrites."""
    part_ledgers: tuple[ArtifactLedger, ArtifactLedger] | None
    """For an appended part: the facts it lists, and the layer's whole ledger."""
    requests: tuple[str, ...] = ()
    """The user's messages a rewritten layer shows word for word (the earlier ones it
    showed and those folded now, within :func:`request_budget`)."""
    part_requests: tuple[str, ...] = ()
    """Those an appended part shows: the ones folded now, in the room the layer leaves."""
    pool: ArtifactLedger | None = None
    """Every fact the layer's ledger could list (``ledger`` is the best of them within the
    ledger's budget): a rewrite lists more of them in the room the summarizer's fields
    leave."""


@dataclass(frozen=True)
class CompactionPlan:
    """One compaction, decided: the snapshot it reads and what each tier may do."""

    request: CompressionRequest
    usage: ContextUsage
    """The usage when the compaction started."""
    snapshot: tuple[Msg, ...]
    """The context when the compaction started; what arrives later is kept as it is."""
    split: int
    """Messages before this index are folded (0: nothing can be)."""
    masking: MaskingPlan | None
    """The results masking replaces, when masking alone brings usage low enough."""
    summary: SummaryPlan | None
    """The summary tier's plan (``None`` when ``split`` is 0)."""
    previous: SummaryLayer | None
    """The layer in place."""
    started: float
    """``time.monotonic()`` when the compaction started."""
    kept_request: int | None = None
    """The user's current request, when it sits before ``split``: it is not folded but
    kept, verbatim, at the head of the kept context."""
    unsent: bool = False
    """The summary request extends the request of this step, not one sent before it: the
    provider's cache holds that prefix only once the step's request has been answered."""

    @property
    def folded(self) -> list[Msg]:
        """The messages this compaction folds, as they are (unredacted)."""
        return [m for i, m in enumerate(self.snapshot[: self.split]) if i != self.kept_request]

    @property
    def request_msg(self) -> list[Msg]:
        """The kept current request, as a list of zero or one message."""
        return [] if self.kept_request is None else [self.snapshot[self.kept_request]]


def current_time() -> str:
    """The time the compression prompt states (``{current_time}``)."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def current_request(msgs: Sequence[Msg]) -> int | None:
    """Where the user's newest request is: the last user message that is the user's own
    words (text or data, no tool results, no engine note), or ``None``."""
    for i in range(len(msgs) - 1, -1, -1):
        msg = msgs[i]
        if msg.role == "assistant" or msg.role == "system":
            continue
        if msg.tool_results or marker_of(msg) is not None:
            continue
        return i
    return None


def newest_turn(msgs: Sequence[Msg]) -> int:
    """Where the newest turn starts: its last assistant message (with the tool results and
    messages after it), or the last message when no assistant spoke."""
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].role == "assistant":
            return i
    return max(len(msgs) - 1, 0)


def protected_start(
    msgs: Sequence[Msg],
    tokens: Sequence[int],
    usage: ContextUsage,
    config: ContextConfig,
    counter: TokenCounter,
) -> int:
    """Where the kept part must start at the latest: the newest turn, unless even with
    its tool results cut it could not fit beside a full summary (then nothing)."""
    size = usage.context_size
    start = newest_turn(msgs)
    cuttable = sum(
        max(0, counter.count_text(r.text()) - MIN_KEPT_RESULT)
        for m in msgs[start:]
        for r in m.tool_results
    )
    fixed = usage.system + usage.tools + usage.overhead
    needed = fixed + summary_budget(config, size) + sum(tokens[start:]) - cuttable
    return start if needed <= int(config.trigger_ratio * size) else len(msgs)


def plan_compaction(
    request: CompressionRequest,
    *,
    usage: ContextUsage,
    context: Sequence[Msg],
    previous: SummaryLayer | None,
    last_sent: ModelInput | None,
    prefix: ModelInput | None,
    redact: Callable[[str], str] | None,
    counter: TokenCounter,
    started: float,
    arriving: int = 0,
    seen: bool = False,
) -> CompactionPlan | None:
    """The plan of one compaction, or ``None`` when there is nothing to do: usage under
    the threshold (unless forced), or an automatic compaction that would free too little.

    ``arriving`` is how many tokens are known to be appended after the snapshot and kept
    beside it when the plan is committed (one prepared in the background is swapped in
    once usage crosses the trigger, with everything since kept): they are recent context
    too, so they count against ``reserve_ratio`` and the snapshot keeps only the rest.
    ``seen``: the model will have read the whole snapshot before the plan is committed
    (one prepared in the background while the step goes on from the full context is
    swapped in at a later step), so its newest turn is folded like the rest: at the swap
    the newest turn is one that arrived after it, as at a blocking compaction."""
    config, size = request.config, usage.context_size
    ratio = config.trigger_ratio if request.threshold_ratio is None else request.threshold_ratio
    if not request.force and usage.total <= ratio * size:
        return None
    snapshot = tuple(context)
    tokens = [counter.count_message(m) for m in snapshot]
    safe = safe_boundaries(snapshot)
    # The newest assistant turn and what answers it are kept whenever cutting its tool
    # results can make it fit: a fresh result is not summarized before it was seen.
    protect = len(snapshot) if seen else protected_start(snapshot, tokens, usage, config, counter)
    k = choose_split(tokens, safe, max(0, int(config.reserve_ratio * size) - arriving))
    if k == 0 and request.force:
        k = choose_split(tokens, safe, sum(tokens) // 2)
    k = min(k, protect)
    kept = _kept_request(snapshot, tokens, safe, k, config, size)
    plan = CompactionPlan(request, usage, snapshot, k, None, None, previous, started, kept)
    if config.masking is not None and request.trigger != "tool":
        masking = plan_masking(
            snapshot,
            k=k,
            protect=protect,
            policies=config.masking.tool_policies,
            total=usage.total,
            goal=(config.trigger_ratio + config.reserve_ratio) / 2 * size,
            counter=counter,
        )
        if masking is not None:
            return replace(plan, masking=masking)
    if k == 0:
        return plan
    folding = [n for i, n in enumerate(tokens[:k]) if i != kept]
    if request.trigger == "auto" and _too_little_freed(folding, usage, previous, config, counter):
        return None
    base = (
        _summary_prefix(prefix, last_sent, snapshot, k)
        if config.summarizer_options.request != "transcript"
        else None
    )
    return replace(
        plan,
        summary=_summary_plan(request, plan.folded, previous, base, redact, counter, size),
        unsent=base is not None and base is prefix,
    )


def _kept_request(
    snapshot: Sequence[Msg],
    tokens: Sequence[int],
    safe: Sequence[bool],
    k: int,
    config: ContextConfig,
    size: int,
) -> int | None:
    """The current request's index when it would be folded and can be kept instead: the
    turn in progress is the user's, whatever ``reserve_ratio`` says. Not when keeping it
    would separate a call from its result, or when it alone is over the summary's budget
    (a pasted file: it is folded, offloaded and read back like any long message)."""
    u = current_request(snapshot)
    if u is None or u >= k or not (safe[u] and safe[u + 1]):
        return None
    return u if tokens[u] <= summary_budget(config, size) else None


def _summary_plan(
    request: CompressionRequest,
    compressed: Sequence[Msg],
    previous: SummaryLayer | None,
    base: ModelInput | None,
    redact: Callable[[str], str] | None,
    counter: TokenCounter,
    size: int,
) -> SummaryPlan:
    config = request.config
    # The request to extend is chosen first, then redacted with the messages to fold.
    folded = list(compressed)
    if redact is not None:
        folded = redact_messages(folded, redact)
        if base is not None:
            base = replace(base, context=tuple(redact_messages(base.context, redact)))
    found = extract_ledger(folded)
    shown = previous.requests if previous is not None else ()
    asked = [m.text for m in folded if _is_request(m)]
    budget = request_budget(config, size)
    requests = select_requests(shown, asked, counter, budget)
    used = sum(counter.count_text(t) for t in shown)
    part_requests = select_requests((), asked, counter, max(0, budget - used))
    earlier = previous.ledger if previous is not None else ArtifactLedger()
    room = ledger_budget(config, size, earlier.compactions)
    # What the user's kept messages say word for word, the ledger need not say again.
    pool = earlier.merge(found)
    ledger = pool.select(counter, room, "\n".join(requests))
    part = None if previous is None else previous.room_for_part(config, size, counter)
    ledgers = (
        None
        if part is None
        else part_ledger(
            earlier, found, counter, part.ledger, rewrite=ledger, stated="\n".join(requests)
        )
    )
    caller_hints = () if request.instructions is None else (request.instructions,)
    options = config.summarizer_options
    summary_request = SummaryRequest(
        messages=folded,
        previous=previous.msg if previous is not None else None,
        instructions=safe_format(
            config.compression_prompt,
            {"current_time": current_time()},
        ),
        hints=caller_hints,
        schema=config.summary_schema,
        max_attempts=options.attempts or 3,
        prefix=base,
        previous_stays=ledgers is not None,
        update_prompt=options.update_prompt,
    )
    return SummaryPlan(
        request=summary_request,
        rewrite=replace(summary_request, previous_stays=False),
        ledger=ledger,
        part=part,
        part_ledgers=ledgers,
        requests=requests,
        part_requests=part_requests,
        pool=pool,
    )


def _is_request(msg: Msg) -> bool:
    """Whether ``msg`` is the user's own words (not a tool result or an engine note)."""
    return (
        msg.role == "user"
        and not msg.tool_results
        and marker_of(msg) is None
        and bool(msg.text.strip())
    )


def _too_little_freed(
    folded: list[int],
    usage: ContextUsage,
    previous: SummaryLayer | None,
    config: ContextConfig,
    counter: TokenCounter,
) -> bool:
    """Whether an automatic compaction would free less than ``min_compaction_saving``
    of the window (folding ``folded`` into a summary about as large as the current one,
    or the ledger's budget) while the request still fits: then it waits a step."""
    if not config.min_compaction_saving:
        return False
    size = usage.context_size
    current = previous.tokens(counter) if previous is not None else 0
    done = previous.ledger.compactions if previous is not None else 0
    summary = max(current, ledger_budget(config, size, done))
    freed = sum(folded) - summary + usage.summary
    fits = usage.total <= size - size // 10
    if freed < config.min_compaction_saving * size and fits:
        logger.info("compaction skipped: it would free only %d tokens", freed)
        return True
    return False


def _summary_prefix(
    current: ModelInput | None, last: ModelInput | None, context: Sequence[Msg], k: int
) -> ModelInput | None:
    """The request a summary request should extend: the last one sent, when it still
    holds everything to fold (the newest turn, which is kept, need not be read twice,
    and that request is what the provider's cache holds), else the current state."""
    if current is None or not safe_boundaries(context)[-1]:
        return None  # a call still waits for its result: no valid request to extend
    if (
        last is not None
        and last.system is current.system
        and last.summary is current.summary
        and last.tools == current.tools
        and k <= len(last.context) <= len(context)
        and all(a is b for a, b in zip(last.context, context, strict=False))
    ):
        return last
    return current
