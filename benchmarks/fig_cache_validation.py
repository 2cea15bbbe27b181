"""The prompt-cache simulator against real counters.

(a) llama.cpp: a recorded SWE-bench run replayed through the engine at a window the
    embedded model holds (compactions included), every request it would send (reasoning
    and summary calls, as ``--dump-requests`` writes them) rendered as the embedded
    model's ChatML prompt and evaluated by llama.cpp in-process (``llama_cpp.Llama``, one
    context, ``max_tokens=1``). Truth: the prompt tokens llama.cpp did not evaluate, from
    its own performance counters (``n_p_eval + n_eval`` before and after the call).
    Prediction: the simulator's ``llama`` model (one slot) and, for contrast, its
    ``openai`` model with no minimum and no increment (every prefix kept), both on the
    OpenAI wire body counted by ``LlamaTokenCounter``.
(b) Claude Code and Codex: every recorded session's request sequence rebuilt from its
    messages (no compression) and fed to the ``anthropic`` (Claude Code) and ``openai``
    (Codex) models; predicted cache reads against the reads the provider reported.
(c) SWE-bench implicit caching (Gemini 3 Pro through OpenRouter): a three-parameter
    implicit-cache model fitted on half the 44 runs (sorted by instance id, even
    positions), its error on the other half.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import Options

if TYPE_CHECKING:
    from contextfold.replay import CacheKind
from ._data import REPO_ROOT, SWEBENCH_DIR

__all__ = [
    "CallPrediction",
    "ImplicitCache",
    "ImplicitCall",
    "LlamaCall",
    "fit",
    "llama_table",
    "run",
    "share_error",
    "split_runs",
]

LLAMA_RUN = "django__django-11095"
LLAMA_WINDOW = 3000
"""The replay's window in the embedded model's tokens: every request, summary calls
included, fits llama.cpp's ``n_ctx``."""
LLAMA_CTX = 4096
LLAMA_TOOL_LIMIT = 300


# ------------------------------------------------------------------------------ llama.cpp


@dataclass(frozen=True)
class LlamaCall:
    """One request sent to llama.cpp: what it reported and what the simulator predicted."""

    kind: str
    step: int
    prompt_tokens: int
    """llama.cpp's prompt length (its tokenization of the ChatML prompt, BOS included)."""
    cached: int
    """Prompt tokens llama.cpp did not evaluate (served from its KV cache)."""
    sim_total: int
    """The simulator's size of the same request (our counter, our framing)."""
    sim_read: int
    """The ``llama`` model's predicted cache read."""
    sim_read_any: int
    """The ``openai`` model's (no minimum, no increment, every prefix kept) prediction."""
    wire_total: int = 0
    wire_read: int = 0
    """The ``llama`` model on blocks of the OpenAI wire body instead of the ChatML prompt
    (what the generic ``openai_blocks`` sizes: tools as JSON, 4 tokens of framing)."""


async def _dumped_requests(run_id: str, window: int) -> list[dict[str, Any]]:
    """Every request of the replay of ``run_id`` at ``window``, as dumped (OpenAI form)."""
    from contextfold.context import ContextConfig
    from contextfold.replay import RequestDump, load_trajectory, replay_run
    from contextfold.token import LlamaTokenCounter

    run = load_trajectory(SWEBENCH_DIR / f"{run_id}.traj.json")
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        dump = RequestDump(tmp, format="openai")
        result = await replay_run(
            run,
            context_size=window,
            config=ContextConfig(tool_result_limit=LLAMA_TOOL_LIMIT),
            counter=LlamaTokenCounter(framing="local"),
            dump=dump,
        )
        if result.error is not None:
            raise RuntimeError(f"replay of {run_id} failed: {result.error}")
        lines = dump.path(run.instance_id).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _request_of(body: dict[str, Any]) -> tuple[list[Any], list[Any], str | None]:
    """``(messages, tools, tool_choice)`` of an OpenAI wire body, as our types."""
    from contextfold.message import ToolSpec, from_openai_messages

    tools = [
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"].get("description", ""),
            parameters=t["function"].get("parameters") or {"type": "object", "properties": {}},
        )
        for t in body.get("tools") or []
    ]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        choice = choice.get("function", {}).get("name")
    return from_openai_messages(body["messages"]), tools, choice if tools else None


