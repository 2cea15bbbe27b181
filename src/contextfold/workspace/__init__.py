"""Offload stores: where content that leaves the context is kept, and read back.

Every built-in workspace is an ``Offloader``, ``DataOffloader``, ``WorkspaceReader`` and
``SessionStore``, and passes the same contract suite, which your own offloader can run
too: :class:`contextfold.testing.WorkspaceContract`. ``S3Workspace`` is also a
``BlobStore``: the large-object tier of ``PostgresWorkspace(..., blobs=S3Workspace(...))``.
"""

from ._base import BaseWorkspace
from ._blobs import BlobStore
from ._lease import Lease, LeaseHolder, SessionLease
from ._local import LocalWorkspace
from ._memory import MemoryWorkspace
from ._names import decode_key, encode_key, glob_to_regex, parse_ref
from ._postgres import PostgresWorkspace
from ._protocol import DataOffloader, Offloader, SessionStore, WorkspaceReader
from ._s3 import S3Workspace
from ._sqlite import SQLiteWorkspace
from ._types import GrepMatch, ItemInfo, ItemKind

__all__ = [
    "BaseWorkspace",
    "BlobStore",
    "DataOffloader",
    "GrepMatch",
    "ItemInfo",
    "ItemKind",
    "Lease",
    "LeaseHolder",
    "LocalWorkspace",
    "MemoryWorkspace",
    "Offloader",
    "PostgresWorkspace",
    "S3Workspace",
    "SQLiteWorkspace",
    "SessionLease",
    "SessionStore",
    "WorkspaceReader",
    "decode_key",
    "encode_key",
    "glob_to_regex",
    "parse_ref",
]
