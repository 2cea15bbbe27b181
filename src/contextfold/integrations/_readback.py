"""Read-back tools bound to the conversation of the call that runs them.

A framework builds its tools once, at the integration's construction, but runs them in
many conversations (LangGraph threads, Pydantic AI conversations). Each tool made here
takes the framework's own per-call context as its first parameter (hidden from the model
by the framework), asks ``session_of`` which conversation the call belongs to, and runs
:func:`~contextfold.tool.readback_tools` confined to that session: one conversation never
reads another's offloaded items. A call whose conversation cannot be told is refused
with a message to the model, never served from the whole workspace.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, get_type_hints

from ..context import ContextConfig
from ..tool import readback_tools
from ..workspace import WorkspaceReader

__all__ = ["SessionOf", "bound_readback", "no_session"]

_CHARS_PER_TOKEN = 2  # as the agent: Read stops early so its result usually fits the limit

SessionOf = Callable[[Any], str | None]
"""The session a call's framework context belongs to, or ``None`` when it cannot tell."""

ReadbackFn = Callable[..., Awaitable[str]]


def no_session(tool: str, why: str) -> str:
    """What a read-back tool answers when it cannot tell its conversation."""
    return (
        f"Error: {tool} cannot tell which conversation this call belongs to ({why}), so it "
        "reads nothing: offloaded items are visible only inside their own conversation."
    )


def session_tools(
    reader: WorkspaceReader, config: ContextConfig | None, session_id: str | None
) -> list[ReadbackFn]:
    """The read-back tools over ``reader`` (one session's items, or all with ``None``)."""
    limit = (config or ContextConfig()).tool_result_limit
    return readback_tools(reader, session_id=session_id, max_chars=limit * _CHARS_PER_TOKEN)


def bound_readback(
    reader: WorkspaceReader,
    config: ContextConfig | None,
    *,
    context: tuple[str, Any],
    session_of: SessionOf,
    why: str,
) -> list[ReadbackFn]:
    """``Read``, ``Grep``, ``Glob`` (and ``Search``) whose first parameter is the framework's
    per-call context ``context`` (its name and annotation, which the framework injects);
    each call runs in the session ``session_of`` finds in it, or is refused (``why``
    says what was missing)."""
    name, annotation = context
    return [
        _bind(template, reader, config, name, annotation, session_of, why)
        for template in session_tools(reader, config, None)
    ]


def _bind(
    template: ReadbackFn,
    reader: WorkspaceReader,
    config: ContextConfig | None,
    name: str,
    annotation: Any,
    session_of: SessionOf,
    why: str,
) -> ReadbackFn:
    tool = template.__name__
    signature = inspect.signature(template)
    first = inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation)
    hints = get_type_hints(template)
    params = [p.replace(annotation=hints[p.name]) for p in signature.parameters.values()]
    bound_signature = signature.replace(parameters=[first, *params])

    async def call(*args: Any, **kwargs: Any) -> str:
        arguments = bound_signature.bind(*args, **kwargs).arguments
        session = session_of(arguments.pop(name))
        if session is None:
            return no_session(tool, why)
        by_name = {f.__name__: f for f in session_tools(reader, config, session)}
        return await by_name[tool](**arguments)

    call.__name__ = call.__qualname__ = tool
    call.__doc__ = template.__doc__
    call.__signature__ = bound_signature  # type: ignore[attr-defined]
    call.__annotations__ = {name: annotation, **hints}
    return call
