"""Gateway figure, Codex half: the recorded Codex sessions replayed through the gateway on
``/v1/responses`` and priced under OpenAI's prompt-cache rules (issue 29, point 4).

Each rollout (``codex-*`` in the shared data, the ones with ``token_count`` usage) is cut
into the requests Codex sent: call ``k``'s ``input`` is every Responses item the rollout
holds before the first item of its answer (the items between two ``token_count`` events),
word for word, including the reasoning items with their ``encrypted_content`` as Codex
sends them back with ``store: false``. ``instructions`` is the rollout's base
instructions; the tool schemas are not recorded, so one stand-in tool takes their size
(the first call's recorded prompt less our count of what it was sent).

Three sequences of requests are priced, each on the bytes the upstream received:

- direct: the requests as rebuilt;
- gateway: the same requests sent through the real gateway (``create_app`` on loopback,
  in front of an upstream that answers each call with its recorded output items). Codex
  asks for no context management, and transparent mode is not built for
  ``/v1/responses``, so the gateway relays them byte for byte: the row checks that
  relaying costs nothing;
- gateway, compaction: the client adds ``context_management: [{"type": "compaction",
  "compact_threshold": trigger x window}]`` to every request (what a Responses client
  that wants the gateway to compact sends) and appends the answer's compaction item to
  its history, as OpenAI's compaction guide says; the gateway emulates the compaction;
- drop-oldest: the trivial strategy at the same window: the oldest items dropped until
  the request fits, behind a one-line user note, never between a call and its output.

OpenAI's cache (``contextfold.replay.OpenAICache``): automatic, the longest prefix seen
before, from 1,024 tokens in 128-token increments, no charge for writing, five minutes
without use to expiry. Counted with o200k_base (the GPT-5 tokenizer). Prices are the
recorded model's own (:data:`PRICES`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from contextfold.gateway import GatewayConfig, create_app
from contextfold.replay import Block, OpenAICache
from contextfold.token import TokenCounter, counter_for_model

from ._gateway_servers import serving_in_thread
from .fig_cache_validation import load_sessions, recordings_dir

__all__ = ["PRICES", "CodexCall", "CodexResult", "codex_calls", "run_codex", "table"]

PRICES: dict[str, tuple[float, float, float]] = {
    "gpt-5.5": (5.00, 0.50, 30.00),
    "gpt-5.4": (2.50, 0.25, 15.00),
}
"""US dollars per million tokens: input, cached input, output (standard tier, prompts
under 272k). Source: OpenAI's pricing page, https://developers.openai.com/api/docs/pricing
(read through dated copies, 2026-06 to 2026-11: gpt-5.5 $5.00 / $0.50 / $30.00, gpt-5.4
$2.50 / $0.25 / $15.00); checked 2026-12-06."""

CACHE_RULES = (
    "https://developers.openai.com/api/docs/guides/prompt-caching: caching is automatic for "
    "prompts of 1,024 tokens or more, hits come in increments of 128 tokens, exact prefix "
    "match; the OpenAI cookbook's Prompt Caching 201 says these rules hold for models before "
    "GPT-5.6 (both recorded models are)"
)

DROPPED_NOTE = "[Earlier items were dropped to fit the context window.]"

_OUTPUT_TYPES = frozenset(
    {"reasoning", "function_call", "custom_tool_call", "web_search_call", "local_shell_call"}
)


def _is_output(item: dict[str, Any]) -> bool:
    if item.get("type") == "message":
        return item.get("role") == "assistant"
    return item.get("type") in _OUTPUT_TYPES


@dataclass(frozen=True)
class CodexCall:
    """One recorded Codex call: what it was sent, what it got back, what it cost."""

    input: list[dict[str, Any]]
    output: list[dict[str, Any]]
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    model: str


def codex_calls(path: Path) -> tuple[str, str, list[CodexCall]]:
    """``(session id, base instructions, calls)`` of a rollout: every call whose answer
    was followed by a ``token_count`` event (a repeated count is not a new call)."""
    items: list[dict[str, Any]] = []
    calls: list[CodexCall] = []
    start: int | None = None  # where the answer being read began in ``items``
    seen_total: Any = None
    model, session, instructions = "", path.stem, ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        payload = row.get("payload")
        if not isinstance(payload, dict):
            continue
        kind = row.get("type")
        if kind == "session_meta":
            session = str(payload.get("id") or session)
            base = payload.get("base_instructions")
            instructions = str(base.get("text", "")) if isinstance(base, dict) else ""
        elif kind == "turn_context":
            model = str(payload.get("model") or model)
        elif kind == "response_item":
            if _is_output(payload) and start is None:
                start = len(items)
            elif not _is_output(payload):
                start = None  # an answer that no count followed: not priced
            items.append(payload)
        elif kind == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info")
            if not isinstance(info, dict):
                continue
            total = (info.get("total_token_usage") or {}).get("total_tokens")
            if total is not None and total == seen_total:
                continue
            seen_total = total
            last = info.get("last_token_usage") or {}
            if start is not None:
                calls.append(
                    CodexCall(
                        list(items[:start]),
                        list(items[start:]),
                        int(last.get("input_tokens") or 0),
                        int(last.get("cached_input_tokens") or 0),
                        int(last.get("output_tokens") or 0),
                        model,
                    )
                )
                start = None
    return session, instructions, calls


def _chain(previous: str, value: Any) -> str:
    """The key of a block: a hash of the key before it and of the block's JSON."""
    data = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(f"{previous}\x00{data}".encode()).hexdigest()


