"""Tools: the protocol a tool object satisfies, and tools made from plain functions."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import typing
from collections.abc import Callable, Hashable
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from ..message import DataBlock, TextBlock, ToolResultBlock, ToolResultContent, ToolSpec
from ._docstring import parse_docstring

__all__ = ["FunctionTool", "Tool", "ToolOutput", "to_tool_output"]

ToolOutput = str | list[ToolResultContent]
"""What a tool result holds: text, or text and data blocks."""


@runtime_checkable
class Tool(Protocol):
    """Any object with a name, a description, a JSON schema and an async ``__call__``.

    ``__call__`` receives the validated arguments as keywords. It may return anything:
    strings and lists of text/data blocks are kept, a :class:`ToolResultBlock` keeps its
    output and error flag, other values are shown to the model as JSON.
    """

    name: str
    description: str
    parameters: dict[str, Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the tool with keyword arguments (may return an awaitable)."""
        ...


class FunctionTool:
    """A tool made from a Python function, sync or async.

    The JSON schema comes from the type hints; the description and argument descriptions
    from the docstring (Google, NumPy or Sphinx style). Sync functions run in a worker
    thread, so parallel tool calls do not block the event loop.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        self.func = func
        # (func, whether it is a coroutine function): inspect's check costs ~1 us a call.
        self._kind: tuple[Callable[..., Any], bool] = (func, inspect.iscoroutinefunction(func))
        self.name = name or func.__name__
        described, self._model, schema = _signature(func, self.name)
        self.description = description if description is not None else described
        self.parameters = _clean_schema(schema)  # a new dict per tool

    def spec(self) -> ToolSpec:
        """The tool as the model sees it."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    async def __call__(self, **kwargs: Any) -> Any:
        try:
            validated = self._model.model_validate(kwargs)
        except ValidationError as exc:
            raise ValueError(_pydantic_errors(exc)) from None
        # Keep nested models as model instances, which is what the annotations promise;
        # pass every field so that ``Field(...)`` defaults are resolved here.
        arguments = {name: getattr(validated, name) for name in type(validated).model_fields}
        func = self.func
        if self._kind[0] is not func:  # ``func`` may be reassigned
            self._kind = (func, inspect.iscoroutinefunction(func))
        if self._kind[1]:
            return await func(**arguments)
        result = await asyncio.to_thread(functools.partial(func, **arguments))
        if inspect.isawaitable(result):
            result = await result
        return result

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r})"


_Signature = tuple[str, type[BaseModel], dict[str, Any]]
"""A function's docstring description, its arguments model and that model's JSON schema."""

_SIGNATURES: dict[Hashable, _Signature] = {}
_SIGNATURES_KEPT = 512


def _signature(func: Callable[..., Any], name: str) -> _Signature:
    """What a tool needs from ``func``'s signature and docstring, built once per function
    definition: an agent makes its read-back and task tools anew (closures over its
    session), and building the arguments model cost about 1 ms a tool."""
    key = _signature_key(func, name)
    known = _SIGNATURES.get(key) if key is not None else None
    if known is None:
        doc = parse_docstring(inspect.getdoc(func))
        model = _arguments_model(func, name, doc.params)
        known = (doc.description, model, model.model_json_schema())
        if key is not None:
            if len(_SIGNATURES) >= _SIGNATURES_KEPT:
                _SIGNATURES.pop(next(iter(_SIGNATURES)))
            _SIGNATURES[key] = known
    return known


def _signature_key(func: Callable[..., Any], name: str) -> Hashable | None:
    """Everything the model and schema are made from, or ``None`` (not remembered) for a
    callable that is not a plain function or method, or whose parts are unhashable."""
    code = getattr(func, "__code__", None)
    if code is None or hasattr(func, "__wrapped__") or hasattr(func, "__signature__"):
        return None
    kwdefaults = getattr(func, "__kwdefaults__", None) or {}
    key = (
        type(func),
        code,
        name,
        func.__doc__,
        getattr(func, "__defaults__", None),
        tuple(kwdefaults.items()),
        tuple(getattr(func, "__annotations__", {}).items()),
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _arguments_model(
    func: Callable[..., Any], name: str, descriptions: dict[str, str]
) -> type[BaseModel]:
    signature = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except (NameError, TypeError):
        hints = {}
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(
                f"tool {name!r}: positional-only parameter {param.name!r} cannot be passed "
                "by keyword; make it a normal parameter"
            )
        annotation = hints.get(param.name, Any)
        default: Any = ... if param.default is param.empty else param.default
        doc = descriptions.get(param.name) or None
        if doc is not None and _has_description(annotation, default):
            doc = None
        info: Any = default
        if doc is not None:
            info = (
                FieldInfo.merge_field_infos(default, description=doc)
                if isinstance(default, FieldInfo)
                else Field(default=default, description=doc)
            )
        fields[param.name] = (annotation, info)
    return create_model(  # type: ignore[call-overload, no-any-return]
        f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )


def _has_description(annotation: Any, default: Any) -> bool:
    """Whether ``Field(description=...)`` was given in ``Annotated`` or as the default."""
    if isinstance(default, FieldInfo) and default.description:
        return True
    if typing.get_origin(annotation) is typing.Annotated:
        return any(
            isinstance(m, FieldInfo) and m.description for m in typing.get_args(annotation)[1:]
        )
    return False


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's generated titles, which only add tokens."""

    def clean(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: clean(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))
            }
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node

    cleaned: dict[str, Any] = clean(schema)
    cleaned.setdefault("properties", {})
    return cleaned


def _pydantic_errors(exc: ValidationError) -> str:
    return "; ".join(
        f"{'/'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors()[:5]
    )


def to_tool_output(value: Any) -> tuple[ToolOutput, bool]:
    """Convert what a tool returned into a result output and an error flag."""
    if isinstance(value, ToolResultBlock):
        return value.output, value.is_error
    if value is None:
        return "", False
    if isinstance(value, str):
        return value, False
    if isinstance(value, TextBlock | DataBlock):
        return [value], False
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, TextBlock | DataBlock) for v in value)
    ):
        return list(value), False
    if isinstance(value, BaseModel):
        return value.model_dump_json(), False
    try:
        return json.dumps(value, ensure_ascii=False, default=str), False
    except (TypeError, ValueError):
        return str(value), False
