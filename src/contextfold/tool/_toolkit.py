"""Toolkit: the tools and skills an agent may use, and the one way tool calls are run."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar, overload

import jsonschema

from .._logging import logger
from ..message import ToolCallBlock, ToolResultBlock, ToolSpec
from ._skills import Skill, load_skills, skills_prompt
from ._tool import FunctionTool, Tool, to_tool_output

__all__ = ["SpecCache", "Toolkit", "error_result", "run_tool"]

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
        self._specs = SpecCache()
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
        self._specs.forget(self._tools.pop(name))

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
        """What the model is told about each tool, in registration order.

        A tool's spec object is reused while its name, description and schema are
        unchanged, so the context engine recognises the same tools by identity each step.
        """
        return [self._specs.get(t) for t in self._tools.values()]

    def add_skills_dir(self, directory: str | Path) -> None:
        """Read skills from ``directory/<name>/SKILL.md`` (re-read on each :attr:`skills`).

        An agent reads them once per reply, so a skill written mid-reply is offered from
        the next reply on.
        """
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


class SpecCache:
    """The :class:`ToolSpec` of each tool object, rebuilt only when the tool changed.

    Tools are plain objects whose attributes may be reassigned, so each lookup compares
    the name, description and schema with the cached spec (cheap: usually the same
    objects) instead of trusting the cache blindly.
    """

    def __init__(self) -> None:
        # id -> (tool, spec); the tool is held so that its id cannot be reused.
        self._specs: dict[int, tuple[Tool, ToolSpec]] = {}

    def get(self, tool: Tool) -> ToolSpec:
        """The spec of ``tool``, reused while it is unchanged."""
        hit = self._specs.get(id(tool))
        if hit is not None and hit[0] is tool:
            spec = hit[1]
            if (
                spec.name == tool.name
                and spec.description == tool.description
                and spec.parameters == tool.parameters
            ):
                return spec
        spec = ToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters)
        self._specs[id(tool)] = (tool, spec)
        return spec

    def forget(self, tool: Tool) -> None:
        """Drop the cached spec of a tool that is no longer offered."""
        self._specs.pop(id(tool), None)


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
    problems = _problems(tool.parameters, call.input)
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


# -- argument validation -----------------------------------------------------------------

_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})
_OBJECT_KEYS = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}
_SCALAR_KEYS = _ANNOTATIONS | {"type"}
_SCALAR_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_VALIDATOR_CACHE_SIZE = 256
# id(schema) -> (schema, a deep copy of it as it was, its compiled validator)
_validators: dict[int, tuple[dict[str, Any], dict[str, Any], jsonschema.Draft202012Validator]] = {}


def _problems(schema: dict[str, Any], arguments: dict[str, Any]) -> list[Any]:
    """Schema violations of ``arguments``, sorted by path (empty when valid)."""
    if _plainly_valid(schema, arguments):
        return []
    return sorted(_validator(schema).iter_errors(arguments), key=lambda e: list(e.path))


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """A compiled validator, reused while the schema is equal to the one it was built for."""
    hit = _validators.get(id(schema))
    if hit is not None and hit[0] is schema and hit[1] == schema:
        return hit[2]
    frozen = copy.deepcopy(schema)
    validator = jsonschema.Draft202012Validator(frozen)
    if len(_validators) >= _VALIDATOR_CACHE_SIZE:
        _validators.pop(next(iter(_validators)))
    _validators[id(schema)] = (schema, frozen, validator)
    return validator


def _plainly_valid(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """True only when ``arguments`` certainly satisfy a flat object schema of scalars.

    The common tool schema (an object of string/number/boolean fields) is checked
    directly, since jsonschema's general machinery costs ~100 us a call. False means
    "not sure": the caller then runs the full validator, which also words the errors.
    """
    if schema.get("type") != "object" or not schema.keys() <= _OBJECT_KEYS:
        return False
    if not isinstance(arguments, dict):
        return False
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list):
        return False
    if extra is False:
        if not arguments.keys() <= properties.keys():
            return False
    elif extra is not True:
        return False
    if any(name not in arguments for name in required):
        return False
    for name, value in arguments.items():
        sub = properties.get(name)
        if sub is None:
            continue
        if not isinstance(sub, dict) or not sub.keys() <= _SCALAR_KEYS:
            return False
        kind = sub.get("type")
        check = _SCALAR_TYPES.get(kind) if isinstance(kind, str) else None
        if check is None or not check(value):
            return False
    return True