def llama_calls(requests: Sequence[dict[str, Any]]) -> list[LlamaCall]:
    """Send ``requests`` in order to one in-process llama.cpp context; pair what llama.cpp
    reused with what the simulator predicts."""
    import llama_cpp
    from llama_cpp import Llama

    from contextfold.message import chatml_prompt
    from contextfold.model import embedded_model_path
    from contextfold.replay import LlamaCache, OpenAICache, llama_blocks, openai_blocks
    from contextfold.token import LlamaTokenCounter

    counter = LlamaTokenCounter(framing="local")
    one_slot, every_prefix = LlamaCache(), OpenAICache(min_cacheable_tokens=0, increment_tokens=1)
    wire_sized = LlamaCache()
    llm = Llama(str(embedded_model_path()), n_ctx=LLAMA_CTX, n_threads=2, verbose=False, seed=0)

    def decoded() -> int:
        data = llama_cpp.llama_perf_context(llm.ctx)
        return int(data.n_p_eval) + int(data.n_eval)

    # Counters that are still 0 read as 1: decode something first, then forget it.
    llm.create_completion(prompt="warm up", max_tokens=1, temperature=0.0)
    llm.reset()  # type: ignore[no-untyped-call]
    calls = []
    for i, body in enumerate(requests):
        messages, tools, choice = _request_of(body)
        before = decoded()
        out: Any = llm.create_completion(
            prompt=chatml_prompt(messages, tools, choice), max_tokens=1, temperature=0.0
        )
        prompt_tokens = int(out["usage"]["prompt_tokens"])
        # max_tokens=1: the one sampled token is never fed back, so every token decoded
        # in this call is a prompt token llama.cpp evaluated.
        evaluated = decoded() - before
        blocks = llama_blocks(messages, tools, choice, counter)
        predicted = one_slot.request(blocks, at=float(i))
        wire = wire_sized.request(openai_blocks(body, counter), at=float(i))
        calls.append(
            LlamaCall(
                kind=str(body.get("kind")),
                step=int(body.get("step", 0)),
                prompt_tokens=prompt_tokens,
                cached=prompt_tokens - evaluated,
                sim_total=predicted.total,
                sim_read=predicted.read,
                sim_read_any=every_prefix.request(blocks, at=float(i)).read,
                wire_total=wire.total,
                wire_read=wire.read,
            )
        )
    llm.close()
    return calls


async def _llama_section(opts: Options) -> str:
    requests = await _dumped_requests(LLAMA_RUN, LLAMA_WINDOW)
    if opts.quick:
        requests = requests[:20]
    calls = llama_calls(requests)
    return llama_table(calls)


def _share(read: int, total: int) -> float:
    return read / total if total else 0.0


