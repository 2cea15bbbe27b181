"""Ranked search over offloaded content: what every searchable backend shares.

A document is one offloaded message (a line of a session's context log, found again with
``Read(ref, offset=line)``) or one tool result. A backend indexes documents when content
is offloaded, in the same transaction as the content where it can, and answers
:meth:`SearchableWorkspace._search` with its engine's ranking (BM25 in SQLite FTS5,
``ts_rank`` in PostgreSQL); this class turns those rows into :class:`SearchHit`s with
snippets, under the same rules as ``grep``: a bounded query, a deadline the engine itself
enforces, and the snippet work off the event loop.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from .._process import run
from ._base import BaseWorkspace
from ._grep import Deadline, off_loop
from ._line_text import line_texts
from ._names import CONTEXT_FILE, ItemPath, decode_key, encode_key, is_capped
from ._pieces import Chunks, head
from ._terms import MAX_DOC_CHARS, index_terms_text, query_terms, snippet
from ._types import ItemKind, SearchHit

__all__ = [
    "IN_PROCESS_CHARS",
    "MAX_SEARCH_RESULTS",
    "SEARCH_TIMEOUT",
    "Doc",
    "RawHit",
    "SearchableWorkspace",
    "context_docs",
    "doc_terms",
    "rank_off_loop",
    "tool_doc",
]

MAX_SEARCH_RESULTS = 100
"""Most hits one search returns."""

SEARCH_TIMEOUT = "the search did not finish within {seconds}s; use fewer, more distinctive words"

_TEXT_CHARS = 20_000  # of a message kept in the index for its snippet

IN_PROCESS_CHARS = 1 << 18
"""A document's source longer than this has its terms computed in a worker process."""


@dataclass(frozen=True)
class Doc:
    """One document to index: its line (0 for a tool result), terms, snippet text
    (``None``: read the item itself), and the text its terms were taken from when that is
    not the snippet text (``None``: it is)."""

    line: int
    terms: str
    text: str | None
    source: str | None


@dataclass(frozen=True)
class RawHit:
    """A row an engine ranked: which document, how well (higher is better)."""

    skey: str
    name: str
    line: int
    score: float
    text: str | None
    session_id: str | None = None
    """Filled in by backends that know it; else derived from ``skey``."""


async def rank_off_loop(
    rank: Callable[[list[str], str | None, int, Deadline], list[RawHit]],
    terms: list[str],
    skey: str | None,
    limit: int,
    deadline: Deadline,
) -> list[RawHit]:
    """A store's synchronous ranking in a matching thread at the caller's priority (the
    work is bounded: no pattern of the model's in it), answered at ``deadline``."""
    return await off_loop(
        rank, terms, skey, limit, deadline, deadline=deadline, lowest_priority=False
    )


def _snippets(texts: list[str], terms: list[str]) -> list[str]:
    return [snippet(text, terms) for text in texts]


def doc_terms(source: str) -> str:
    """The terms a document taken from ``source`` is indexed under, as the engines'
    tokenizers read them (one string, terms apart).

    Those of a source over :data:`IN_PROCESS_CHARS` are computed in a worker process
    (``contextfold._process``): finding the 2.6 million terms of a 2M-character document
    is ~0.3 s of Python, and in a thread of this process it held the GIL, and so the event
    loop, for up to 140 ms at a time on a loaded machine."""
    if len(source) > IN_PROCESS_CHARS:
        terms: str = run(index_terms_text, source[:MAX_DOC_CHARS])
        return terms
    return index_terms_text(source)


def context_docs(payload: bytes | Chunks, first_line: int) -> list[Doc]:
    """The documents of whole context-log lines appended at line ``first_line``.

    Line by line, and a huge line by its skeleton (``_line_text``): decoding a 100 MB
    payload, or parsing a 100 MB line, in one call held the event loop."""
    docs = []
    for i, text in enumerate(line_texts(payload, MAX_DOC_CHARS + 1)):
        cut = len(text) > _TEXT_CHARS
        docs.append(
            Doc(
                first_line + i,
                doc_terms(text),
                text[:_TEXT_CHARS] if cut else text,
                text[:MAX_DOC_CHARS] if cut else None,
            )
        )
    return docs


def tool_doc(body: bytes | Chunks) -> Doc:
    """The document of one tool result (its bytes whole or in pieces)."""
    first = body[:MAX_DOC_CHARS] if isinstance(body, bytes) else head(body, MAX_DOC_CHARS)
    source = first.decode("utf-8", "replace")
    return Doc(0, doc_terms(source), None, source)


class SearchableWorkspace(BaseWorkspace):
    """A workspace that also ranks its content (``WorkspaceSearch``)."""

    @abstractmethod
    async def _search(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        """The best ``limit`` documents for ``terms`` (OR), best first; the engine stops
        at the deadline with ``TimeoutError``; never a document the store lacks."""

    def _session_of(self, skey: str) -> str | None:
        """The session id of a key (``None`` when a capped key cannot be decoded)."""
        return None if is_capped(skey) else decode_key(skey)

    async def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        limit: int = 10,
        time_limit: float = 5.0,
    ) -> list[SearchHit]:
        """Offloaded messages and tool results ranked for ``query``, best first.

        Words are matched whole and in their code parts (``parse_args``, ``getUserName``,
        ``src/app/models.py``; see ``contextfold.workspace._terms``), any of them may
        match, and rarer words weigh more. ``ValueError`` for a query over 1,000
        characters or without searchable words; ``TimeoutError`` past ``time_limit``.
        """
        self._require_init()
        terms = query_terms(query)
        skey = None if session_id is None else encode_key(session_id, what="session_id")
        deadline = Deadline(time_limit, SEARCH_TIMEOUT)
        limit = max(1, min(int(limit), MAX_SEARCH_RESULTS))
        found: list[tuple[RawHit, ItemPath, str]] = []
        for raw in await self._search(terms, skey, limit, deadline):
            kind: ItemKind = "context" if raw.name == CONTEXT_FILE else "tool_result"
            item = ItemPath(kind, raw.skey, raw.name)
            text = raw.text
            if text is None:
                body = await self._get(item)
                if body is None:
                    continue  # purged meanwhile
                text = body[:MAX_DOC_CHARS].decode("utf-8", "replace")
            found.append((raw, item, text))
        deadline.left()
        snippets = await off_loop(
            _snippets,
            [text for _, _, text in found],
            terms,
            deadline=deadline,
            lowest_priority=False,
        )
        return [
            SearchHit(
                ref=self._display(item.rel),
                path=item.rel,
                kind=item.kind,
                offset=raw.line,
                score=round(raw.score, 4),
                snippet=snip,
                session_id=raw.session_id or self._session_of(raw.skey),
            )
            for (raw, item, _), snip in zip(found, snippets, strict=True)
        ]
