"""The gateway's counters, rendered in Prometheus' text exposition format (version 0.0.4).

Written here rather than with ``prometheus-client``: a handful of counters and one
histogram, updated on one event loop, need no dependency.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["LATENCY_BUCKETS", "Metrics"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of the upstream latency histogram."""

_P = "contextfold_gateway_"


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
    upstream_errors: Counter[str] = field(default_factory=Counter)
    """Kind (``timeout``, ``connect``, ``cancelled``) -> upstream requests that failed."""
    latency_buckets: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    latency_sum: float = 0.0
    latency_count: int = 0

    def request(self, route: str, status: int) -> None:
        """Count one answered request."""
        self.requests[(route, str(status))] += 1

    def upstream_latency(self, seconds: float) -> None:
        """Record the time from sending upstream to the upstream's response headers."""
        i = bisect_left(LATENCY_BUCKETS, seconds)
        if i < len(self.latency_buckets):
            self.latency_buckets[i] += 1
        self.latency_sum += seconds
        self.latency_count += 1

    def render(self) -> str:
        """The exposition text served at ``/metrics``."""
        out: list[str] = []

        def family(name: str, kind: str, doc: str) -> None:
            out.append(f"# HELP {_P}{name} {doc}")
            out.append(f"# TYPE {_P}{name} {kind}")

        family("requests_total", "counter", "Requests answered, by route and status.")
        for (route, status), n in sorted(self.requests.items()):
            out.append(f"{_P}requests_total{_labels((('route', route), ('status', status)))} {n}")
        family("context_edits_total", "counter", "Requests on which a context edit cleared.")
        for kind, n in sorted(self.edits.items()):
            out.append(f"{_P}context_edits_total{_labels((('type', kind),))} {n}")
        family("compactions_total", "counter", "Compactions the gateway ran.")
        out.append(f"{_P}compactions_total {self.compactions}")
        family("untransformed_total", "counter", "Requests forwarded unedited: edits failed.")
        out.append(f"{_P}untransformed_total {self.untransformed}")
        family("session_busy_total", "counter", "Requests whose conversation stayed held.")
        out.append(f"{_P}session_busy_total {self.session_busy}")
        family("tokens_saved_total", "counter", "Input tokens removed by context edits.")
        out.append(f"{_P}tokens_saved_total {self.tokens_saved}")
        family("offloads_total", "counter", "Tool results kept whole in a workspace.")
        out.append(f"{_P}offloads_total {self.offloads}")
        family("reads_total", "counter", "Read-back tool calls answered by the gateway.")
        out.append(f"{_P}reads_total {self.reads}")
        family("summary_tokens_total", "counter", "Tokens transparent summaries cost.")
        for (when, kind), n in sorted(self.summary_tokens.items()):
            pairs = (("when", when), ("kind", kind))
            out.append(f"{_P}summary_tokens_total{_labels(pairs)} {n}")
        family("background_compactions_total", "counter", "Background compactions by phase.")
        for phase, n in sorted(self.background.items()):
            out.append(f"{_P}background_compactions_total{_labels((('phase', phase),))} {n}")
        family("background_discarded_total", "counter", "Background summaries dropped.")
        for reason, n in sorted(self.background_discarded.items()):
            out.append(f"{_P}background_discarded_total{_labels((('reason', reason),))} {n}")
        family("background_deferred_total", "counter", "Requests sent whole past the trigger.")
        out.append(f"{_P}background_deferred_total {self.background_deferred}")
        family("background_wait_seconds_total", "counter", "Waits for a background summary.")
        out.append(f"{_P}background_wait_seconds_total {self.background_wait_sum}")
        family("upstream_errors_total", "counter", "Upstream requests that failed, by kind.")
        for kind, n in sorted(self.upstream_errors.items()):
            out.append(f"{_P}upstream_errors_total{_labels((('kind', kind),))} {n}")
        family("upstream_latency_seconds", "histogram", "Time to the upstream's headers.")
        running = 0
        for bound, n in zip(LATENCY_BUCKETS, self.latency_buckets, strict=True):
            running += n
            out.append(f'{_P}upstream_latency_seconds_bucket{{le="{bound}"}} {running}')
        out.append(f'{_P}upstream_latency_seconds_bucket{{le="+Inf"}} {self.latency_count}')
        out.append(f"{_P}upstream_latency_seconds_sum {self.latency_sum}")
        out.append(f"{_P}upstream_latency_seconds_count {self.latency_count}")
        return "\n".join(out) + "\n"
