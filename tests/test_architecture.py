"""The layering of docs/ARCHITECTURE.md, checked on every import in ``src/`` (including
imports inside functions): no package imports another package's private module, and no
package imports a layer above its own (annotations under ``TYPE_CHECKING`` excepted)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "contextfold"

# Rank of each top-level part of the package: a module may import its own part and any
# lower rank (the root-level private modules are the lowest).
LAYERS = {
    "_exceptions": 0,
    "_logging": 0,
    "_structural": 0,
    "_embedded": 1,
    "_model_string": 1,
    "message": 2,
    "token": 3,
    "workspace": 3,
    "model": 4,
    "tool": 4,
    "context": 5,
    "middleware": 6,
    "agent": 7,
    "replay": 7,
    "testing": 8,
    "cli": 8,
    "integrations": 8,
    "__init__": 9,
}


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "demo_data" not in p.parts)


def _part(path: Path) -> str:
    rel = path.relative_to(SRC).parts
    return rel[0].removesuffix(".py")


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(path: Path) -> list[tuple[int, list[str], bool]]:
    """(line, target module path inside contextfold, type-checking only) per import."""
    return _imports_of(path.read_text(), list(path.relative_to(SRC).parent.parts))


def _imports_of(source: str, package: list[str]) -> list[tuple[int, list[str], bool]]:
    tree = ast.parse(source)
    typing_only = _type_checking_lines(tree)
    found: list[tuple[int, list[str], bool]] = []
    for node in ast.walk(tree):
        targets: list[list[str]] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = [*base, *(node.module.split(".") if node.module else [])]
                if node.module is None:
                    # ``from .. import x``: x is a module, or a name of that package's
                    # ``__init__`` (the root's is the top layer).
                    targets = [
                        [*module, alias.name] if _is_module([*module, alias.name]) else module
                        for alias in node.names
                    ]
                    targets = [t or ["__init__"] for t in targets]
                else:
                    targets = [module]
            elif node.module and node.module.split(".")[0] == "contextfold":
                targets = [node.module.split(".")[1:]]
        elif isinstance(node, ast.Import):
            targets = [
                alias.name.split(".")[1:]
                for alias in node.names
                if alias.name.split(".")[0] == "contextfold"
            ]
        for target in targets:
            if target:
                found.append((node.lineno, target, node.lineno in typing_only))
    return sorted(found)


def _is_module(parts: list[str]) -> bool:
    where = SRC.joinpath(*parts)
    return where.is_dir() or where.with_suffix(".py").is_file()


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(SRC.parent)}:{line}"


def test_the_layer_table_names_every_part_of_the_package() -> None:
    parts = {_part(p) for p in _modules()}
    assert parts <= set(LAYERS), f"add to LAYERS and docs/ARCHITECTURE.md: {parts - set(LAYERS)}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_import_of_another_packages_private_module(path: Path) -> None:
    own = _part(path)
    wrong = [
        f"{_where(path, line)} imports contextfold.{'.'.join(target)}"
        for line, target, _ in _imports(path)
        if target[0] != own
        and not target[0].startswith("_")
        and any(piece.startswith("_") for piece in target[1:])
    ]
    assert wrong == []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_import_from_a_higher_layer(path: Path) -> None:
    own = _part(path)
    wrong = [
        f"{_where(path, line)} ({own}, layer {LAYERS[own]}) imports contextfold."
        f"{'.'.join(target)} (layer {LAYERS[target[0]]})"
        for line, target, typing_only in _imports(path)
        if not typing_only and target[0] != own and LAYERS[target[0]] >= LAYERS[own]
    ]
    assert wrong == []


def test_the_checker_sees_every_form_of_import() -> None:
    # The checks above are only as good as _imports_of: lazy imports in a body, absolute
    # imports and type-only imports must all be seen.
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..agent import Agent\n"
        "def f():\n    from ..model._base import ChatModelBase\n"
        "import contextfold.context._engine\n"
        "from . import _vocab\n"
        "from .. import Agent\n"
    )
    assert _imports_of(source, ["token"]) == [
        (3, ["agent"], True),
        (5, ["model", "_base"], False),
        (6, ["context", "_engine"], False),
        (7, ["token", "_vocab"], False),
        (8, ["__init__"], False),
    ]
