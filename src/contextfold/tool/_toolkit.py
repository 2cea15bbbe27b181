"""Toolkit: the tools and skills an agent may use, and the one way tool calls are run."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar, overload

import jsonschema

from .._logging import logger
from ..message import ToolCallBlock, ToolResultBlock, ToolSpec
from ._skills import Skill, load_skills, skills_prompt
from ._tool import FunctionTool, Tool, to_tool_output

__all__ = ["Toolkit", "error_result", "run_tool"]

_F = TypeVar("_F", bound=Callable[..., Any])


class Toolkit:
    """A named set of tools, plus the skills whose descriptions join the system prompt.

    Example::

        toolkit = Toolkit()

        @toolkit.register
        async def search(query: str, limit: int = 5) -> str:
            '''Search the notes.

            Args:
                query: Words to look for.
                limit: Most results to return.
            '''
    """

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        *,
        skills_dir: str | Path | None = None,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._skill_dirs: list[Path] = []
        for tool in tools:
            self.register(tool)
        if skills_dir is not None:
            self.add_skills_dir(skills_dir)

    @overload
    def register(
        self, func: _F, /, *, name: str | None = None, description: str | None = None
    ) -> _F: ...
    @overload
    def register(
        self, func: None = None, /, *, name: str | None = None, description: str | None = None
    ) -> Callable[[_F], _F]: ...
    def register(
        self,
        func: Any = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Any:
        """Add a function (sync or async) or a tool object; usable as a decorator.

        Returns what it was given, so a decorated function stays callable. A name that is
        already registered raises ``ValueError``: remove the old tool first.
        """
        if func is None:

            def decorator(f: _F) -> _F:
                self.register(f, name=name, description=description)
                return f

            return decorator
        if _is_tool_object(func) and name is None and description is None:
            self.add(func)
        elif callable(func):
            self.add(FunctionTool(func, name=name, description=description))
        else:
            raise TypeError(f"cannot register {func!r}: expected a function or a tool object")
        return func

    def add(self, tool: Tool) -> None:
        """Add a tool object (``name``, ``description``, ``parameters``, ``__call__``)."""
        if not tool.name:
            raise ValueError("a tool needs a non-empty name")
        if tool.name in self._tools:
            raise ValueError(
                f"a tool named {tool.name!r} is already registered; remove it first or "
                "register under another name"
            )
        jsonschema.Draft202012Validator.check_schema(tool.parameters)
        self._tools[tool.name] = tool

    def remove(self, name: str) -> None:
        """Remove a tool; ``KeyError`` if there is none by that name."""
        del self._tools[name]

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, if any."""
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        """Tool names in registration order."""
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        """What the model is told about each tool, in registration order."""
        return [
            ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
            for t in self._tools.values()
        ]

    def add_skills_dir(self, directory: str | Path) -> None:
        """Read skills from ``directory/<name>/SKILL.md`` (re-read on every prompt build)."""
        self._skill_dirs.append(Path(directory))

    @property
    def skills(self) -> list[Skill]:
        """Skills from every skills directory; the first directory wins on a name clash."""
        seen: dict[str, Skill] = {}
        for directory in self._skill_dirs:
            for skill in load_skills(directory):
                seen.setdefault(skill.name, skill)
        return list(seen.values())

    def skills_prompt(self) -> str:
        """The system-prompt section listing the skills ('' when there are none)."""
        return skills_prompt(self.skills)

    async def execute(self, call: ToolCallBlock) -> ToolResultBlock:
        """Run one call; every failure becomes an error result, never an exception."""
        return await run_tool(self.get(call.name), call, available=self.names)


def _is_tool_object(obj: Any) -> bool:
    return (
        not inspect.isfunction(obj)
        and not inspect.ismethod(obj)
        and isinstance(getattr(obj, "name", None), str)
        and isinstance(getattr(obj, "parameters", None), dict)
        and callable(obj)
    )


def error_result(call: ToolCallBlock, message: str) -> ToolResultBlock:
    """An error result for ``call`` that the model can read."""
    return ToolResultBlock(id=call.id, name=call.name, output=message, is_error=True)


async def run_tool(
    tool: Tool | None, call: ToolCallBlock, *, available: Iterable[str] = ()
) -> ToolResultBlock:
    """Validate ``call`` against ``tool`` and run it.

    Unknown tools, unparsable or schema-invalid arguments and exceptions raised by the
    tool all become error results, so a bad call costs the model one step, not the loop.
    """
    if tool is None:
        names = ", ".join(sorted(available)) or "none"
        return error_result(
            call, f"Error: there is no tool named {call.name!r}. Available tools: {names}."
        )
    if call.input_error is not None:
        return error_result(
            call,
            f"Error: the arguments of this {call.name} call were not a valid JSON object "
            f"({call.input_error}). Call the tool again with valid JSON arguments.",
        )
    problems = sorted(
        jsonschema.Draft202012Validator(tool.parameters).iter_errors(call.input),
        key=lambda e: list(e.path),
    )
    if problems:
        detail = "; ".join(
            f"{'/'.join(map(str, e.path)) or '<arguments>'}: {e.message}" for e in problems[:5]
        )
        return error_result(
            call, f"Error: invalid arguments for {call.name}: {detail}. Fix them and call again."
        )
    try:
        value = tool(**call.input)
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:
        logger.info("tool %s raised %s: %s", call.name, type(exc).__name__, exc)
        return error_result(call, f"Error: {call.name} failed: {type(exc).__name__}: {exc}")
    output, is_error = to_tool_output(value)
    return ToolResultBlock(id=call.id, name=call.name, output=output, is_error=is_error)