def llama_table(calls: Sequence[LlamaCall]) -> str:
    """The per-request and total comparison of section (a)."""
    rows = []
    for i, c in enumerate(calls):
        rows.append(
            f"| {i} | {c.kind} | {c.prompt_tokens} | {c.cached} | {c.sim_total} | {c.sim_read} "
            f"| {c.sim_read - c.cached:+d} | {100 * _share(c.cached, c.prompt_tokens):.1f}% "
            f"| {100 * _share(c.sim_read, c.sim_total):.1f}% | {c.sim_read_any} |"
        )
    prompt = sum(c.prompt_tokens for c in calls)
    cached = sum(c.cached for c in calls)
    sim_total = sum(c.sim_total for c in calls)
    sim = sum(c.sim_read for c in calls)
    sim_any = sum(c.sim_read_any for c in calls)
    diffs = [abs(c.sim_read - c.cached) for c in calls]
    share_err = [
        abs(_share(c.sim_read, c.sim_total) - _share(c.cached, c.prompt_tokens)) for c in calls
    ]
    compactions = sum(c.kind == "summary" for c in calls)
    wire_total = sum(c.wire_total for c in calls)
    wire = sum(c.wire_read for c in calls)
    return (
        f"**(a) llama.cpp KV cache** ({len(calls)} requests of `{LLAMA_RUN}` replayed at a "
        f"{LLAMA_WINDOW}-token window (embedded-model tokens, `tool_result_limit` "
        f"{LLAMA_TOOL_LIMIT}, extractive summarizer: {compactions} compactions, each a "
        "summary call (in the agent's prefix form when that fits the window, else a "
        "transcript) followed by a request with a new prefix), "
        "sent in order to one in-process llama.cpp context (SmolLM2-135M, n_ctx "
        f"{LLAMA_CTX}, `max_tokens=1`). Truth: prompt tokens llama.cpp did not evaluate, "
        "from its performance counters.\n\n"
        f"- Total: llama.cpp reused {cached:,} of {prompt:,} prompt tokens "
        f"({100 * _share(cached, prompt):.2f}%); the `llama` model predicts {sim:,} of "
        f"{sim_total:,} ({100 * _share(sim, sim_total):.2f}%): error on the read total "
        f"{100 * (sim - cached) / max(cached, 1):+.2f}%, on the share "
        f"{100 * (_share(sim, sim_total) - _share(cached, prompt)):+.2f} points.\n"
        f"- Per request: median |predicted - reused| {statistics.median(diffs):.0f} tokens, "
        f"max {max(diffs)}; median share error {100 * statistics.median(share_err):.2f} "
        f"points, max {100 * max(share_err):.2f}.\n"
        f"- The `openai` model with every prefix kept (min 0, increment 1) predicts {sim_any:,} "
        f"({100 * (sim_any - cached) / max(cached, 1):+.1f}% on the total).\n"
        "- The `llama` model on blocks of the OpenAI wire body (tools sized as JSON, not as "
        f"the ChatML tool turn) predicts {wire:,} of {wire_total:,} "
        f"({100 * (wire - cached) / max(cached, 1):+.1f}% on the read total, "
        f"{100 * (_share(wire, wire_total) - _share(cached, prompt)):+.2f} points on the "
        "share).\n\n"
        "<details><summary>per request</summary>\n\n"
        "| # | kind | llama prompt | llama reused | sim total | sim read | sim - llama | "
        "llama share | sim share | sim read (every prefix) |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n\n</details>\n"
    )


# ------------------------------------------------------------------ Claude Code and Codex

SHARED_DATA = Path(os.environ.get("BENCH_SHARED_DATA", "/work/shared/data/trajectories"))
"""The shared recordings (more Claude Code sessions than the repository's copy); the
repository's ``data/trajectories`` when absent."""

PREFIX_KEY = "recorded-prefix"


def recordings_dir() -> Path:
    """Where the Claude Code and Codex sessions are read from."""
    return SHARED_DATA if SHARED_DATA.is_dir() else REPO_ROOT / "data" / "trajectories"


@dataclass(frozen=True)
class RecordedCall:
    """One recorded model call: the messages it was sent, when, and what the provider
    reported."""

    history: list[Any]
    at: float
    """Seconds since the session's first call."""
    input_tokens: int
    """The whole prompt as the provider counted it (cache reads and writes included)."""
    cache_read: int
    cache_write: int = 0


@dataclass(frozen=True)
class Session:
    """One recorded Claude Code or Codex session, call by call."""

    name: str
    agent: str
    """``claude-code`` or ``codex``."""
    system: str | None
    calls: list[RecordedCall]


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _claude_times(rows: list[dict[str, Any]]) -> list[float]:
    """The time of every assistant message ``load_claude_code`` makes, in order (its first
    line's timestamp), by the loader's own grouping of lines into responses."""
    chat = [r for r in rows if r.get("type") in ("user", "assistant")]
    sidechain_file = bool(chat) and all(r.get("isSidechain") for r in chat)
    times: list[float] = []
    last_id: Any = None
    last_role = ""
    for row in chat:
        if (row.get("isSidechain") and not sidechain_file) or not isinstance(
            row.get("message"), dict
        ):
            continue
        if row["type"] == "assistant":
            mid = row["message"].get("id")
            if not (mid is not None and mid == last_id and last_role == "assistant"):
                times.append(_seconds(row["timestamp"]))
            last_id, last_role = mid, "assistant"
        else:
            last_id, last_role = None, "user"
    return times


