"""Offload stores: where content that leaves the context is kept, and read back.

Every built-in workspace is an ``Offloader``, ``DataOffloader``, ``WorkspaceReader`` and
``SessionStore``, and passes the same contract suite, which your own offloader can run
too: :class:`contextfold.testing.WorkspaceContract`. All are also a ``WorkspaceSearch``
(ranked full-text search). ``S3Workspace`` is also a ``BlobStore``: the large-object tier of
``PostgresWorkspace(..., blobs=S3Workspace(...))``.
"""

from ._base import BaseWorkspace
from ._blobs import BlobStore
from ._grep import match_glob
from ._lease import Lease, LeaseHolder, SessionLease
from ._local import LocalWorkspace
from ._memory import MemoryWorkspace
from ._names import decode_key, encode_key, glob_to_regex, parse_ref
from ._postgres import PostgresWorkspace
from ._protocol import (
    DataOffloader,
    Offloader,
    SessionStore,
    WorkspaceGlob,
    WorkspaceReader,
    WorkspaceSearch,
)
from ._s3 import S3Workspace
from ._search import SearchableWorkspace
from ._sqlite import SQLiteWorkspace
from ._types import GrepMatch, ItemInfo, ItemKind, ItemPage, SearchHit, SkippedEntry

__all__ = [
    "BaseWorkspace",
    "BlobStore",
    "DataOffloader",
    "GrepMatch",
    "ItemInfo",
    "ItemKind",
    "ItemPage",
    "Lease",
    "LeaseHolder",
    "LocalWorkspace",
    "MemoryWorkspace",
    "Offloader",
    "PostgresWorkspace",
    "S3Workspace",
    "SQLiteWorkspace",
    "SearchHit",
    "SearchableWorkspace",
    "SessionLease",
    "SessionStore",
    "SkippedEntry",
    "WorkspaceGlob",
    "WorkspaceReader",
    "WorkspaceSearch",
    "decode_key",
    "encode_key",
    "glob_to_regex",
    "match_glob",
    "parse_ref",
]
