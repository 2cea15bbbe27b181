"""The documentation site builds with warnings as errors, and its examples run as written.

Every ```python block of the pages written for the site runs, in page order and in one
namespace per page (so a block may use what an earlier one defined). A block that cannot
run here (it needs an API key, the network or a server) is preceded by an HTML comment
starting with ``not run`` that says why; the comment is invisible on the site.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SITE_PAGES = sorted(
    [
        DOCS / "index.md",
        DOCS / "getting-started.md",
        DOCS / "benchmarks.md",
        DOCS / "benchmarks-details.md",
        DOCS / "benchmarks-history.md",
        DOCS / "changelog.md",
        *(DOCS / "concepts").glob("*.md"),
        *(DOCS / "how-to").glob("*.md"),
        DOCS / "integrations" / "pydantic-ai.md",
    ]
)
"""The pages written for the site (the others are tested where they are owned)."""

BLOCK = re.compile(r"(?:<!--\s*(not run[^>]*)-->\s*\n)?```python\n(.*?)```", re.DOTALL)


def python_blocks(page: Path) -> list[tuple[str | None, str]]:
    """``(reason it is not run or None, code)`` for each python block of ``page``."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(page.read_text())]


def test_the_site_builds_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]'")
    pytest.importorskip("material", reason="mkdocs-material is not installed")
    pytest.importorskip("mkdocstrings_handlers.python", reason="mkdocstrings-python missing")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    # The API reference is generated from the docstrings, not empty stubs.
    reference = (site / "reference" / "context" / "index.html").read_text()
    assert "trigger_ratio" in reference
    assert "Compress when the model input exceeds" in reference
    # The benchmarks page shows BENCHMARKS.md whole.
    benchmarks = (site / "benchmarks" / "index.html").read_text()
    for heading in re.findall(r"^## (.+)$", (ROOT / "BENCHMARKS.md").read_text(), re.M)[:3]:
        assert heading.split("`")[0].strip() in benchmarks
    assert "Unreleased" in (site / "changelog" / "index.html").read_text()
    # No web font or other asset fetched from elsewhere at build or view time.
    index = (site / "index.html").read_text()
    assert "fonts.googleapis.com" not in index


def test_every_page_written_for_the_site_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in SITE_PAGES:
        assert str(page.relative_to(DOCS)) in nav, page


@pytest.mark.parametrize("page", SITE_PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_example_of_the_page_runs(page: Path, monkeypatch: Any, tmp_path: Path) -> None:
    blocks = python_blocks(page)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    for reason, code in blocks:
        if reason is None:
            exec(compile(code, str(page), "exec"), namespace)
        else:
            compile(code, str(page), "exec")  # not run, but at least valid Python


def test_the_offloader_of_the_testing_page_passes_the_contract(tmp_path: Path) -> None:
    pytest.importorskip("pytest_asyncio", reason="needs contextfold[testing]")
    page = DOCS / "how-to" / "testing-offloader.md"
    offloader, contract = (code for _, code in python_blocks(page)[:2])
    (tmp_path / "test_page_offloader.py").write_text(offloader + "\n" + contract)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=auto",
            "-rs",
            "test_page_offloader.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed is not None, done.stdout[-2000:]
    assert int(passed.group(1)) >= 5, done.stdout[-2000:]


CONFIG_PAGE = DOCS / "how-to" / "configuration.md"


def config_tables() -> dict[str, dict[str, str]]:
    """``{class name: {field: default cell}}`` from the configuration page's tables."""
    tables: dict[str, dict[str, str]] = {}
    for section in re.split(r"^## ", CONFIG_PAGE.read_text(), flags=re.M)[1:]:
        title = section.splitlines()[0].strip().strip("`")
        rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", section, re.M)
        if rows:
            tables[title] = dict(rows)
    return tables


def test_the_configuration_page_lists_every_field_with_its_default() -> None:
    import ast

    from contextfold.context import (
        DEFAULT_COMPRESSION_PROMPT,
        DEFAULT_SUMMARY_TEMPLATE,
        DEFAULT_SUMMARY_UPDATE_TEMPLATE,
        ContextConfig,
        LayerConfig,
        MaskingConfig,
        SummarySchema,
    )

    named = {
        "DEFAULT_COMPRESSION_PROMPT": DEFAULT_COMPRESSION_PROMPT,
        "DEFAULT_SUMMARY_TEMPLATE": DEFAULT_SUMMARY_TEMPLATE,
        "DEFAULT_SUMMARY_UPDATE_TEMPLATE": DEFAULT_SUMMARY_UPDATE_TEMPLATE,
        "SummarySchema.model_json_schema()": SummarySchema.model_json_schema(),
        "LayerConfig()": LayerConfig(),
    }
    tables = config_tables()
    for cls in (ContextConfig, LayerConfig, MaskingConfig):
        page = tables.get(cls.__name__)
        assert page is not None, f"the page has no table for {cls.__name__}"
        assert list(page) == list(cls.model_fields), cls.__name__  # every field, in order
        defaults = cls()
        for name, cell in page.items():
            actual = getattr(defaults, name)
            shown = named[cell] if cell in named else ast.literal_eval(cell)
            assert shown == actual, f"{cls.__name__}.{name}: page says {cell}, code {actual!r}"
