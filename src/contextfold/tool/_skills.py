"""Skills: ``skills/<name>/SKILL.md`` files whose name and description join the system prompt."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .._logging import logger

__all__ = ["Skill", "load_skills", "parse_front_matter", "skills_prompt"]


@dataclass(frozen=True)
class Skill:
    """One skill: what it is called, what it is for, and where its instructions live."""

    name: str
    description: str
    path: Path
    """The skill's ``SKILL.md``; the agent reads it (with its file tools) when it applies."""


def parse_front_matter(text: str) -> dict[str, str]:
    """The ``key: value`` pairs between the leading ``---`` lines of a Markdown file.

    A small YAML subset: plain, single- or double-quoted scalars, and ``>`` / ``|`` block
    scalars or indented continuation lines (joined with spaces or newlines). Anything
    fancier is read as plain text. Returns ``{}`` when there is no front matter.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    except StopIteration:
        return {}
    result: dict[str, str] = {}
    key: str | None = None
    block: str | None = None
    parts: list[str] = []

    def flush() -> None:
        if key is not None:
            joiner = "\n" if block == "|" else " "
            result[key] = _unquote(joiner.join(p for p in parts if p or block == "|").strip())

    for line in lines[1:end]:
        if key is not None and (line.startswith((" ", "\t")) or not line.strip()):
            parts.append(line.strip())
            continue
        if not line.strip() or line.lstrip().startswith("#") or ":" not in line:
            continue
        flush()
        raw_key, _, value = line.partition(":")
        key, value = raw_key.strip(), value.strip()
        block = value[0] if value[:1] in (">", "|") else None
        parts = [] if block else [value]
    flush()
    return result


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in ("'", '"'):
        inner = value[1:-1]
        return inner.replace("''", "'") if value[0] == "'" else inner.replace('\\"', '"')
    return value


def load_skills(directory: str | Path) -> list[Skill]:
    """Every ``<directory>/<name>/SKILL.md``, sorted by name.

    The front matter's ``name`` defaults to the folder name. A skill without a
    ``description`` is skipped with a warning, since the model could not tell when to use it.
    A missing directory yields no skills.
    """
    root = Path(directory)
    if not root.is_dir():
        return []
    skills: list[Skill] = []
    for path in sorted(root.glob("*/SKILL.md")):
        meta = parse_front_matter(path.read_text(encoding="utf-8"))
        name = meta.get("name") or path.parent.name
        description = meta.get("description", "")
        if not description:
            logger.warning("skill %s has no description in its front matter; skipped", path)
            continue
        skills.append(Skill(name=name, description=description, path=path.resolve()))
    return sorted(skills, key=lambda s: s.name)


def skills_prompt(skills: list[Skill]) -> str:
    """The system-prompt section that lists the skills ('' for none)."""
    if not skills:
        return ""
    lines = [
        "# Skills",
        "These skills are available. When a task matches one, read its SKILL.md first and "
        "follow its instructions.",
    ]
    lines += [f"- {s.name}: {s.description} (instructions: {s.path})" for s in skills]
    return "\n".join(lines)
