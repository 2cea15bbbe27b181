"""The demo's task material: a folder of files and the tools that read it.

By default the folder is the one shipped with the package: three recorded runs of a
coding agent (mini-swe-agent on SWE-bench Verified, MIT licensed, see its LICENSE.md).
Recorded runs are shown to the agent as plain-text logs, which a small model reads better
than JSON and which the read-back tools can search line by line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

from ..tool import FunctionTool, Toolkit

__all__ = ["DemoFiles", "bundled_data_dir", "render_file"]

_MAX_FILES = 40
_MAX_BYTES = 2_000_000
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache"}


def bundled_data_dir() -> Path:
    """The folder of recorded runs shipped with the package."""
    with as_file(files("contextfold.cli").joinpath("demo_data")) as path:
        return Path(path)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _patched_files(patch: str) -> list[str]:
    """The files a unified diff changes, in order."""
    found = re.findall(r"^diff --git a/(\S+) b/", patch, re.MULTILINE)
    return list(dict.fromkeys(found))


def _render_trajectory(name: str, data: dict[str, Any]) -> str:
    info = data.get("info", {}) if isinstance(data.get("info"), dict) else {}
    stats = info.get("model_stats", {}) if isinstance(info.get("model_stats"), dict) else {}
    messages = data.get("messages", [])
    lines = [
        f"# Recorded agent run {data.get('instance_id', name)} ({len(messages)} messages)",
    ]
    for i, msg in enumerate(messages, start=1):
        role = msg.get("role", "?") if isinstance(msg, dict) else "?"
        text = _content_text(msg.get("content", "") if isinstance(msg, dict) else msg)
        lines.append(f"## message {i}: {role}")
        lines.append(text.replace("\r\n", "\n").strip())
    submission = info.get("submission")
    status = info.get("exit_status", "unknown")
    changed = _patched_files(submission if isinstance(submission, str) else "")
    # One line per run to find it by, like `git show --stat`: which run, how it ended.
    lines.append(
        f"## outcome of {data.get('instance_id', name)}: exit_status {status}; the patch "
        f"changed {', '.join(changed) or 'no file'}"
    )
    lines.append(f"exit_status: {status}")
    if stats:
        lines.append(f"api_calls: {stats.get('api_calls')}; cost: {stats.get('instance_cost')}")
    if isinstance(submission, str) and submission:
        lines.append("submitted patch:")
        lines.append(submission.strip())
    return "\n".join(lines) + "\n"


def render_file(path: Path) -> str:
    """A file as text: recorded runs (``*.traj.json``) as a log, others as they are."""
    raw = path.read_bytes()[:_MAX_BYTES]
    text = raw.decode("utf-8", errors="replace")
    if path.name.endswith(".traj.json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return text
        if isinstance(data, dict) and isinstance(data.get("messages"), list):
            return _render_trajectory(path.name.removesuffix(".traj.json"), data)
    return text


@dataclass
class DemoFiles:
    """The files of the task folder, and which of them the agent has read."""

    root: Path
    names: list[str] = field(default_factory=list)
    read: list[str] = field(default_factory=list)

    @classmethod
    def scan(cls, root: Path) -> DemoFiles:
        """The readable files under ``root`` (at most 40, smallest first, no hidden ones)."""
        found: list[tuple[int, str]] = []
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if any(p in _SKIP_DIRS or p.startswith(".") for p in rel.parts):
                continue
            if path.is_file() and not path.is_symlink() and path.name != "LICENSE.md":
                found.append((path.stat().st_size, rel.as_posix()))
        found.sort()
        return cls(root=root, names=[name for _, name in found[:_MAX_FILES]])

    @property
    def recorded_runs(self) -> bool:
        """Whether the folder holds recorded agent runs."""
        return any(n.endswith(".traj.json") for n in self.names)

    def subjects(self) -> list[str]:
        """What the final answer reports on: the runs read (by instance id), or the files."""
        return [n.removesuffix(".traj.json") for n in self.read]

    def unread(self) -> list[str]:
        """Files not read yet, in listing order."""
        return [n for n in self.names if n not in self.read]

    def toolkit(self) -> Toolkit:
        """``list_files`` and ``read_file`` over the folder, plus ``final_answer``."""

        def list_files() -> str:
            """List the files of the task folder with their sizes."""
            rows = [f"{(self.root / n).stat().st_size:>9} bytes  {n}" for n in self.names]
            return "\n".join(rows) if rows else "(the folder is empty)"

        def read_file(path: str) -> str:
            """Read one file of the task folder (recorded runs are shown as a text log).

            Args:
                path: The file name, as list_files shows it.
            """
            if path not in self.names:
                return f"Error: no file {path!r}; call list_files to see the names"
            if path not in self.read:
                self.read.append(path)
            return render_file(self.root / path)

        def final_answer(runs: dict[str, Any], shared: str) -> str:
            """Give your final report to the user; call it once, when you are done.

            Args:
                runs: For each run you investigated, by its instance id: the files its
                    patch changed ("files_changed") and the error or failing test it met
                    ("error").
                shared: One line on what the runs have in common.
            """
            return json.dumps({"runs": runs, "shared": shared})

        def final_answer_files(files: dict[str, Any], shared: str) -> str:
            """Give your final report to the user; call it once, when you are done.

            Args:
                files: For each file you read, by its name: one line you found in it
                    ("found").
                shared: One line on what the files have in common.
            """
            return json.dumps({"files": files, "shared": shared})

        answer = FunctionTool(
            final_answer if self.recorded_runs else final_answer_files, name="final_answer"
        )
        return Toolkit([FunctionTool(list_files), FunctionTool(read_file), answer])
