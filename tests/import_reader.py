"""Reading the imports of a module of ``contextfold`` (or of code outside it), for
``test_architecture.py``: every form, each with where it runs; and the cycles of an
import graph."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "contextfold"


@dataclass(frozen=True)
class Import:
    """One import of a ``contextfold`` module."""

    line: int
    target: tuple[str, ...]
    """The module inside ``contextfold`` (``("__init__",)`` for the root package)."""
    typing_only: bool = False
    """Under a bare ``if TYPE_CHECKING:``: never runs."""
    at_load: bool = True
    """Runs when the module is loaded (not inside a function)."""


def _is_module(parts: list[str]) -> bool:
    where = SRC.joinpath(*parts)
    return where.is_dir() or where.with_suffix(".py").is_file()


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING`` and nothing else (not ``not ...``,
    not ``... or x``)."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return (
        isinstance(test, ast.Attribute)
        and test.attr == "TYPE_CHECKING"
        and isinstance(test.value, ast.Name)
        and test.value.id in {"typing", "typing_extensions"}
    )


def _resolve(name: str, level: int, package: list[str] | None) -> list[str] | None:
    """The module ``name`` (``level`` dots before it) names inside ``contextfold``."""
    if level:
        if package is None:
            return None  # relative inside benchmarks/: not ours
        base = package[: len(package) - level + 1]
        return [*base, *(name.split(".") if name else [])]
    pieces = name.split(".")
    return pieces[1:] if pieces[0] == "contextfold" else None


def _literal(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _dynamic_import(node: ast.Call, package: list[str] | None) -> list[str] | None:
    """What ``importlib.import_module("...")`` or ``__import__("...")`` loads, when the
    name is a literal."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called not in {"import_module", "__import__"} or not node.args:
        return None
    name = _literal(node.args[0])
    if name is None:
        return None
    if called == "__import__":
        level_arg = node.args[4] if len(node.args) > 4 else None
        level_arg = next((k.value for k in node.keywords if k.arg == "level"), level_arg)
        level = level_arg.value if isinstance(level_arg, ast.Constant) else 0
        return _resolve(name, level if isinstance(level, int) else 0, package)
    dots = len(name) - len(name.lstrip("."))
    if dots:
        anchor = _literal(node.args[1]) if len(node.args) > 1 else None
        if anchor is not None:  # import_module(".x", "contextfold.pkg")
            anchored = _resolve(anchor, 0, package)
            return None if anchored is None else _resolve(name[dots:], dots, anchored)
        return _resolve(name[dots:], dots, package)  # import_module(".x", __package__)
    return _resolve(name, 0, package)


class _Collector(ast.NodeVisitor):
    def __init__(self, package: list[str] | None) -> None:
        self.package = package
        self.found: list[Import] = []
        self.typing_only = False
        self.depth = 0  # functions around the node

    def add(self, node: ast.AST, target: list[str] | None) -> None:
        if target is None:
            return
        self.found.append(
            Import(
                line=getattr(node, "lineno", 0),
                target=tuple(target) or ("__init__",),
                typing_only=self.typing_only,
                at_load=self.depth == 0,
            )
        )

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.visit(node.test)
        outer, self.typing_only = self.typing_only, True
        for child in node.body:
            self.visit(child)
        self.typing_only = outer
        for child in node.orelse:  # ``else:`` of ``if TYPE_CHECKING:`` runs
            self.visit(child)

    def _in_function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _in_function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(node, _resolve(alias.name, 0, self.package))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = _resolve(node.module or "", node.level, self.package)
        if module is None:
            return
        for alias in node.names:
            # ``from pkg import x``: x is a module (a private name is taken as one: either
            # way it is private), or a name of pkg's ``__init__``.
            name = alias.name
            if _is_module([*module, name]) or (name.startswith("_") and name != "*"):
                self.add(node, [*module, name])
            else:
                self.add(node, module)

    def visit_Call(self, node: ast.Call) -> None:
        self.add(node, _dynamic_import(node, self.package))
        self.generic_visit(node)


def imports_of(source: str, package: list[str] | None) -> list[Import]:
    """Every import of ``contextfold`` in ``source``, a module of ``package`` (``None``:
    a module outside ``contextfold``)."""
    collector = _Collector(package)
    collector.visit(ast.parse(source))
    return sorted(collector.found, key=lambda i: (i.line, i.target))


def load_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph`` (module -> modules it loads), one per strongly connected
    component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def load_edges(module: str, found: list[Import]) -> set[str]:
    """The modules loading ``module`` (dotted, inside ``contextfold``) loads first: its
    imports at module level that run (not type-only). A submodule of another package
    loads that package's ``__init__`` first."""
    own = module.split(".")[0]
    edges: set[str] = set()
    for imp in found:
        if imp.typing_only or not imp.at_load:
            continue
        target = [p for p in imp.target if p != "__init__"]
        edges.add(".".join(target) or "contextfold")
        if target and target[0] != own and len(target) > 1:
            edges.add(target[0])
    edges.discard(module)
    return edges
