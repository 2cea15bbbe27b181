"""The one HTTP client to the upstream provider: headers in, headers out, failures named.

The client's credentials (``Authorization``, ``x-api-key``) are forwarded as received
and exist only in the request being forwarded: nothing here logs or keeps headers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, NamedTuple
from urllib.request import getproxies

import httpcore
import httpx

from ._answer import UpstreamAnswer
from ._config import GatewayConfig
from ._h1 import encode_head
from ._metrics import Metrics
from ._pool import StackPool, StackTransport
from ._usage import answer_usage, value_usage

__all__ = ["Upstream", "UpstreamFailure", "relayed_headers"]

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED = _HOP_BY_HOP | {"host", "content-length", "content-encoding", "accept-encoding"}
"""Request headers the gateway sets itself: the body may have been decoded or edited, and
the upstream connection negotiates its own encoding (decoded before it is relayed)."""
_NOT_RELAYED = _HOP_BY_HOP | {"content-length", "content-encoding", "server", "date"}


_SIZED_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})
"""Methods httpx sends ``Content-Length: 0`` with when they have no body."""
_TARGETS_KEPT = 256
"""Request targets whose URL is kept parsed (all forgotten when there are more)."""


class _Target(NamedTuple):
    """Where a request target goes (see ``Upstream._where``)."""

    origin: httpcore.Origin
    host: bytes
    path: bytes


class UpstreamFailure(Exception):
    """The upstream could not be reached or did not answer in time (not an HTTP error:
    those are relayed as they are)."""

    def __init__(self, kind: str, status: int, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.message = message


def relayed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The upstream's response headers a client should see (request ids, rate limits)."""
    return {k: v for k, v in headers.items() if k.lower() not in _NOT_RELAYED}


def _forwarded(
    headers: Iterable[tuple[str, str]], drop_betas: frozenset[str]
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name, value in headers:
        low = name.lower()
        if low in _NOT_FORWARDED:
            continue
        if low == "anthropic-beta" and drop_betas:
            kept = [b.strip() for b in value.split(",") if b.strip() not in drop_betas]
            if not kept:
                continue
            value = ",".join(kept)
        out.append((name, value))
    return out


def _environment_proxy() -> bool:
    """Whether ``HTTP_PROXY``, ``HTTPS_PROXY`` or ``ALL_PROXY`` is set: httpx routes
    through it only with its own transports (a transport given to the client turns the
    environment's proxies off), so then the gateway keeps them and httpcore's pool."""
    proxies = getproxies()
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))


_NO_COOKIES = CookieJar(DefaultCookiePolicy(allowed_domains=[]))
"""A jar that stores nothing: the client is shared by every client of the gateway, so an
upstream's ``Set-Cookie`` to one would go upstream with every later request (a client's
own ``Cookie`` header is forwarded as it is)."""


