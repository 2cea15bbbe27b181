"""Check that every request an agent sent is valid for the OpenAI and Anthropic formats."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .._exceptions import MessageFormatError
from ..message import Msg, check_anthropic_valid, check_openai_valid

__all__ = ["check_requests_valid"]


def check_requests_valid(requests: Iterable[Sequence[Msg] | Any]) -> None:
    """Raise ``MessageFormatError`` naming the first request that breaks a provider rule.

    Each item is a message list or any object with a ``messages`` attribute (such as
    ``ScriptedModel.requests``). The rules are those of
    :func:`contextfold.message.check_openai_valid` and
    :func:`contextfold.message.check_anthropic_valid`: every tool call is followed by its
    result, no result comes without its call, and roles are in an order the API accepts.
    """
    checks = (("openai", check_openai_valid), ("anthropic", check_anthropic_valid))
    for index, request in enumerate(requests):
        messages = list(getattr(request, "messages", request))
        for provider, check in checks:
            problems = check(messages)
            if problems:
                detail = "; ".join(str(p) for p in problems)
                raise MessageFormatError(f"request {index} is not {provider}-valid: {detail}")
