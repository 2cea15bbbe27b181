"""Offload stores: where content that leaves the context is kept, and read back.

Every built-in workspace is an ``Offloader``, ``DataOffloader``, ``WorkspaceReader``,
``WorkspaceSearch`` and ``SessionStore``, and passes the same contract suite, which your
own offloader can run too: :class:`contextfold.testing.WorkspaceContract`.
"""

from ._base import BaseWorkspace
from ._grep import match_glob
from ._local import LocalWorkspace
from ._memory import MemoryWorkspace
from ._names import decode_key, encode_key, glob_to_regex, parse_ref
from ._postgres import PostgresWorkspace
from ._protocol import DataOffloader, Offloader, SessionStore, WorkspaceReader, WorkspaceSearch
from ._search import SearchableWorkspace
from ._sqlite import SQLiteWorkspace
from ._types import GrepMatch, ItemInfo, ItemKind, SearchHit

__all__ = [
    "BaseWorkspace",
    "DataOffloader",
    "GrepMatch",
    "ItemInfo",
    "ItemKind",
    "LocalWorkspace",
    "MemoryWorkspace",
    "Offloader",
    "PostgresWorkspace",
    "SQLiteWorkspace",
    "SearchHit",
    "SearchableWorkspace",
    "SessionStore",
    "WorkspaceReader",
    "WorkspaceSearch",
    "decode_key",
    "encode_key",
    "glob_to_regex",
    "match_glob",
    "parse_ref",
]
