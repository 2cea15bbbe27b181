"""A client's retry of its previous request (after a timeout, or after the replica that
took it died) is forwarded with the same bytes, cache breakpoints included, before and
after a compaction; the retry changes nothing for the next turn."""

from __future__ import annotations

from typing import Any

from .servers import ScriptedUpstream, message
from .test_transparent import Conversation, summary_text, transparent_gateway


def test_the_previous_request_sent_again_is_forwarded_byte_for_byte(
    upstream: ScriptedUpstream,
) -> None:
    """Before: the retry's breakpoint moved to its own end (the end of the request it
    repeats), not the end of the turn before, so its bytes differed."""
    c = Conversation("Find every item and fix it.", headers={"x-contextfold-session": "retry"})
    once, twice, compacted = [], [], []
    with transparent_gateway(upstream) as url:
        for _ in range(12):
            c.step()
            for out in (once, twice):
                upstream.then_json(message("ok"))
                c.send(url)
                out.append(upstream.received[-1].body)
            compacted.append(summary_text(_json(once[-1])) is not None)
    assert any(compacted)  # retries after a compaction too
    assert twice == once
    # The turn after a retry is what it is without one.
    c2 = Conversation("Find every item and fix it.", headers={"x-contextfold-session": "plain"})
    alone = []
    with transparent_gateway(upstream) as url:
        for _ in range(12):
            c2.step()
            upstream.then_json(message("ok"))
            c2.send(url)
            alone.append(upstream.received[-1].body)
    assert alone == once


def _json(body: bytes) -> Any:
    import json

    return json.loads(body)