def _item_text(item: dict[str, Any]) -> str:
    """What a counter should count for one input item: its text, or its JSON."""
    if item.get("type") == "message":
        content = item.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "\n".join(
                str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
            )
    return json.dumps(item, ensure_ascii=False, sort_keys=True)


def responses_blocks(body: dict[str, Any], counter: TokenCounter) -> list[Block]:
    """The cache blocks of a Responses body in prompt order: tools, instructions, then
    each input item, each keyed by everything before it."""
    blocks: list[Block] = []
    key = _chain("", {"tools": body.get("tools") or [], "tool_choice": body.get("tool_choice")})
    if body.get("tools"):
        blocks.append(Block(key, counter.count_text(json.dumps(body["tools"]))))
    if body.get("instructions"):
        key = _chain(key, body["instructions"])
        blocks.append(Block(key, counter.count_text(body["instructions"])))
    for item in body.get("input") or []:
        key = _chain(key, item)
        blocks.append(Block(key, counter.count_text(_item_text(item)) + 4))
    return blocks


def _standin_tool(tokens: int, counter: TokenCounter) -> dict[str, Any]:
    """One tool schema of about ``tokens`` tokens (its JSON, as :func:`responses_blocks`
    counts it): a repeated description, its length corrected once by measuring it."""
    unit = "Run a shell command in the workspace and return its output. "

    def tool(times: int) -> dict[str, Any]:
        return {
            "type": "function",
            "name": "shell",
            "description": unit * max(times, 1),
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        }

    guess = max(tokens // max(counter.count_text(unit), 1), 1)
    measured = counter.count_text(json.dumps([tool(guess)]))
    return tool(round(guess * tokens / measured)) if measured else tool(guess)


def direct_bodies(
    session: str, instructions: str, calls: Sequence[CodexCall], counter: TokenCounter
) -> list[dict[str, Any]]:
    """The session's requests as Codex sent them (rebuilt; see the module docstring)."""

    def body(call: CodexCall, tools: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "model": call.model,
            "instructions": instructions,
            "input": call.input,
            "tools": tools,
            "tool_choice": "auto",
            "parallel_tool_calls": True,
            "store": False,
            "stream": False,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": session,
        }

    ours = sum(b.tokens for b in responses_blocks(body(calls[0], []), counter))
    tools = [_standin_tool(max(calls[0].input_tokens - ours, 0), counter)]
    return [body(c, tools) for c in calls]


@dataclass(frozen=True)
class OpenAIPriced:
    """A sequence of Responses requests priced under OpenAI's cache."""

    dollars: float
    uncached: int
    read: int
    new: int

    @property
    def input(self) -> int:
        return self.uncached + self.read

    @property
    def read_share(self) -> float:
        return self.read / self.input if self.input else 0.0

    @property
    def ceiling(self) -> float:
        """The read share of a perfect prefix cache (no minimum, increment or expiry)."""
        return 1 - self.new / self.input if self.input else 0.0


def price(
    bodies: Sequence[dict[str, Any]],
    times: Sequence[float],
    outputs: Sequence[int],
    model: str,
    counter: TokenCounter,
) -> OpenAIPriced:
    """``bodies`` sent at ``times`` under OpenAI's cache and ``model``'s prices."""
    rate_in, rate_cached, rate_out = PRICES[model]
    cache = OpenAICache(ttl_seconds=300, min_cacheable_tokens=1024, increment_tokens=128)
    dollars = 0.0
    uncached = read = new = 0
    previous: list[str] = []
    for body, at, output in zip(bodies, times, outputs, strict=True):
        blocks = responses_blocks(body, counter)
        usage = cache.request(blocks, at=at)
        shared = 0
        for block, key in zip(blocks, previous, strict=False):
            if block.key != key:
                break
            shared += block.tokens
        new += sum(b.tokens for b in blocks) - shared
        previous = [b.key for b in blocks]
        uncached += usage.uncached
        read += usage.read
        dollars += (usage.uncached * rate_in + usage.read * rate_cached + output * rate_out) / 1e6
    return OpenAIPriced(dollars, uncached, read, new)


def _answer(i: int, call: CodexCall) -> dict[str, Any]:
    return {
        "id": f"resp_{i:04d}",
        "object": "response",
        "status": "completed",
        "model": call.model,
        "output": call.output,
        "usage": {
            "input_tokens": call.input_tokens,
            "input_tokens_details": {"cached_tokens": call.cached_tokens},
            "output_tokens": call.output_tokens,
            "total_tokens": call.input_tokens + call.output_tokens,
        },
    }


def _recording_upstream(calls: Sequence[CodexCall], received: dict[int, bytes]) -> Starlette:
    async def responses(request: Request) -> Response:
        i = int(request.headers["x-replay-call"])
        received[i] = await request.body()
        return JSONResponse(_answer(i, calls[i]))

    return Starlette(routes=[Route("/v1/responses", responses, methods=["POST"])])


def through_gateway(
    calls: Sequence[CodexCall], bodies: Sequence[dict[str, Any]], threshold: int | None
) -> tuple[list[bytes], int]:
    """The bytes the upstream received when ``bodies`` went through the gateway, and how many
    compactions it made. With ``threshold``, every request asks for compaction at that
    many tokens and the client keeps each compaction item in its history where it came
    (after the input of the call that returned it)."""
    received: dict[int, bytes] = {}
    inserted: list[tuple[int, dict[str, Any]]] = []  # (position in the recorded items, item)
    with serving_in_thread(_recording_upstream(calls, received)) as upstream:
        app = create_app(GatewayConfig(upstream=upstream))
        with (
            serving_in_thread(app) as gateway,
            httpx.Client(base_url=gateway, timeout=300) as client,
        ):
            for i, body in enumerate(bodies):
                sent = body
                if threshold is not None:
                    items = list(body["input"])
                    for position, item in reversed(inserted):
                        items.insert(position, item)
                    sent = {
                        **body,
                        "input": items,
                        "context_management": [
                            {"type": "compaction", "compact_threshold": threshold}
                        ],
                    }
                reply = client.post(
                    "/v1/responses",
                    content=_encoded(sent),
                    headers={
                        "content-type": "application/json",
                        "authorization": "Bearer sk-replay",
                        "x-replay-call": str(i),
                    },
                )
                reply.raise_for_status()
                output = reply.json().get("output") or []
                if output and output[0].get("type") == "compaction":
                    inserted.append((len(body["input"]), output[0]))
    return [received[i] for i in range(len(bodies))], len(inserted)


def _encoded(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode()


def drop_oldest(body: dict[str, Any], window: int, counter: TokenCounter) -> dict[str, Any]:
    """``body`` with its oldest items dropped until it fits ``window`` (the trivial
    strategy), never starting on a tool output, behind a one-line note."""
    blocks = responses_blocks(body, counter)
    items = body["input"]
    fixed = sum(b.tokens for b in blocks[: len(blocks) - len(items)])
    sizes = [b.tokens for b in blocks[len(blocks) - len(items) :]]
    if fixed + sum(sizes) <= window:
        return body
    start, suffix = len(items) - 1, 0
    for k in range(len(items) - 1, 0, -1):
        suffix += sizes[k]
        if fixed + suffix > window:
            break
        if not str(items[k].get("type", "")).endswith("_output"):
            start = k
    text = {"type": "input_text", "text": DROPPED_NOTE}
    note = {"type": "message", "role": "user", "content": [text]}
    return {**body, "input": [note, *items[start:]]}


@dataclass(frozen=True)
class CodexResult:
    name: str
    model: str
    calls: int
    peak: int
    recorded_share: float
    direct: OpenAIPriced
    relayed: OpenAIPriced
    relayed_identical: bool
    compacting: OpenAIPriced
    compactions: int
    dropped: OpenAIPriced


def run_codex(window: int, trigger: float) -> list[CodexResult]:
    """Every Codex session with usage, replayed at ``window`` (see the module docstring)."""
    counter = counter_for_model("gpt-5")
    timed = {s.name: s for s in load_sessions(recordings_dir()) if s.agent == "codex"}
    results = []
    for folder in sorted(recordings_dir().glob("codex-*")):
        for path in sorted(folder.glob("*.jsonl")):
            name = f"{folder.name}/{path.name[:24]}"
            session, instructions, calls = codex_calls(path)
            if name not in timed or len(calls) < 2:
                continue
            times = [c.at for c in timed[name].calls]
            if len(times) != len(calls):
                raise RuntimeError(f"{path}: {len(calls)} calls for {len(times)} timed answers")
            model = calls[0].model
            outputs = [c.output_tokens for c in calls]
            bodies = direct_bodies(session, instructions, calls, counter)
            recorded = sum(c.cached_tokens for c in calls) / max(
                sum(c.input_tokens for c in calls), 1
            )
            relayed_raw, _ = through_gateway(calls, bodies, None)
            relayed = [json.loads(raw) for raw in relayed_raw]
            compacting_raw, compactions = through_gateway(calls, bodies, int(trigger * window))
            compacting = [json.loads(raw) for raw in compacting_raw]
            dropped = [drop_oldest(b, window, counter) for b in bodies]
            results.append(
                CodexResult(
                    name,
                    model,
                    len(calls),
                    max(c.input_tokens for c in calls),
                    recorded,
                    price(bodies, times, outputs, model, counter),
                    price(relayed, times, outputs, model, counter),
                    relayed_raw == [_encoded(b) for b in bodies],
                    price(compacting, times, outputs, model, counter),
                    compactions,
                    price(dropped, times, outputs, model, counter),
                )
            )
    return results


def _cell(p: OpenAIPriced) -> str:
    return f"${p.dollars:.3f} ({100 * p.read_share:.1f}%)"


def table(results: Sequence[CodexResult], window: int, trigger: float) -> str:
    rows = []
    for r in results:
        same = " (same bytes)" if r.relayed_identical else ""
        rows.append(
            f"| {r.name} | {r.model} | {r.calls} | {r.peak:,} | {100 * r.recorded_share:.1f}% "
            f"| {_cell(r.direct)} | {_cell(r.relayed)}{same} "
            f"| {_cell(r.compacting)} | {r.compactions} "
            f"| {100 * (r.compacting.dollars / r.direct.dollars - 1):+.1f}% "
            f"| {100 * (r.compacting.read_share - r.direct.read_share):+.1f} "
            f"| {_cell(r.dropped)} |"
        )
    return (
        f"Codex on `/v1/responses`, window {window:,} tokens (o200k_base), compaction threshold "
        f"{int(trigger * window):,}, OpenAI's cache rules, extractive summarizer.\n\n"
        "| session | model | calls | peak prompt (recorded) | recorded read share "
        "| direct $ (read share) | gateway, as Codex sends $ (read share) "
        "| gateway, compaction asked $ (read share) | compactions | compaction vs direct "
        "| share diff (points) | drop-oldest $ (read share) |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n"
    )