def _codex_times(path: Path, lines: list[str]) -> list[float]:
    """The time of the ``token_count`` event that gave each assistant message its usage,
    found by loading the rollout up to each such event with the Codex loader itself."""
    from contextfold.replay import FORMATS, Recording

    times: list[float] = []
    for k, line in enumerate(lines):
        row = json.loads(line)
        payload = row.get("payload")
        if row.get("type") != "event_msg" or not isinstance(payload, dict):
            continue
        if payload.get("type") != "token_count":
            continue
        (run,) = FORMATS["codex"].load(Recording(path, "\n".join(lines[: k + 1])))
        if sum(m.usage is not None for m in run.messages if m.role == "assistant") > len(times):
            times.append(_seconds(row["timestamp"]))
    return times


def load_sessions(root: Path) -> list[Session]:
    """Every Claude Code and Codex session under ``root`` that recorded cache counters."""
    from contextfold.replay import load_any

    sessions = []
    for folder in sorted(root.glob("claude-code-*")) + sorted(root.glob("codex-*")):
        for path in sorted(folder.rglob("*.jsonl")):
            lines = [x for x in path.read_text(encoding="utf-8").splitlines() if x]
            (run,) = load_any(path)
            agent = "codex" if run.format == "codex" else "claude-code"
            if agent == "codex":
                times = _codex_times(path, lines)
            else:
                times = _claude_times([json.loads(x) for x in lines])
            assistants = [m for m in run.messages if m.role == "assistant"]
            if agent == "claude-code" and len(times) != len(assistants):
                raise RuntimeError(f"{path}: {len(times)} times for {len(assistants)} answers")
            history: list[Any] = []
            calls: list[RecordedCall] = []
            stamps = iter(times)
            for msg in run.messages:
                if msg.metadata.get("compact_summary"):
                    history = []  # Claude Code's compaction: the summary starts a new history
                if msg.role == "assistant" and msg.usage is not None:
                    at = next(stamps)
                    calls.append(
                        RecordedCall(
                            list(history),
                            at,
                            msg.usage.input_tokens,
                            msg.usage.cache_read_tokens,
                            msg.usage.cache_write_tokens,
                        )
                    )
                elif msg.role == "assistant" and agent == "claude-code":
                    next(stamps)
                history.append(msg)
            if len(calls) < 2 or not any(c.cache_read for c in calls):
                continue
            start = calls[0].at
            calls = [
                RecordedCall(c.history, c.at - start, c.input_tokens, c.cache_read, c.cache_write)
                for c in calls
            ]
            name = f"{folder.name}/{path.name[:24]}"
            sessions.append(Session(name, agent, run.system, calls))
    return sessions


@dataclass(frozen=True)
class CallPrediction:
    """A recorded call beside the simulator's prediction for it."""

    at: float
    input_tokens: int
    cache_read: int
    sim_total: int
    sim_read: int

    @property
    def sim_share(self) -> float:
        return self.sim_read / self.sim_total if self.sim_total else 0.0

    @property
    def share(self) -> float:
        return self.cache_read / self.input_tokens if self.input_tokens else 0.0

    @property
    def scaled_read(self) -> float:
        """The predicted read in the provider's tokens: the predicted share of the
        recorded prompt."""
        return self.sim_share * self.input_tokens


def _blocks(session: Session, call: RecordedCall, counter: Any, prefix: int) -> list[Any]:
    """The call's request cut into cache blocks, behind an opaque block of ``prefix``
    tokens standing for what the recording lacks (tool schemas; Claude Code's system
    prompt), constant over the session."""
    from contextfold.message import Msg, anthropic_request, openai_request
    from contextfold.replay import Block, anthropic_blocks, openai_blocks

    head = [Block(PREFIX_KEY, prefix, breakpoint=True)] if prefix > 0 else []
    if session.agent == "claude-code":
        # Claude Code's layout: breakpoints on the system prompt and on the last message.
        body = anthropic_request(call.history, cache=True)
        return head + anthropic_blocks(body, counter)
    system = [Msg("system", session.system, "system")] if session.system else []
    return head + openai_blocks(openai_request([*system, *call.history]), counter)


