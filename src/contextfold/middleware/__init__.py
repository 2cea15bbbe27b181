"""Middleware: hooks around the system prompt, model calls, tools, replies and compression.

Defined with the agent (``contextfold.agent``); re-exported here under the name the
spec uses, with the same public names.
"""

from ..agent._middleware import *  # noqa: F403
from ..agent._middleware import __all__ as __all__
