"""OpenAI message lists: one run as a JSON list of messages, or a JSON list of runs each
``{"traj": [messages], ...}`` (tau-bench)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..._exceptions import MessageFormatError
from ...message import from_openai_messages
from .._trajectory import Trajectory
from ._recording import Recording, RecordingKind, ShapedLoader, split_system

__all__ = ["OPENAI", "OPENAI_RUNS", "load_openai_runs"]


class _OpenAiRuns(ShapedLoader):
    """A JSON list of runs (tau-bench); see :func:`load_openai_runs`."""

    name = "openai-runs"
    kind: RecordingKind = "json"

    def fits(self, parsed: Any) -> bool:
        return _is_runs(parsed)

    def read(self, recording: Recording, parsed: Any) -> list[Trajectory]:
        return [_run(run, k, recording.path) for k, run in enumerate(parsed)]


class _OpenAi(ShapedLoader):
    """One run as a JSON list of OpenAI messages; ``instance_id`` is the file's stem."""

    name = "openai"
    kind: RecordingKind = "json"

    def fits(self, parsed: Any) -> bool:
        return (
            isinstance(parsed, list)
            and bool(parsed)
            and all(isinstance(m, dict) and "role" in m for m in parsed)
        )

    def read(self, recording: Recording, parsed: Any) -> list[Trajectory]:
        try:
            msgs = from_openai_messages(parsed)
        except MessageFormatError as exc:
            raise MessageFormatError(f"{recording.path}: {exc}") from exc
        return [split_system(msgs, instance_id=recording.path.stem, info={}, fmt=self.name)]


OPENAI_RUNS = _OpenAiRuns()
OPENAI = _OpenAi()


def load_openai_runs(path: str | Path) -> list[Trajectory]:
    """Load a JSON list of runs, each ``{"traj": [OpenAI messages], ...}`` (tau-bench).

    ``instance_id`` is ``<task_id>-<trial>``; the other keys of a run go to ``info``.
    """
    path = Path(path)
    data = Recording(path).document
    if not _is_runs(data):
        raise MessageFormatError(f"{path}: expected a JSON list of runs with a 'traj' list")
    return [_run(run, k, path) for k, run in enumerate(data)]


def _is_runs(data: Any) -> bool:
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(r, dict) and isinstance(r.get("traj"), list) for r in data)
    )


def _run(run: dict[str, Any], k: int, path: Path) -> Trajectory:
    try:
        msgs = from_openai_messages(run["traj"])
    except MessageFormatError as exc:
        raise MessageFormatError(f"{path}: run {k}: {exc}") from exc
    task, trial = run.get("task_id", k), run.get("trial")
    instance_id = f"{task}-{trial}" if trial is not None else str(task)
    return split_system(
        msgs,
        instance_id=instance_id,
        info={key: v for key, v in run.items() if key != "traj"},
        fmt="openai",
    )