def predict(session: Session, *, with_prefix: bool = True) -> tuple[int, list[CallPrediction]]:
    """``(prefix tokens, per-call predictions)`` of the session's cache model
    (``anthropic`` for Claude Code, ``openai`` for Codex, rules from ``pricing.json``),
    the requests timed as recorded.

    The missing prefix is sized from the first call alone: its recorded prompt less our
    count of the messages it was sent (0 with ``with_prefix=False``).
    """
    from contextfold.replay import cache_model, load_prices
    from contextfold.token import counter_for_model

    kind: CacheKind = "anthropic" if session.agent == "claude-code" else "openai"
    counter = counter_for_model("claude-sonnet-4-5" if kind == "anthropic" else "gpt-5")
    first = sum(b.tokens for b in _blocks(session, session.calls[0], counter, 0))
    prefix = max(session.calls[0].input_tokens - first, 0) if with_prefix else 0
    model = cache_model(kind, load_prices()[kind])
    out = []
    for call in session.calls:
        usage = model.request(_blocks(session, call, counter, prefix), at=call.at)
        out.append(
            CallPrediction(call.at, call.input_tokens, call.cache_read, usage.total, usage.read)
        )
    return prefix, out


def older_entries(calls: Sequence[RecordedCall]) -> tuple[int, int]:
    """``(calls served an older entry, calls served)``, from the recorded counters alone.

    A call's cached entry ends where its cache write does: its read plus its write. A
    served call (read > 0) was served an older entry when its read equals exactly the
    entry of an earlier call that is not the one just before, and is shorter than the
    entry that call had just written: the request extends that newer entry, yet the
    provider served the older one. One cache that keeps what it was given never does
    so; caches that are several machines, each holding what its own requests wrote,
    do.
    """
    entries: list[int] = []
    older = served = 0
    for call in calls:
        if call.cache_read > 0 and entries:
            served += 1
            if call.cache_read in entries[:-1] and call.cache_read < entries[-1]:
                older += 1
        entries.append(call.cache_read + call.cache_write)
    return older, served


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def session_row(
    name: str, prefix: int, calls: Sequence[CallPrediction], ttl: float, older: str
) -> str:
    """One session's line of section (b); ``older`` is its cell of served-older entries."""
    recorded = sum(c.cache_read for c in calls)
    scaled = sum(c.scaled_read for c in calls)
    prompt = sum(c.input_tokens for c in calls)
    share_err = sorted(abs(c.sim_share - c.share) for c in calls[1:])
    misses = sum(
        1 for prev, c in itertools.pairwise(calls) if c.cache_read == 0 and c.at - prev.at < ttl
    )
    err = (scaled - recorded) / recorded if recorded else float("nan")
    p90 = share_err[min(len(share_err) - 1, int(0.9 * len(share_err)))] if share_err else 0.0
    served = [c for c in calls if c.cache_read > 0]
    served_err = sum(c.scaled_read - c.cache_read for c in served) / max(
        sum(c.cache_read for c in served), 1
    )
    return (
        f"| {name} | {len(calls)} | {prefix:,} | {prompt:,} "
        f"| {recorded:,} ({_pct(recorded / prompt)}) "
        f"| {scaled:,.0f} ({_pct(scaled / prompt)}) | {100 * err:+.1f}% "
        f"| {'yes' if abs(err) <= 0.05 else 'no'} "
        f"| {100 * statistics.median(share_err) if share_err else 0:.1f} / {100 * p90:.1f} "
        f"| {misses} | {calls[0].cache_read:,} | {len(served)}: {100 * served_err:+.1f}% "
        f"| {older} |"
    )


