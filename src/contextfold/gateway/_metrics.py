"""The gateway's counters, rendered in Prometheus' text exposition format (version 0.0.4).

Written here rather than with ``prometheus-client``: a handful of counters and one
histogram, updated on one event loop, need no dependency.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["LATENCY_BUCKETS", "Metrics", "PoolFigures"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of the upstream latency histogram."""

_P = "contextfold_gateway_"


class PoolFigures(Protocol):
    """What ``/metrics`` shows of the upstream connection pool (``StackPool`` has these)."""

    @property
    def open(self) -> int: ...
    @property
    def opened(self) -> int: ...
    @property
    def retried(self) -> int: ...


def _labels(pairs: tuple[tuple[str, str], ...]) -> str:
    if not pairs:
        return ""
    inner = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in pairs
    )
    return "{" + inner + "}"


@dataclass
class Metrics:
    """What the gateway has done since it started. Content and credentials never go here."""

    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(route, status) -> requests answered."""
    edits: Counter[str] = field(default_factory=Counter)
    """Context edit type -> requests on which it cleared something."""
    compactions: int = 0
    untransformed: int = 0
    """Requests whose edits failed and were forwarded unedited (fail open)."""
    session_busy: int = 0
    """Transparent-mode requests whose conversation stayed held by another decision (here
    or on another replica) past the wait."""
    tokens_saved: int = 0
    """Input tokens the edits removed (the gateway's counter), summed over requests."""
    offloads: int = 0
    """Tool results kept whole in a workspace (transparent mode), each counted once."""
    reads: int = 0
    """Calls to the read-back tool the gateway answered itself."""
    summary_tokens: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(``blocking`` or ``background``, ``input``/``output``/``cache_read``/``cache_write``)
    -> tokens transparent mode's summaries cost (a model summarizer's calls; an extractive
    summary costs none). Discarded background summaries are counted too: they were paid."""
    background: Counter[str] = field(default_factory=Counter)
    """Phase (``started``, ``ready``, ``applied``, ``discarded``) -> background compactions."""
    background_discarded: Counter[str] = field(default_factory=Counter)
    """Reason (``stale``, ``cost_guard``, ``failed``, ``nothing``, ``ended``) -> discarded."""
    background_deferred: int = 0
    """Requests past the trigger forwarded whole while their summary was being written."""
    background_wait_sum: float = 0.0
    """Seconds requests waited for a background summary at the trigger, summed."""
    upstream_tokens: Counter[str] = field(default_factory=Counter)
    """Kind (``input`` not read from the cache, ``cache_read``, ``cache_write``,
    ``output``) -> tokens the upstream reported in the answers relayed to clients (not
    the summaries' own calls: :attr:`summary_tokens`)."""
    upstream_errors: Counter[str] = field(default_factory=Counter)
    """Kind (``timeout``, ``connect``, ``cancelled``) -> upstream requests that failed."""
    latency_buckets: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    latency_sum: float = 0.0
    latency_count: int = 0

    def request(self, route: str, status: int) -> None:
        """Count one answered request."""
        self.requests[(route, str(status))] += 1

    def usage(self, tokens: Counter[str]) -> None:
        """Add one answer's reported usage (``_usage``)."""
        self.upstream_tokens.update(tokens)

    def cache_read_share(self) -> float:
        """Of the input tokens the upstream reported, the share read from its cache."""
        read = self.upstream_tokens["cache_read"]
        total = read + self.upstream_tokens["input"] + self.upstream_tokens["cache_write"]
        return read / total if total else 0.0

    def upstream_latency(self, seconds: float) -> None:
        """Record the time from sending upstream to the upstream's response headers."""
        i = bisect_left(LATENCY_BUCKETS, seconds)
        if i < len(self.latency_buckets):
            self.latency_buckets[i] += 1
        self.latency_sum += seconds
        self.latency_count += 1

    def render(self, pool: PoolFigures | None = None) -> str:
        """The exposition text served at ``/metrics``; ``pool`` adds the upstream
        connection pool's counts (absent when httpx's own transports route via a proxy)."""
        out: list[str] = []

        def family(name: str, kind: str, doc: str) -> None:
            out.append(f"# HELP {_P}{name} {doc}")
            out.append(f"# TYPE {_P}{name} {kind}")

        # fmt: off
        singles: list[tuple[str, str, str, float]] = [
            ("compactions_total", "counter", "Compactions the gateway ran.", self.compactions),
            ("untransformed_total", "counter", "Requests forwarded unedited: edits failed.",
             self.untransformed),
            ("session_busy_total", "counter", "Requests whose conversation stayed held.",
             self.session_busy),
            ("tokens_saved_total", "counter", "Input tokens removed by context edits.",
             self.tokens_saved),
            ("offloads_total", "counter", "Tool results kept whole in a workspace.",
             self.offloads),
            ("reads_total", "counter", "Read-back tool calls answered by the gateway.",
             self.reads),
            ("background_deferred_total", "counter", "Requests sent whole past the trigger.",
             self.background_deferred),
            ("background_wait_seconds_total", "counter", "Waits for a background summary.",
             self.background_wait_sum),
            ("upstream_cache_read_share", "gauge",
             "Share of the input tokens the upstream reported that it read from its cache.",
             self.cache_read_share()),
        ]
        if pool is not None:
            singles += [
                ("upstream_connections_opened_total", "counter",
                 "Connections opened to the upstream.", pool.opened),
                ("upstream_connections_open", "gauge",
                 "Connections to the upstream open now, in use or idle.", pool.open),
                ("upstream_retries_total", "counter",
                 "Requests sent again: the upstream had closed their kept-alive connection.",
                 pool.retried),
            ]
        labelled: list[tuple[str, str, tuple[str, ...], Counter[Any]]] = [
            ("requests_total", "Requests answered, by route and status.", ("route", "status"),
             self.requests),
            ("context_edits_total", "Requests on which a context edit cleared.", ("type",),
             self.edits),
            ("summary_tokens_total", "Tokens transparent summaries cost.", ("when", "kind"),
             self.summary_tokens),
            ("background_compactions_total", "Background compactions by phase.", ("phase",),
             self.background),
            ("background_discarded_total", "Background summaries dropped.", ("reason",),
             self.background_discarded),
            ("upstream_errors_total", "Upstream requests that failed, by kind.", ("kind",),
             self.upstream_errors),
            ("upstream_tokens_total", "Tokens the upstream reported in relayed answers.",
             ("kind",), +self.upstream_tokens),
        ]
        # fmt: on
        for name, kind, doc, value in singles:
            family(name, kind, doc)
            out.append(f"{_P}{name} {value}")
        for name, doc, labels, counts in labelled:
            family(name, "counter", doc)
            for key, n in sorted(counts.items()):
                values = key if isinstance(key, tuple) else (key,)
                out.append(f"{_P}{name}{_labels(tuple(zip(labels, values, strict=True)))} {n}")
        family("upstream_latency_seconds", "histogram", "Time to the upstream's headers.")
        running = 0
        for bound, n in zip(LATENCY_BUCKETS, self.latency_buckets, strict=True):
            running += n
            out.append(f'{_P}upstream_latency_seconds_bucket{{le="{bound}"}} {running}')
        out.append(f'{_P}upstream_latency_seconds_bucket{{le="+Inf"}} {self.latency_count}')
        out.append(f"{_P}upstream_latency_seconds_sum {self.latency_sum}")
        out.append(f"{_P}upstream_latency_seconds_count {self.latency_count}")
        return "\n".join(out) + "\n"
