"""Our own JSONL: messages written by ``msgs_to_jsonl``, one ``Msg`` a line."""

from __future__ import annotations

from pathlib import Path

from ...message import msgs_from_jsonl
from .._trajectory import Trajectory
from ._recording import NotThisFormat, Recording, RecordingKind, split_system

__all__ = ["MSG_JSONL", "load_msg_jsonl"]


class _MsgJsonl:
    """One run; ``instance_id`` is the file's stem. A file is of this format when every
    line is a ``Msg``, so it is told by parsing it."""

    name = "msg-jsonl"
    kind: RecordingKind = "jsonl"

    def load(self, recording: Recording) -> list[Trajectory]:
        path = recording.path
        try:
            text = recording.text
        except UnicodeDecodeError as exc:  # not UTF-8: not of this format either
            raise NotThisFormat(f"{path}: not a JSONL file of Msg objects: {exc}") from exc
        try:
            msgs = msgs_from_jsonl(text)
        except (ValueError, RecursionError) as exc:
            raise NotThisFormat(f"{path}: not a JSONL file of Msg objects: {exc}") from exc
        return [split_system(msgs, instance_id=path.stem, info={}, fmt=self.name)]


MSG_JSONL = _MsgJsonl()


def load_msg_jsonl(path: str | Path) -> Trajectory:
    """Load messages written by ``msgs_to_jsonl``; ``instance_id`` is the file's stem."""
    return MSG_JSONL.load(Recording(path))[0]