class Upstream:
    """Sends requests to the configured upstream and times them."""

    def __init__(self, config: GatewayConfig, metrics: Metrics) -> None:
        self._metrics = metrics
        self._base = config.upstream
        self._timeout = httpx.Timeout(config.timeout, connect=config.connect_timeout)
        self._timeouts = self._timeout.as_dict()
        transport = None if _environment_proxy() else StackTransport()
        self.pool: StackPool | None = None if transport is None else transport.pool
        """The connection pool, None when httpx's own transports route through a proxy."""
        self._pool = self.pool
        self._client = httpx.AsyncClient(
            base_url=config.upstream,
            timeout=self._timeout,
            follow_redirects=False,
            transport=transport,
            cookies=_NO_COOKIES,
        )
        self._defaults = list(self._client.headers.raw)
        """httpx's default headers (``Accept``, ``Accept-Encoding``, ``Connection``,
        ``User-Agent``), sent unless the client sent its own."""
        self._targets: dict[str, _Target] = {}

    def _where(self, target: str) -> _Target:
        """Where ``target`` goes: the origin, the ``Host`` header and the request target,
        as httpx makes them from the base URL and ``target`` (its URL parser normalizes
        and quotes), kept for the targets seen last (a gateway sends to a few)."""
        where = self._targets.get(target)
        if where is None:
            url = httpx.URL(self._base + target)
            where = _Target(
                httpcore.URL(
                    scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
                ).origin,
                url.netloc,
                url.raw_path,
            )
            if len(self._targets) >= _TARGETS_KEPT:
                self._targets.clear()
            self._targets[target] = where
        return where

    async def _send(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> UpstreamAnswer:
        """The request sent, its answer's body unread. On the gateway's own pool, the
        request is its head's bytes, as httpx would have written them (``Host``, httpx's
        default headers the client did not send, the client's, ``Content-Length``), and
        the answer is read from the connection's bytes (``_answer``): httpx's request and
        response objects were about 0.2 ms of CPU a request. Through a proxy, httpx's
        client and its transports, as configured by the environment."""
        if self._pool is None:
            request = self._client.build_request(method, target, headers=headers, content=body)
            return UpstreamAnswer.of_httpx(await self._client.send(request, stream=True))
        where = self._where(target)
        raw = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
        sent = {name.lower() for name, _ in raw}
        verb = method.encode("ascii")
        empty = [] if body or verb not in _SIZED_METHODS else [(b"Content-Length", b"0")]
        lines = encode_head(
            verb,
            where.path,
            [
                (b"Host", where.host),
                *empty,
                *(pair for pair in self._defaults if pair[0].lower() not in sent),
                *raw,
            ],
        )
        if body:
            lines.append(b"Content-Length: %d\r\n" % len(body))
        lines.append(b"\r\n")
        head, content = await self._pool.exchange(
            where.origin, verb, b"".join(lines), body, self._timeouts
        )
        return UpstreamAnswer(head.status, head.headers, content, content.aclose)

    async def open(
        self,
        method: str,
        path: str,
        *,
        query: str,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        drop_betas: frozenset[str] = frozenset(),
    ) -> UpstreamAnswer:
        """Send a request and return the response with its body still unread (the caller
        closes it). ``drop_betas`` are removed from ``anthropic-beta``."""
        target = path + (f"?{query}" if query else "")
        forwarded = _forwarded(headers, drop_betas)
        start = time.perf_counter()
        try:
            response = await self._send(method, target, forwarded, body)
        except httpx.TimeoutException:
            self._metrics.upstream_errors["timeout"] += 1
            raise UpstreamFailure("timeout", 504, "the upstream did not answer in time") from None
        except httpx.TransportError as exc:
            self._metrics.upstream_errors["connect"] += 1
            raise UpstreamFailure(
                "connect", 502, f"the upstream could not be reached: {type(exc).__name__}"
            ) from None
        self._metrics.upstream_latency(time.perf_counter() - start)
        return response

    async def read(self, response: UpstreamAnswer, *, tally: bool = True) -> bytes:
        """The whole body of an opened response, closed after; timeouts reported. With
        ``tally``, a successful answer's reported usage goes to the metrics."""
        try:
            raw = await response.aread()
            if tally and response.is_success:
                self._metrics.usage(answer_usage(raw))
            return raw
        except httpx.TimeoutException:
            self._metrics.upstream_errors["timeout"] += 1
            raise UpstreamFailure("timeout", 504, "the upstream stopped sending in time") from None
        except httpx.TransportError as exc:
            self._metrics.upstream_errors["connect"] += 1
            raise UpstreamFailure(
                "connect", 502, f"the upstream connection failed: {type(exc).__name__}"
            ) from None
        finally:
            await response.aclose()

    async def read_json(self, response: UpstreamAnswer) -> tuple[bytes, Any]:
        """The whole body, as :meth:`read` gives it, and its JSON value (``None`` when it
        is not JSON), parsed once: a successful answer's usage is read from that value
        (the routes that change an answer parsed it a second time)."""
        raw = await self.read(response, tally=False)
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            value = None
        if response.is_success:
            self._metrics.usage(value_usage(value))
        return raw, value

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()
