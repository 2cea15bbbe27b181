"""Replay recorded agent runs through the context engine and measure what it would do.

``replay_runs(load_recordings(["runs/"]).runs, context_size=16_000)`` replays every run
with a deterministic extractive summarizer and returns per-step token usage per layer,
compressions, truncations, tokens saved and offloaded, and prefix stability (see
:class:`RunResult`). ``write_report`` renders the result as a self-contained HTML page
(the ``report`` extra).
"""

from ._cache import CacheKind
from ._cost import CallCost, RunCost, load_prices
from ._dump import DumpFormat, RequestDump, RunDump
from ._loaders import (
    FORMATS,
    Loader,
    Recording,
    load_any,
    load_msg_jsonl,
    load_openai_runs,
    load_trajectory,
)
from ._metrics import ReplayResult, ReplayTotals, RunResult, StepUsage
from ._report import write_report
from ._runner import replay_run, replay_runs, tools_of
from ._sources import LoadedRecordings, find_recordings, load_recordings
from ._summarizers import summarizer_from_string
from ._trajectory import Trajectory

__all__ = [
    "FORMATS",
    "CacheKind",
    "CallCost",
    "DumpFormat",
    "LoadedRecordings",
    "Loader",
    "Recording",
    "ReplayResult",
    "ReplayTotals",
    "RequestDump",
    "RunCost",
    "RunDump",
    "RunResult",
    "StepUsage",
    "Trajectory",
    "find_recordings",
    "load_any",
    "load_msg_jsonl",
    "load_openai_runs",
    "load_prices",
    "load_recordings",
    "load_trajectory",
    "replay_run",
    "replay_runs",
    "summarizer_from_string",
    "tools_of",
    "write_report",
]
