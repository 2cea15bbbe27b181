"""``contextfold serve``: a gateway that gives any Anthropic-compatible upstream Anthropic's
``context_management`` (tool-result and thinking clearing, threshold compaction,
``count_tokens`` after edits), relays everything else unchanged, and exports Prometheus
metrics. With no upstream it serves the embedded model (:func:`serving_upstream`).

Needs the ``gateway`` extra (``pip install 'contextfold[gateway]'``): Starlette, uvicorn
(on uvloop and httptools, which the extra brings and :func:`serve` uses when present)
and httpx.
"""

from ._apply import EditOutcome, apply_context_management
from ._clear_tools import CLEARED_RESULT
from ._compaction import SUMMARY_PREFIX, CompactionDone, PendingCompaction, apply_blocks, compact
from ._config import GatewayConfig
from ._count import CountCache
from ._edits import ClearThinking, ClearToolUses, Compact, EditError, parse_edits
from ._retrieval import READ_TOOL, ResultStore
from ._sessions import SessionState, SessionStates, session_key
from ._transparent import TransparentPolicy

try:
    from ._app import create_app
    from ._embedded import embedded_upstream, serving_upstream
    from ._serve import serve
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    from .._exceptions import MissingDependencyError

    raise MissingDependencyError(exc.name or "starlette", "gateway") from exc

__all__ = [
    "CLEARED_RESULT",
    "READ_TOOL",
    "SUMMARY_PREFIX",
    "ClearThinking",
    "ClearToolUses",
    "Compact",
    "CompactionDone",
    "CountCache",
    "EditError",
    "EditOutcome",
    "GatewayConfig",
    "PendingCompaction",
    "ResultStore",
    "SessionState",
    "SessionStates",
    "TransparentPolicy",
    "apply_blocks",
    "apply_context_management",
    "compact",
    "create_app",
    "embedded_upstream",
    "parse_edits",
    "serve",
    "serving_upstream",
    "session_key",
]
