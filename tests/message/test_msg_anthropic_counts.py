"""The block counts behind cache breakpoints, from one conversion, equal what converting
each prefix of the conversation on its own gives."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings

from contextfold._exceptions import MessageFormatError
from contextfold.message import Msg, to_anthropic_request
from contextfold.message._anthropic_encode import to_anthropic_counted

from .strategies import msgs


def _blocks_of_prefix(prefix: Sequence[Msg]) -> int:
    """How the breakpoints used to be placed: the prefix converted alone."""
    _, wire = to_anthropic_request(list(prefix))
    return sum(1 if isinstance(m["content"], str) else len(m["content"]) for m in wire)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=msgs)
def test_counts_from_one_conversion_equal_each_prefix_converted_alone(
    conversation: list[Msg],
) -> None:
    try:
        system, wire, counts = to_anthropic_counted(conversation)
    except MessageFormatError:
        return
    assert (system, wire) == to_anthropic_request(conversation)
    for k in range(len(conversation) + 1):
        assert sum(counts[:k]) == _blocks_of_prefix(conversation[:k])
