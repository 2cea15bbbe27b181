"""contextfold: keep long-running LLM agents inside their context window.

The most used names are re-exported here; each subpackage has its own curated API:
``contextfold.message``, ``.token``, ``.model``, ``.workspace``, ``.tool``,
``.context``, ``.agent``, ``.middleware``, ``.replay``, and ``.testing`` (test doubles and
the workspace contract suite, for testing your own agents and offloaders).
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from ._exceptions import (
    AuthenticationError,
    BadRequestError,
    CompressionError,
    ContextfoldError,
    ContextWindowExceededError,
    EmptyResponseError,
    LeaseLostError,
    MessageFormatError,
    MissingDependencyError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    RateLimitError,
    ServerError,
    SessionLeasedError,
    StructuredOutputError,
    UnsafePathError,
    WorkspaceError,
)
from .agent import Agent
from .context import ContextConfig, ContextEngine
from .message import HintBlock, Msg
from .middleware import Middleware
from .model import ScriptedModel
from .tool import Toolkit

try:
    __version__ = _version("contextfold")
except _PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

__all__ = [
    "Agent",
    "AuthenticationError",
    "BadRequestError",
    "CompressionError",
    "ContextConfig",
    "ContextEngine",
    "ContextWindowExceededError",
    "ContextfoldError",
    "EmptyResponseError",
    "HintBlock",
    "LeaseLostError",
    "MessageFormatError",
    "Middleware",
    "MissingDependencyError",
    "ModelConnectionError",
    "ModelError",
    "ModelTimeoutError",
    "Msg",
    "RateLimitError",
    "ScriptedModel",
    "ServerError",
    "SessionLeasedError",
    "StructuredOutputError",
    "Toolkit",
    "UnsafePathError",
    "WorkspaceError",
    "__version__",
]