def _providers_section() -> str:
    from contextfold.replay import load_prices

    prices = load_prices()
    sessions = load_sessions(recordings_dir())
    rows, bare = [], []
    errors: dict[str, list[float]] = {"claude-code": [], "codex": []}
    hit_errors: list[float] = []
    stale_total = served_total = 0
    for session in sessions:
        ttl = float(
            prices["anthropic" if session.agent == "claude-code" else "openai"]["ttl_seconds"]
        )
        prefix, calls = predict(session)
        older = "–"
        if session.agent == "claude-code":
            stale, served = older_entries(session.calls)
            stale_total += stale
            served_total += served
            older = f"{stale} of {served}"
        rows.append(session_row(session.name, prefix, calls, ttl, older))
        recorded = sum(c.cache_read for c in calls)
        errors[session.agent].append((sum(c.scaled_read for c in calls) - recorded) / recorded)
        hit_errors.extend(
            abs(c.scaled_read - c.cache_read) / c.cache_read for c in calls if c.cache_read > 0
        )
        _, no_prefix = predict(session, with_prefix=False)
        bare.append(session_row(session.name, 0, no_prefix, ttl, older))
    within = sum(abs(e) <= 0.05 for es in errors.values() for e in es)
    total = sum(len(es) for es in errors.values())
    header = (
        "| session | calls | prefix added | recorded prompt | recorded cache read (share) "
        "| predicted read (share) | error on the read total | within ±5% "
        "| per-call share error from the 2nd call, median / p90 (points) "
        "| recorded misses (no read) inside the TTL | recorded read on the 1st call "
        "| calls the provider served from cache: error on their read "
        "| served an earlier call's entry, not the newest |\n"
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|\n"
    )
    return (
        "\n**(b) Claude Code and Codex counters** (every session under "
        f"`{recordings_dir().name}/claude-code-*` and `codex-*` with cache counters; "
        f"{len(sessions)} sessions). Each recorded call's request is rebuilt from the "
        "messages before it, as the agent sent them (no compression; after Claude Code's "
        "own compaction, the compact summary starts the history), and fed in order, at its "
        "recorded time, to the `anthropic` model (Claude Code; breakpoints on the system "
        "prompt and on the last message, as Claude Code places them) or the `openai` model "
        "(Codex). Reported: cache reads in the provider's tokens, as the predicted share "
        "of each call (read / request, in our counter's tokens) times the recorded prompt; "
        "the error is on the session's total read. The recordings keep no tool schemas, "
        "and Claude Code's none of its system prompt: a constant opaque block stands in "
        "for them, sized from the first call alone (its recorded prompt less our count of "
        "its messages); the table without it quantifies what that reconstruction "
        "decides.\n\n"
        + header
        + "\n".join(rows)
        + f"\n\nWithin ±5%: {within} of {total} sessions. Median error on the read total: "
        f"Claude Code {100 * statistics.median(errors['claude-code']):+.1f}%, Codex "
        f"{100 * statistics.median(errors['codex']):+.1f}%. On the calls where the provider "
        f"did report a read ({len(hit_errors)}), the predicted read is off by a median "
        f"{_pct(statistics.median(hit_errors))}. From the Claude Code counters alone "
        f"(no simulator): {stale_total} of the {served_total} calls served from cache read "
        "exactly the entry an earlier call, not the one just before, had written, although "
        "the call just before had written a longer one, which a conversation that only "
        "grows extends (last column). One cache that keeps what it is given would have "
        "served the longer entry; caches that are several machines, each holding what the "
        "requests routed to it wrote, serve what these calls got, and which machine served "
        "a call is not in the recording. No model of one cache reproduces those calls.\n\n"
        "<details><summary>the same without the stand-in prefix (nothing added)</summary>"
        "\n\n" + header + "\n".join(bare) + "\n\n</details>\n"
    )


# ----------------------------------------------------------- SWE-bench implicit caching


