"""Shared helpers of the reliability suite: scaling, counting, agents, the history checks.

``CONTEXTFOLD_SOAK=<n>`` multiplies every iteration count by ``n`` (soak mode);
``CONTEXTFOLD_RELIABILITY_REPORT=<file>`` makes each test append what it exercised
(``{"area", "what", "count"}``) as JSON lines, which ``scripts/soak.py`` totals.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from contextfold.agent import Agent
from contextfold.context import ContextConfig, ContextEngine
from contextfold.message import Msg, check_anthropic_valid, check_openai_valid
from contextfold.model import ChatModelBase, ScriptedModel, ScriptedRequest, text_reply, tool_reply
from contextfold.tool import Toolkit
from contextfold.workspace import BaseWorkspace

SOAK = max(1, int(os.environ.get("CONTEXTFOLD_SOAK", "1") or "1"))
"""Iteration multiplier: 1 in CI, more in soak mode."""

SEED = int(os.environ.get("CONTEXTFOLD_SOAK_SEED", "0") or "0")
"""Base seed of the random choices; soak runs vary it."""


def scaled(n: int) -> int:
    """``n`` iterations, multiplied in soak mode."""
    return n * SOAK


def rng(salt: int = 0) -> random.Random:
    return random.Random(SEED * 1_000_003 + salt)


SUMMARY: list[str] = []
"""Lines the tests want in pytest's terminal summary (printed by ``tests/conftest.py``)."""


def summarize(line: str) -> None:
    """Show ``line`` at the end of the run, even when output is captured."""
    print(line)
    SUMMARY.append(line)


def record(area: str, what: str, count: int = 1) -> None:
    """Count something the suite exercised (written only when a report file is set)."""
    path = os.environ.get("CONTEXTFOLD_RELIABILITY_REPORT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"area": area, "what": what, "count": count}) + "\n")


def summary_fields(tag: str = "") -> dict[str, str]:
    """A valid structured summary."""
    return {
        "task_overview": f"overview {tag}",
        "current_state": f"state {tag}",
        "important_discoveries": "none",
        "next_steps": "continue",
        "context_to_preserve": f"keep {tag}",
    }


def filler(i: int, words: int = 60) -> str:
    return f"m{i} " + " ".join(f"w{i}x{j}" for j in range(words))


def smart_script(tag: str = "", *, tool: str | None = None, every: int = 0) -> Any:
    """A script function: summaries for forced summary calls; otherwise text, or (every
    ``every``-th request) a call to ``tool``."""
    count = 0

    def reply(request: ScriptedRequest) -> Any:
        nonlocal count
        if request.is_summary:
            return summary_fields(tag)
        count += 1
        last = request.messages[-1] if request.messages else None
        answered_tool = last is not None and bool(last.tool_results)
        if tool and every and count % every == 0 and not answered_tool:
            return tool_reply((tool, {"n": count}))
        return text_reply(f"{tag} answer {count} " + filler(count, 30))

    return reply


def make_agent(
    model: ChatModelBase,
    *,
    offloader: BaseWorkspace | None = None,
    summarizer: ChatModelBase | None = None,
    config: ContextConfig | None = None,
    **kwargs: Any,
) -> Agent:
    kwargs.setdefault("tasks_enabled", False)
    return Agent(
        name="assistant",
        system_prompt="You are a careful agent.",
        model=model,
        summarizer=summarizer,
        offloader=offloader,
        context_config=config or ContextConfig(trigger_ratio=0.5, reserve_ratio=0.1),
        **kwargs,
    )


def adder_toolkit() -> Toolkit:
    """A toolkit with one small tool, ``add``, for tests that need a tool to call."""
    kit = Toolkit()

    @kit.register
    def add(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: First.
            b: Second.
        """
        return a + b

    return kit


def scripted(script: Any = (), *, context_size: int = 4000, retries: int = 2) -> ScriptedModel:
    """A ScriptedModel with a small window (so compression happens) and instant retries."""
    return ScriptedModel(
        script, context_size=context_size, max_retries=retries, retry_base_delay=0.0
    )


class Added:
    """Records every message the engine was given (the ground truth of the history)."""

    def __init__(self, engine: ContextEngine) -> None:
        self.msgs: list[Msg] = []
        real = engine.append

        def append(msg: Msg) -> None:
            self.msgs.append(msg)
            real(msg)

        engine.append = append  # type: ignore[method-assign]

    @property
    def ids(self) -> list[str]:
        return [m.id for m in self.msgs]


def state_messages(agent: Agent) -> list[Msg]:
    """What the next request would be built from: system, summary, context."""
    msgs = [Msg("system", agent.system_prompt, "system")]
    if agent.summary is not None:
        msgs.append(agent.summary)
    return [*msgs, *agent.context]


def assert_provider_valid(agent: Agent) -> None:
    msgs = state_messages(agent)
    assert check_openai_valid(msgs) == [], check_openai_valid(msgs)
    assert check_anthropic_valid(msgs) == [], check_anthropic_valid(msgs)


async def offloaded(ws: BaseWorkspace | None, session_id: str) -> list[Msg]:
    if ws is None:
        return []
    return await ws.load_context(session_id, with_data=False)


def assert_nothing_lost(
    added: Sequence[str],
    offloaded_ids: Sequence[str],
    context_ids: Sequence[str],
    *,
    exactly_once: bool = True,
) -> None:
    """The full history (offloaded messages, then the context) against what was added.

    ``exactly_once``: offload + context is exactly the added sequence. Otherwise (after a
    cancellation, where an offload that was written may not have been swapped in, so it is
    repeated by the next compression) the context is the most recent part of the history,
    everything older is in the offload store, and the store holds nothing unknown.
    """
    if exactly_once:
        assert [*offloaded_ids, *context_ids] == list(added)
        return
    known = set(added)
    assert set(offloaded_ids) <= known, "the offload store holds a message nobody added"
    n = len(context_ids)
    assert list(context_ids) == list(added[len(added) - n :]), "context is not the recent history"
    assert set(added[: len(added) - n]) <= set(offloaded_ids), "a message was lost"


def unique_in_order(ids: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for i in ids:
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]
