"""Test your own agents, offloaders and workspaces with what contextfold tests itself with.

* :class:`ScriptedModel` answers from a script (text, ``tool_reply(...)``, a dict for a
  forced structured-output call, an exception to raise) and records every request as a
  :class:`ScriptedRequest`; ``text_reply`` and ``tool_reply`` build answers.
* :func:`check_requests_valid` raises if any recorded request breaks an OpenAI or
  Anthropic rule (a tool call without its result, roles out of order, ...).
* :class:`MemoryWorkspace` is a complete workspace in process memory.
* :class:`WorkspaceContract` is the behaviour suite every shipped workspace passes; a
  test class subclassing it and overriding the ``workspace`` fixture runs it on your own
  offloader (groups of protocols it does not implement are skipped)::

      from contextfold.testing import WorkspaceContract

      class TestS3Offloader(WorkspaceContract):
          @pytest.fixture
          async def workspace(self):
              yield S3Offloader(bucket="test-bucket")

``WorkspaceContract`` needs pytest, pytest-asyncio and hypothesis
(``pip install 'contextfold[testing]'``); it is imported on first use, so the other names
work without them.
"""

from typing import TYPE_CHECKING, Any

from ..agent import check_requests_valid
from ..model import ScriptedModel, ScriptedReply, ScriptedRequest, text_reply, tool_reply
from ..workspace import MemoryWorkspace

if TYPE_CHECKING:
    from ._workspace import WorkspaceContract


def __getattr__(name: str) -> Any:
    # The contract is a pytest battery: import pytest only when it is asked for.
    if name == "WorkspaceContract":
        from ._workspace import WorkspaceContract

        return WorkspaceContract
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MemoryWorkspace",
    "ScriptedModel",
    "ScriptedReply",
    "ScriptedRequest",
    "WorkspaceContract",
    "check_requests_valid",
    "text_reply",
    "tool_reply",
]