@dataclass(frozen=True)
class ImplicitCall:
    """One recorded call of a SWE-bench run, reduced to what the implicit model needs."""

    prompt: int
    """``prompt_tokens`` as reported (Gemini's tokenizer)."""
    cached: int
    """``prompt_tokens_details.cached_tokens`` as reported."""
    shared: float
    """The prefix this request shares with an earlier one, in the provider's tokens: the
    simulator's shared prefix (whole messages, o200k) scaled by the recorded prompt over
    our count of the request."""
    shared_routed: float
    """The same, among earlier requests served by the same backend (``provider`` of the
    response: OpenRouter routes Gemini between Google Vertex and Google AI Studio, which
    do not share a cache)."""


@dataclass(frozen=True)
class ImplicitCache:
    """An implicit prefix cache in three parameters: a prefix shared with an earlier
    request is read when it is at least ``min_tokens`` long, rounded down to
    ``granularity``, and the provider serves it with probability ``hit_rate`` (the
    prediction is the expected read)."""

    min_tokens: int
    granularity: int
    hit_rate: float
    routed: bool = False
    """Whether each backend keeps its own cache."""

    def read(self, call: ImplicitCall) -> float:
        """The expected cached tokens of ``call``."""
        shared = call.shared_routed if self.routed else call.shared
        if shared < max(self.min_tokens, 1):
            return 0.0
        return self.hit_rate * (shared // self.granularity) * self.granularity


def _usage_of(message: dict[str, Any]) -> tuple[int, int, str]:
    import ast

    extra = message.get("extra")
    if isinstance(extra, str):
        extra = ast.literal_eval(extra)
    response = (extra or {}).get("response") or {}
    usage = response.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return (
        int(usage.get("prompt_tokens") or 0),
        int(details.get("cached_tokens") or 0),
        str(response.get("provider") or ""),
    )


def implicit_calls(path: Path) -> list[ImplicitCall]:
    """Every call of one recorded SWE-bench run with its shared prefix (both ways)."""
    from contextfold.message import Msg, openai_request
    from contextfold.replay import openai_blocks
    from contextfold.token import counter_for_model

    counter = counter_for_model("gpt-4o")
    raw = json.loads(path.read_text(encoding="utf-8"))["messages"]
    history: list[Any] = []
    seen: dict[str, set[str]] = {}
    calls = []
    for m in raw:
        if m["role"] == "assistant":
            prompt, cached, backend = _usage_of(m)
            blocks = openai_blocks(openai_request(history), counter)
            total = sum(b.tokens for b in blocks)
            scale = prompt / total if total else 0.0

            def shared_with(keys: set[str], blocks: list[Any] = blocks) -> int:
                n = 0
                for b in blocks:
                    if b.key not in keys:
                        break
                    n += b.tokens
                return n

            everywhere = set().union(*seen.values()) if seen else set()
            calls.append(
                ImplicitCall(
                    prompt,
                    cached,
                    shared_with(everywhere) * scale,
                    shared_with(seen.get(backend, set())) * scale,
                )
            )
            seen.setdefault(backend, set()).update(b.key for b in blocks)
        history.append(Msg(m["role"], m["content"], m["role"]))
    return calls


def split_runs(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """The fixed split: runs sorted by instance id, even positions fit, odd held out."""
    ordered = sorted(names)
    return ordered[0::2], ordered[1::2]


def share_error(model: ImplicitCache, calls: Sequence[ImplicitCall]) -> float:
    """Predicted minus recorded cached share of one run (points of 1)."""
    prompt = sum(c.prompt for c in calls)
    predicted = sum(model.read(c) for c in calls)
    recorded = sum(c.cached for c in calls)
    return (predicted - recorded) / prompt if prompt else 0.0


MIN_TOKENS = (0, 1024, 2048, 4096)
GRANULARITIES = (1, 128, 512, 1024, 2048, 4096)
HIT_RATES = tuple(round(0.5 + 0.01 * k, 2) for k in range(51))


def fit(runs: Sequence[Sequence[ImplicitCall]], *, routed: bool) -> ImplicitCache:
    """The grid point with the least mean absolute per-run share error on ``runs``."""
    best: tuple[float, ImplicitCache] | None = None
    for m in MIN_TOKENS:
        for g in GRANULARITIES:
            for h in HIT_RATES:
                model = ImplicitCache(m, g, h, routed=routed)
                loss = statistics.fmean(abs(share_error(model, r)) for r in runs)
                if best is None or loss < best[0]:
                    best = (loss, model)
    assert best is not None
    return best[1]


def _implicit_section(opts: Options) -> str:
    paths = sorted(SWEBENCH_DIR.glob("*.traj.json"))
    runs = {p.name.removesuffix(".traj.json"): implicit_calls(p) for p in paths}
    train, test = split_runs(list(runs))
    plain = ImplicitCache(1024, 128, 1.0)  # the `openai` rules, every hit served
    models = {
        "fitted, one cache": fit([runs[n] for n in train], routed=False),
        "fitted, a cache per backend": fit([runs[n] for n in train], routed=True),
        "`openai` rules (1,024 min, 128 increment, always served), not fitted": plain,
    }
    lines = []
    for label, model in models.items():
        held = [runs[n] for n in test]
        errs = [share_error(model, r) for r in held]
        prompt = sum(c.prompt for r in held for c in r)
        recorded = sum(c.cached for r in held for c in r)
        predicted = sum(model.read(c) for r in held for c in r)
        fit_errs = [abs(share_error(model, runs[n])) for n in train]
        lines.append(
            f"| {label} | {model.min_tokens:,} | {model.granularity:,} | {model.hit_rate:.2f} "
            f"| {100 * statistics.median(fit_errs):.2f} "
            f"| {100 * statistics.median(abs(e) for e in errs):.2f} "
            f"| {100 * max(abs(e) for e in errs):.2f} "
            f"| {_pct(recorded / prompt)} vs {_pct(predicted / prompt)} "
            f"({100 * (predicted - recorded) / recorded:+.1f}%) |"
        )
    best = models["fitted, a cache per backend"]
    per_run = []
    for n in test:
        calls = runs[n]
        prompt = sum(c.prompt for c in calls)
        recorded = sum(c.cached for c in calls)
        predicted = sum(best.read(c) for c in calls)
        per_run.append(
            f"| {n} | {len(calls)} | {prompt:,} | {_pct(recorded / prompt)} "
            f"| {_pct(predicted / prompt)} | {100 * (predicted - recorded) / prompt:+.2f} |"
        )
    n_calls = sum(len(r) for r in runs.values())
    return (
        f"\n**(c) SWE-bench implicit caching** ({len(runs)} runs, {n_calls:,} calls; Gemini 3 "
        "Pro through OpenRouter, truth = each call's reported `prompt_tokens` and "
        "`cached_tokens`). Each call's request is the recorded messages before it (the "
        "agent sent them unchanged); its prefix shared with an earlier request comes from "
        "the simulator's blocks (o200k counts scaled to the recorded prompt). The model's "
        "three parameters (minimum, granularity, hit rate) are fitted on a fixed half: "
        f"the runs sorted by instance id, even positions ({len(train)} runs), by least mean "
        "absolute per-run error of the cached share over a grid "
        f"(minimum {'/'.join(map(str, MIN_TOKENS))}, granularity "
        f"{'/'.join(map(str, GRANULARITIES))}, hit rate 0.50..1.00); the odd positions "
        f"({len(test)} runs) are held out. The per-backend variant also uses which backend "
        "served each call (`provider` of the recorded response), a routing fact, not a "
        "cache counter.\n\n"
        "| model | min | granularity | hit rate | fit half: median abs error per run (points) "
        "| held out: median abs error per run (points) | held out: worst | held out total: "
        "recorded vs predicted share (error on cached tokens) |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(lines) + "\n\n"
        "<details><summary>held-out runs, the per-backend model</summary>\n\n"
        "| run | calls | prompt tokens | recorded cached share | predicted | error (points) |\n"
        "|---|---:|---:|---:|---:|---:|\n" + "\n".join(per_run) + "\n\n</details>\n"
    )


async def run(opts: Options) -> str:
    out = [
        "## Prompt-cache simulator against real counters\n",
        await _llama_section(opts),
        _providers_section(),
        _implicit_section(opts),
    ]
    return "\n".join(out)
