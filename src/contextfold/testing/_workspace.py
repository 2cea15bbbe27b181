"""WorkspaceContract: the behaviour every offloader and workspace shows, as a pytest battery.

Written against the protocols of :mod:`contextfold.workspace` only (``Offloader``,
``DataOffloader``, ``WorkspaceReader``, ``SessionStore``), so it runs on any class that
implements some of them, shipped or not. The tests are grouped by protocol, a module per
group (``_contract_offloader``, ``_contract_reader``, ``_contract_search``,
``_contract_store``, over ``_contract_base``); a group whose protocol the instance lacks
is skipped with the reason.
"""

from __future__ import annotations

from .._exceptions import MissingDependencyError

try:  # before the groups import them: name the extra, not the module
    import pytest  # noqa: F401
    import pytest_asyncio  # noqa: F401
    from hypothesis import given  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError(exc.name or "pytest", "testing") from exc

from ._contract_offloader import DataOffloaderTests, OffloaderTests, ProtocolTests
from ._contract_reader import DataReaderTests, WorkspaceReaderTests
from ._contract_search import SearchTests
from ._contract_store import ReaderStoreTests, SessionStoreTests

__all__ = ["WorkspaceContract"]


class WorkspaceContract(
    ProtocolTests,
    OffloaderTests,
    DataOffloaderTests,
    WorkspaceReaderTests,
    DataReaderTests,
    SearchTests,
    SessionStoreTests,
    ReaderStoreTests,
):
    """Behaviour tests for an offloader or workspace; subclass it and override ``workspace``.

    ::

        from contextfold.testing import WorkspaceContract

        class TestMyOffloader(WorkspaceContract):
            @pytest.fixture
            async def workspace(self):
                yield MyOffloader(...)  # ready to use; clean up after the yield

    Groups, each skipped (with the reason) when the instance lacks its protocol:

    * ``Offloader``: references are non-empty strings, distinct tool results get distinct
      references, repeated, concurrent and keyword-carrying offloads succeed, the messages
      given are not changed, hostile ids work or raise a ``ContextfoldError``.
    * ``DataOffloader``: data of any media type, repeated and concurrent, succeeds.
    * ``Offloader`` + ``WorkspaceReader``: round trips by the returned reference and by the
      canonical form, order, listing, grep (regex, glob, session, time limit), purge,
      confinement (hostile ids and references), the ``Read``/``Grep``/``Glob`` tools.
    * ... + ``DataOffloader``: data moved out of context lines, stored once by hash.
    * ... + ``WorkspaceSearch``: hits open the message or tool result holding the words
      (at the right line, after concurrent offloads too), code names match in parts,
      ranking, snippets, session confinement, purge, bounded queries, the ``Search`` tool.
    * ``SessionStore``: save, load, separate sessions, exact round trip.

    Hostile ids must never write outside: a filesystem backend overrides ``outside`` to
    return a directory beside its store. The tests are async: with pytest-asyncio in strict
    mode, decorate the override with ``@pytest_asyncio.fixture``.
    """
