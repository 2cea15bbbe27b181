"""MkDocs hooks: pages written for GitHub also read right on the site.

Pages in ``docs/`` link to files at the repository root (``../BENCHMARKS.md``), which are
outside the site; and the benchmarks page shows ``BENCHMARKS.md`` itself. Each relative
link to a repository file that the site also holds is pointed at its page on the site,
so the strict build checks it like any other link.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = re.compile(r"<!--\s*include\s+(\S+)\s*-->")
LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")
ON_SITE = {"BENCHMARKS.md": "docs/benchmarks.md", "CHANGELOG.md": "docs/changelog.md"}
"""Repository files shown on the site, by where they are on it."""


def relink(text: str, source: str, page: str) -> str:
    """Rewrite the relative links of ``text``, written at repository path ``source``, for
    the site page at repository path ``page``."""

    def fix(match: re.Match[str]) -> str:
        target = match.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return match.group(0)
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
        resolved = ON_SITE.get(resolved, resolved)
        if not resolved.startswith("docs/"):
            return match.group(0)
        new = posixpath.relpath(resolved, posixpath.dirname(page))
        return f"{match.group(1)}{new}{match.group(3) or ''}{match.group(4)}"

    return LINK.sub(fix, text)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    here = f"docs/{page.file.src_uri}"
    include = INCLUDE.search(markdown)
    if include is not None:
        name = include.group(1)
        return relink((ROOT / name).read_text(encoding="utf-8"), name, here)
    return relink(markdown, here, here)
