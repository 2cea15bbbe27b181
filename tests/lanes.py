"""Which test files each lane of .ci/test collects, and the check that keeps that true.

.ci/test runs the `serial` tests alone, then the rest on two workers beside the `model`
lane. Collecting the whole suite takes each pytest process about 11 s here (importing 270
test modules and rewriting their asserts; where PYTHONDONTWRITEBYTECODE is set, as on this
project's machines, nothing is cached between processes), so the `serial` phase and the
model lane's two workers collect only the files that can hold their tests, found by their
text: ``python -m tests.lanes serial|model`` prints them. A `serial` or `model` test in a
file that this would not list is refused at collection (:func:`outside_their_lane`), in
whichever phase collects it: the parallel phase collects every file, so a test that the
listing would leave out fails the run instead of never running.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parents[1]

SERIAL_MARK = "pytest.mark.serial"
"""How a file marks its `serial` tests (a test function's decorator or ``pytestmark``)."""

MODEL_MARK = "pytest.mark.model"
"""How a file marks a `model` test that uses none of :data:`MODEL_FIXTURES` (one that
starts the embedded model itself)."""

MODEL_FIXTURES = frozenset(
    {
        "llama_server",
        "small_llama_server",
        "local_model",
        "counting_model",
        "llama_server_format",
        "demo_run",
    }
)
"""Fixtures that run the embedded model (the llama.cpp server, the model in process, the
demo's run on it): a test on one of them is ``model``."""

BALANCING = ("tests/message/test_msg_properties.py",)
"""Files without the model that run in the model lane all the same: single-process and
CPU-bound (hypothesis), so one CPU is all they use, and there they end both lanes of
.ci/test together. (The golden replays, 65 worker-seconds, went back to the parallel part
once that part got shorter: 523 s on e69bcdc against 603-640 s for the lane in this
session's runs.)"""

_MODEL_WORD = re.compile(r"\b(?:" + "|".join(sorted(MODEL_FIXTURES)) + r")\b")


def _test_files(root: Path) -> list[Path]:
    return sorted((root / "tests").rglob("test_*.py"))


def in_lane(lane: str, relative: str, text: str) -> bool:
    """Whether the ``lane`` collects the test file at ``relative`` (to the repository's
    root, posix) whose source is ``text``."""
    if lane == "serial":
        return SERIAL_MARK in text
    return MODEL_MARK in text or _MODEL_WORD.search(text) is not None or relative in BALANCING


def lane_files(lane: str, root: Path = ROOT) -> list[str]:
    """The test files (relative to ``root``) the ``lane`` ("serial" or "model") collects."""
    if lane not in ("serial", "model"):
        raise ValueError(f"lane must be 'serial' or 'model', got {lane!r}")
    out = []
    for path in _test_files(root):
        relative = path.relative_to(root).as_posix()
        if in_lane(lane, relative, path.read_text(encoding="utf-8")):
            out.append(relative)
    return out


class _Item(Protocol):  # the part of pytest.Item read here
    nodeid: str
    path: Path

    def get_closest_marker(self, name: str) -> object: ...


def outside_their_lane(items: Iterable[_Item]) -> list[str]:
    """Why each `serial` or `model` test among ``items`` is in a file that its lane would
    not collect (empty when none is)."""
    texts: dict[Path, str] = {}
    problems = []
    for item in items:
        serial = item.get_closest_marker("serial") is not None
        model = item.get_closest_marker("model") is not None
        if not (serial or model):
            continue
        path = Path(str(item.path))
        if path not in texts:
            texts[path] = path.read_text(encoding="utf-8")
        text, relative = texts[path], item.nodeid.split("::", 1)[0]
        if serial and not in_lane("serial", relative, text):
            problems.append(f"{item.nodeid} is `serial` but its file does not say {SERIAL_MARK!r}")
        if model and not serial and not in_lane("model", relative, text):
            problems.append(
                f"{item.nodeid} is `model` but its file neither says {MODEL_MARK!r} nor "
                f"names a model fixture ({', '.join(sorted(MODEL_FIXTURES))})"
            )
    return problems


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("serial", "model"):
        print("usage: python -m tests.lanes serial|model", file=sys.stderr)
        return 2
    print("\n".join(lane_files(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
