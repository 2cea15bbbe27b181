"""Replay recorded agent runs through the context engine and measure what it would do.

``replay_runs(load_recordings(["runs/"]).runs, context_size=16_000)`` replays every run
with a deterministic extractive summarizer and returns per-step token usage per layer,
compressions, truncations, tokens saved and offloaded, and prefix stability (see
:class:`RunResult`). ``write_report`` renders the result as a self-contained HTML page
(the ``report`` extra). The prompt-cache simulator behind the cost figures is public too
(``cache_model(kind, rules)`` and the blocks a request is cut into, ``anthropic_blocks``,
``openai_blocks``, ``llama_blocks``), for measuring requests built elsewhere.
"""

from ._cache import (
    AnthropicCache,
    Block,
    CacheKind,
    CacheModel,
    CacheUsage,
    LlamaCache,
    NoCache,
    OpenAICache,
    anthropic_blocks,
    cache_model,
    llama_blocks,
    openai_blocks,
)
from ._clock import LatentSummarizer, ReplayTiming, SimulatedClock
from ._cost import CallCost, RunCost, load_prices
from ._dump import DumpFormat, RequestDump, RunDump
from ._loaders import (
    FORMATS,
    Loader,
    ReadLimits,
    Recording,
    load_any,
    load_msg_jsonl,
    load_openai_runs,
    load_trajectory,
)
from ._metrics import (
    PreparedSummary,
    ReplayResult,
    ReplayTotals,
    RunResult,
    RunTiming,
    StepUsage,
)
from ._report import write_json, write_report
from ._runner import replay_run, replay_runs, tools_of
from ._sources import LoadedRecordings, find_recordings, load_recordings
from ._summarizers import summarizer_from_string
from ._trajectory import Trajectory

__all__ = [
    "FORMATS",
    "AnthropicCache",
    "Block",
    "CacheKind",
    "CacheModel",
    "CacheUsage",
    "CallCost",
    "DumpFormat",
    "LatentSummarizer",
    "LlamaCache",
    "LoadedRecordings",
    "Loader",
    "NoCache",
    "OpenAICache",
    "PreparedSummary",
    "ReadLimits",
    "Recording",
    "ReplayResult",
    "ReplayTiming",
    "ReplayTotals",
    "RequestDump",
    "RunCost",
    "RunDump",
    "RunResult",
    "RunTiming",
    "SimulatedClock",
    "StepUsage",
    "Trajectory",
    "anthropic_blocks",
    "cache_model",
    "find_recordings",
    "llama_blocks",
    "load_any",
    "load_msg_jsonl",
    "load_openai_runs",
    "load_prices",
    "load_recordings",
    "load_trajectory",
    "openai_blocks",
    "replay_run",
    "replay_runs",
    "summarizer_from_string",
    "tools_of",
    "write_json",
    "write_report",
]
