"""Gateway figure: what the read-back rounds cost, on the recorded Claude Code sessions
under Anthropic's prompt-cache rules (issue 29: offload and read-back through a tool the
gateway answers itself, never more expensive than no gateway).

With ``--tool-result-limit``, a tool result over the limit is cut and kept whole, and the
model may call ``contextfold_read_result`` to read the omitted part. Each such call is an
extra upstream round: the previous round's request again (read from the cache), plus the
call and the page read. The recorded sessions never call the tool (it did not exist), so
the upstream here is a stand-in model that reads back: on the request that first carries
a cut result (the turn the tool ran), it calls the read-back tool once for each cut result
in the request's last message, at the offset the note names (the first omitted page);
once answered, it gives the recorded answer. This is a pessimistic regime: every cut
result is read back, once, in the turn it arrives.

The session's requests are rebuilt and priced as in :mod:`.gateway_cost` (same cache
simulator, prices, times and outputs; a read round is priced at its call's time, its
output the call's tokens). Rows, side by side:

- direct: the requests as the client sent them, whole results every turn; LiteLLM's
  proxy (``--litellm PATH``, the peer row) priced on what it forwarded;
- cut, no offload (the trivial strategy: truncation; the omitted part is lost);
- offload, the model never reads (the read-back tool's definition is sent, unused);
- offload, the model reads every cut result back (the extra rounds priced).

    python -m benchmarks.gateway_cost_reads [--window 200000] [--limit 2000]
        [--litellm /work/venv-litellm/bin/litellm]

Needs the ``gateway`` extra. Prints a Markdown table per session and the totals.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from contextfold.gateway import READ_TOOL, TransparentPolicy
from contextfold.token import AnthropicEstimator, TokenCounter

from .fig_cache_validation import Session
from .gateway_cost import (
    Priced,
    _outputs,
    _response,
    claude_code_sessions,
    direct_bodies,
    peer_rows,
    price,
    send_session,
    session_arguments,
)

__all__ = ["ReadsResult", "main", "run_session"]

NOTE = re.compile(r'call contextfold_read_result with \{"id": "(r[0-9a-f]{16})", "offset": (\d+)\}')
ITEM = re.compile(r"the whole result is item (r[0-9a-f]{16})")
READ_PREFIX = "toolu_cfread_"


@dataclass(frozen=True)
class Sent:
    """One request the upstream received: the client call it serves, and its output."""

    call: int
    body: dict[str, Any]
    output: int


def _text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def _read_calls(body: dict[str, Any], call: int) -> list[dict[str, Any]]:
    """The stand-in model's read-back calls for ``body``: one per cut result in its last
    message, unless that message answers read-back calls already."""
    last = body["messages"][-1]
    content = last.get("content") if last.get("role") == "user" else None
    if not isinstance(content, list):
        return []
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    if any(str(b.get("tool_use_id", "")).startswith(READ_PREFIX) for b in results):
        return []
    calls = []
    for k, block in enumerate(results):
        found = NOTE.search(_text(block))
        if found:
            calls.append(
                {
                    "type": "tool_use",
                    "id": f"{READ_PREFIX}{call}_{k}",
                    "name": READ_TOOL,
                    "input": {"id": found.group(1), "offset": int(found.group(2))},
                }
            )
    return calls


def _upstream(
    answers: dict[int, dict[str, Any]], sent: list[Sent], read: bool, counter: TokenCounter
) -> Starlette:
    async def messages(request: Request) -> Response:
        body = json.loads(await request.body())
        i = int(request.headers["x-replay-call"])
        calls = _read_calls(body, i) if read else []
        if calls:
            answer = {
                **answers[i],
                "content": [{"type": "text", "text": "Reading the omitted part."}, *calls],
                "stop_reason": "tool_use",
            }
            output = counter.count_text(json.dumps(answer["content"]))
            answer["usage"] = {**answers[i]["usage"], "output_tokens": output}
        else:
            answer = answers[i]
            output = int(answer["usage"]["output_tokens"])
        sent.append(Sent(i, body, output))
        return JSONResponse(answer)

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


def through(
    session: Session,
    bodies: Sequence[dict[str, Any]],
    outputs: Sequence[int],
    policy: TransparentPolicy,
    *,
    read: bool,
    counter: TokenCounter,
) -> list[Sent]:
    """Every request the upstream received when ``bodies`` went through the gateway (the
    stand-in model reading back when ``read``), in order."""
    answers = {i: _response(session.calls, i, outputs[i]) for i in range(len(bodies))}
    sent: list[Sent] = []
    replies = send_session(_upstream(answers, sent, read, counter), session, bodies, policy)
    if any(READ_TOOL in reply for reply in replies):
        raise RuntimeError("the read-back tool reached the client")
    return sent


def _priced(sent: Sequence[Sent], times: Sequence[float], counter: TokenCounter) -> Priced:
    return price(
        [s.body for s in sent],
        [times[s.call] for s in sent],
        [s.output for s in sent],
        counter,
    )


@dataclass(frozen=True)
class ReadsResult:
    name: str
    calls: int
    cut: int
    """Distinct tool results the gateway cut."""
    rounds: int
    """Extra upstream rounds (read-back)."""
    direct: Priced
    truncated: Priced
    unread: Priced
    read: Priced
    litellm: Priced | None = None


TOOLS: list[dict[str, Any]] = [
    {
        "name": "Bash",
        "description": "Run a shell command in the repository.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    }
]
"""The rebuilt requests carry no tools (the stand-in system prompt stands for their
size), and the gateway adds its read-back tool only beside the client's: every variant,
direct included, gets this one."""


def with_tools(bodies: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**b, "tools": TOOLS} for b in bodies]


def run_session(
    session: Session,
    policy: TransparentPolicy,
    counter: TokenCounter,
    litellm: Sequence[dict[str, Any]] | None = None,
) -> ReadsResult:
    bodies = with_tools(direct_bodies(session, counter))
    outputs = _outputs(session)
    times = [c.at for c in session.calls]
    cut_only = TransparentPolicy(
        window=policy.window,
        trigger=policy.trigger,
        keep=policy.keep,
        tool_result_limit=policy.tool_result_limit,
        offload=False,
    )
    truncated = through(session, bodies, outputs, cut_only, read=False, counter=counter)
    unread = through(session, bodies, outputs, policy, read=False, counter=counter)
    read = through(session, bodies, outputs, policy, read=True, counter=counter)
    items = {m.group(1) for s in unread for m in ITEM.finditer(json.dumps(s.body["messages"]))}
    return ReadsResult(
        session.name,
        len(bodies),
        len(items),
        len(read) - len(bodies),
        price(bodies, times, outputs, counter),
        _priced(truncated, times, counter),
        _priced(unread, times, counter),
        _priced(read, times, counter),
        price(litellm, times, outputs, counter) if litellm is not None else None,
    )


def _cell(p: Priced | None, direct: Priced) -> str:
    if p is None:
        return "not run"
    return f"${p.dollars:.3f} ({100 * (p.dollars / direct.dollars - 1):+.1f}%)"


def table(results: Sequence[ReadsResult], policy: TransparentPolicy) -> str:
    rows = []
    totals: dict[str, float] = {}
    for r in results:
        extra = r.read.input - r.unread.input
        rows.append(
            f"| {r.name} | {r.calls} | {r.cut} | {r.rounds} | ${r.direct.dollars:.3f} "
            f"| {_cell(r.litellm, r.direct)} | {_cell(r.truncated, r.direct)} "
            f"| {_cell(r.unread, r.direct)} | {_cell(r.read, r.direct)} "
            f"| {extra:,} | {100 * (r.read.dollars / r.unread.dollars - 1):+.1f}% |"
        )
        for name, value in (
            ("calls", r.calls),
            ("cut", r.cut),
            ("rounds", r.rounds),
            ("direct", r.direct.dollars),
            ("truncated", r.truncated.dollars),
            ("unread", r.unread.dollars),
            ("read", r.read.dollars),
            ("extra", extra),
            ("extra_read", r.read.read - r.unread.read),
            ("extra_write", r.read.write - r.unread.write),
            ("extra_uncached", r.read.uncached - r.unread.uncached),
        ):
            totals[name] = totals.get(name, 0) + value
        if r.litellm is not None:
            totals["litellm"] = totals.get("litellm", 0) + r.litellm.dollars
    t = totals
    litellm = (
        f"${t['litellm']:.2f} ({100 * (t['litellm'] / t['direct'] - 1):+.1f}%)"
        if "litellm" in t
        else "not run"
    )
    rows.append(
        f"| **all** | {int(t['calls'])} | {int(t['cut'])} | {int(t['rounds'])} "
        f"| ${t['direct']:.2f} | {litellm} "
        f"| ${t['truncated']:.2f} ({100 * (t['truncated'] / t['direct'] - 1):+.1f}%) "
        f"| ${t['unread']:.2f} ({100 * (t['unread'] / t['direct'] - 1):+.1f}%) "
        f"| ${t['read']:.2f} ({100 * (t['read'] / t['direct'] - 1):+.1f}%) "
        f"| {int(t['extra']):,} | {100 * (t['read'] / t['unread'] - 1):+.1f}% |"
    )
    extra = max(t["extra"], 1)
    return (
        f"Window {policy.window:,}, tool-result limit {policy.tool_result_limit:,} tokens "
        f"(gateway counter), offload on, read rounds {policy.read_rounds}; the stand-in "
        "model reads every cut result back once, in the turn it arrives.\n\n"
        "| session | calls | results cut | read-back rounds | direct $ "
        "| LiteLLM $ (vs direct) | cut, no offload $ (vs direct) "
        "| offload, never read $ (vs direct) | offload, every cut result read $ (vs direct) "
        "| input tokens the read rounds add | read rounds' cost over never read |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n\nThe read rounds' input tokens: "
        f"{100 * t['extra_read'] / extra:.1f}% cache reads, "
        f"{100 * t['extra_write'] / extra:.1f}% cache writes, "
        f"{100 * t['extra_uncached'] / extra:.1f}% uncached.\n"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--window", type=int, default=200_000)
    parser.add_argument("--limit", type=int, default=2_000, help="--tool-result-limit")
    session_arguments(parser)
    args = parser.parse_args(argv)
    counter = AnthropicEstimator()
    sessions = claude_code_sessions(args.only)
    policy = TransparentPolicy(
        window=args.window, trigger=args.trigger, keep=args.keep, tool_result_limit=args.limit
    )
    peer = peer_rows(args.litellm, sessions, policy, counter)
    results = [run_session(s, policy, counter, p) for s, p in zip(sessions, peer, strict=True)]
    print(table(results, policy), flush=True)


if __name__ == "__main__":
    main()
