"""Loaders of recorded agent runs, one module per format, behind one :class:`Loader`
protocol and the :data:`FORMATS` registry that ``load_any`` detects a file's format with.

Each gives the tool calls, their results and, where the format records it, the provider's
usage of every model call on the assistant ``Msg`` (``Msg.usage``) exactly as recorded:
``input_tokens`` is the whole prompt (cache reads and writes included, as our adapters
report it), ``cache_read_tokens`` and ``cache_write_tokens`` the parts served from and
written to the provider's cache.
"""

from ._mini_swe import load_trajectory
from ._msg_jsonl import load_msg_jsonl
from ._openai import load_openai_runs
from ._recording import Loader, ReadLimits, Recording
from ._registry import FORMATS, load_any

__all__ = [
    "FORMATS",
    "Loader",
    "ReadLimits",
    "Recording",
    "load_any",
    "load_msg_jsonl",
    "load_openai_runs",
    "load_trajectory",
]
