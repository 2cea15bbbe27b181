"""The gateway as a proxy: routes passed through, credentials forwarded and kept nowhere,
provider-shaped errors, upstream failures relayed or reported, disconnects cancelling."""

from __future__ import annotations

import json
import logging
import time

import anthropic
import httpx
import openai
import pytest

from contextfold.gateway import GatewayConfig, create_app
from contextfold.token import AnthropicEstimator

from .conftest import SECRET, GatewayFactory
from .servers import ScriptedUpstream, message, serving

MODEL = "claude-test"


def credential(headers: dict[str, str]) -> str:
    """The key the SDK sent (this SDK version sends ``Authorization: Bearer``; older ones
    ``x-api-key``)."""
    return headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")


def client(url: str, **kw: object) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0, **kw)  # type: ignore[arg-type]


def test_health_answers_without_the_upstream(gateway: str, upstream: ScriptedUpstream) -> None:
    got = httpx.get(f"{gateway}/health")
    assert got.status_code == 200
    assert got.json() == {"status": "ok", "upstream": upstream.url}
    assert upstream.received == []


def test_models_are_listed_by_the_upstream_with_the_clients_key(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    listing = {
        "data": [
            {
                "type": "model",
                "id": "claude-test",
                "display_name": "Test",
                "created_at": "2026-01-01T00:00:00Z",
            }
        ],
        "has_more": False,
        "first_id": "claude-test",
        "last_id": "claude-test",
    }
    upstream.then_json(listing, headers={"request-id": "req_123"})
    page = client(gateway).models.list()
    assert [m.id for m in page.data] == ["claude-test"]
    (got,) = upstream.received
    assert (got.method, got.path) == ("GET", "/v1/models")
    assert credential(got.headers) == SECRET
    assert got.headers["anthropic-version"]


def test_an_authorization_header_is_forwarded_as_sent(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_json({"object": "list", "data": []})
    got = httpx.get(f"{gateway}/v1/models", headers={"Authorization": f"Bearer {SECRET}"})
    assert got.status_code == 200
    assert upstream.received[0].headers["authorization"] == f"Bearer {SECRET}"


def test_credentials_never_reach_a_log_or_the_metrics(
    gateway: str, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    upstream.then_json(message()).then_json(
        {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}, 401
    )
    c = client(gateway, default_headers={"x-api-key": SECRET})
    c.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.AuthenticationError):
        c.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    metrics = httpx.get(f"{gateway}/metrics").text
    assert all(r.headers["x-api-key"] == SECRET for r in upstream.received)
    assert all(credential(r.headers) == SECRET for r in upstream.received)
    assert SECRET not in caplog.text
    assert SECRET not in metrics


@pytest.mark.parametrize(
    ("status", "kind", "error"),
    [
        (429, "rate_limit_error", anthropic.RateLimitError),
        (500, "api_error", anthropic.InternalServerError),
        (529, "overloaded_error", anthropic.APIStatusError),
    ],
)
def test_upstream_errors_are_relayed_with_their_status_and_body(
    gateway: str, upstream: ScriptedUpstream, status: int, kind: str, error: type[Exception]
) -> None:
    body = {"type": "error", "error": {"type": kind, "message": f"upstream says {status}"}}
    upstream.then_json(body, status, headers={"retry-after": "7", "request-id": "req_9"})
    with pytest.raises(error) as caught:
        client(gateway).messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    exc = caught.value
    assert isinstance(exc, anthropic.APIStatusError)
    assert exc.status_code == status
    assert exc.body == body
    assert exc.response.headers["retry-after"] == "7"
    assert exc.response.headers["request-id"] == "req_9"


def test_malformed_json_gets_an_anthropic_error_and_goes_nowhere(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    got = httpx.post(
        f"{gateway}/v1/messages",
        content=b'{"model": "x", "messages": [',
        headers={"x-api-key": SECRET, "content-type": "application/json"},
    )
    assert got.status_code == 400
    body = got.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "not valid JSON" in body["error"]["message"]
    assert upstream.received == []


def test_a_body_that_is_not_an_object_is_refused(gateway: str, upstream: ScriptedUpstream) -> None:
    got = httpx.post(f"{gateway}/v1/messages", content=b"[1, 2]", headers={"x-api-key": SECRET})
    assert got.status_code == 400
    assert got.json()["error"]["type"] == "invalid_request_error"
    assert upstream.received == []


def test_an_oversized_body_gets_each_providers_413(
    start_gateway: GatewayFactory, upstream: ScriptedUpstream
) -> None:
    url = start_gateway(max_body_bytes=2_000)
    big = [{"role": "user", "content": "x" * 5_000}]
    with pytest.raises(anthropic.APIStatusError) as caught:
        client(url).messages.create(model=MODEL, max_tokens=10, messages=big)  # type: ignore[arg-type]
    assert caught.value.status_code == 413
    assert caught.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
    o = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
    with pytest.raises(openai.APIStatusError) as raised:
        o.chat.completions.create(model="m", messages=big)  # type: ignore[arg-type]
    assert raised.value.status_code == 413
    assert set(raised.value.body) == {"message", "type", "param", "code"}  # type: ignore[arg-type]
    assert upstream.received == []


def test_an_oversized_body_in_chunks_without_a_length_is_refused(
    start_gateway: GatewayFactory, upstream: ScriptedUpstream
) -> None:
    url = start_gateway(max_body_bytes=2_000)

    def chunks():  # type: ignore[no-untyped-def]
        for _ in range(10):
            yield b"x" * 500

    got = httpx.post(f"{url}/v1/messages", content=chunks(), headers={"x-api-key": SECRET})
    assert got.status_code == 413
    assert got.json()["type"] == "error"
    assert upstream.received == []


def test_unknown_fields_reach_the_upstream_untouched(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_json(message()).then_json(message())
    future = {"nested": [1, 2.5, None, {"deep": "ü"}], "flag": True}
    for extra in ({}, {"context_management": {"edits": []}}):
        client(gateway).beta.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[{"role": "user", "content": "hi", "x_future": 1}],  # type: ignore[typeddict-unknown-key]
            extra_body={"some_future_field": future, **extra},
        )
    for got in upstream.received:
        body = got.json()
        assert body["some_future_field"] == future
        assert body["messages"][0]["x_future"] == 1
        assert "context_management" not in body


def test_an_upstream_timeout_is_reported_not_hung_on(
    start_gateway: GatewayFactory, upstream: ScriptedUpstream
) -> None:
    url = start_gateway(timeout=0.5)
    upstream.then_hang(5)
    start = time.monotonic()
    with pytest.raises(anthropic.APIStatusError) as caught:
        client(url).messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert time.monotonic() - start < 3
    assert caught.value.status_code == 504
    assert caught.value.body["error"]["type"] == "timeout_error"  # type: ignore[index]
    assert "timeout" in httpx.get(f"{url}/metrics").text


def test_an_unreachable_upstream_is_a_502(start_gateway: GatewayFactory) -> None:
    from contextfold.gateway import GatewayConfig, create_app

    from .servers import free_port, serving

    app = create_app(GatewayConfig(upstream=f"http://127.0.0.1:{free_port()}", connect_timeout=2))
    with serving(app) as url:
        got = httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "messages": []})
    assert got.status_code == 502
    assert got.json()["error"]["type"] == "server_error"


def test_a_client_that_leaves_cancels_the_upstream_request(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_hang(10)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{gateway}/v1/messages",
            json={"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-api-key": SECRET},
            timeout=0.5,
        )
    assert upstream.disconnected.wait(5), "the upstream request kept running"
    assert 'kind="cancelled"' in httpx.get(f"{gateway}/metrics").text


def test_chat_completions_pass_through_for_the_openai_sdk(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "pong"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    upstream.then_json(completion)
    o = openai.OpenAI(base_url=f"{gateway}/v1", api_key=SECRET, max_retries=0)
    answer = o.chat.completions.create(model="m", messages=[{"role": "user", "content": "ping"}])
    assert answer.choices[0].message.content == "pong"
    (got,) = upstream.received
    assert got.path == "/v1/chat/completions"
    assert got.headers["authorization"] == f"Bearer {SECRET}"
    assert got.json()["messages"] == [{"role": "user", "content": "ping"}]


def test_metrics_count_requests_by_route_and_status_and_time_the_upstream(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_json(message())
    client(gateway).messages.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    httpx.post(f"{gateway}/v1/messages", content=b"{", headers={"x-api-key": SECRET})
    text = httpx.get(f"{gateway}/metrics").text
    lines = set(text.splitlines())
    assert 'contextfold_gateway_requests_total{route="/v1/messages",status="200"} 1' in lines
    assert 'contextfold_gateway_requests_total{route="/v1/messages",status="400"} 1' in lines
    assert "contextfold_gateway_upstream_latency_seconds_count 1" in lines
    assert "# TYPE contextfold_gateway_tokens_saved_total counter" in lines
    assert json.dumps("x")  # the exposition is plain text, not JSON


def test_a_client_that_leaves_a_stream_cancels_the_upstream_stream(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    from .servers import message_stream

    # The upstream goes quiet after each event: the gateway must notice the client left
    # while it waits, not at its next write.
    upstream.then_slow_stream(message_stream("x" * 40), gap=5)
    body = {
        "model": MODEL,
        "max_tokens": 5,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    with httpx.stream(
        "POST", f"{gateway}/v1/messages", json=body, headers={"x-api-key": SECRET}
    ) as got:
        first = next(got.iter_bytes())
    assert first.startswith(b"event: message_start")
    assert upstream.disconnected.wait(3), "the upstream stream kept running"


@pytest.mark.parametrize("extra", [{}, {"context_management": {"edits": []}}])
def test_an_upstream_that_stalls_mid_stream_ends_it_with_an_error_event(
    start_gateway: GatewayFactory, upstream: ScriptedUpstream, extra: dict[str, object]
) -> None:
    from .servers import message_stream

    url = start_gateway(timeout=0.5)
    upstream.then_slow_stream(message_stream("hello"), gap=3)
    body = {
        "model": MODEL,
        "max_tokens": 5,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }
    start = time.monotonic()
    with httpx.stream(
        "POST", f"{url}/v1/messages", json=body, headers={"x-api-key": SECRET}
    ) as got:
        raw = b"".join(got.iter_bytes())
    assert time.monotonic() - start < 3
    events = [e for e in raw.split(b"\n\n") if e.strip()]
    assert events[0].startswith(b"event: message_start")
    assert events[-1].startswith(b"event: error")
    assert json.loads(events[-1].split(b"data: ", 1)[1])["error"]["type"] == "timeout_error"


def _cancelled(url: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith('contextfold_gateway_upstream_errors_total{kind="cancelled"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_answered_requests_are_not_counted_as_cancelled(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    # uvicorn's receive() reports a disconnect as soon as a response is complete: a relay
    # that races the end of its own response against that report counted every answered
    # request as a cancellation (seen with litellm through the gateway: 31 of 31).
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "pong"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    o = openai.OpenAI(base_url=f"{gateway}/v1", api_key=SECRET, max_retries=0)
    for _ in range(20):
        upstream.then_json(completion)
        o.chat.completions.create(model="m", messages=[{"role": "user", "content": "ping"}])
    for _ in range(5):
        upstream.then_json(message())
        client(gateway).messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert _cancelled(gateway) == 0


def test_the_counter_is_loaded_before_the_first_request() -> None:
    """The tokenizer loads at start-up (off the loop), not on the first client's request:
    loading o200k_base took 0.7 s quiet and ~5 s under load, paid by whoever came first."""
    calls: list[str] = []

    class Recording(AnthropicEstimator):
        def count_text(self, text: str) -> int:
            calls.append(text)
            return super().count_text(text)

    app = create_app(GatewayConfig(upstream="http://127.0.0.1:9"), counter=Recording())
    with serving(app) as url:
        assert httpx.get(f"{url}/health").status_code == 200
        assert len(calls) == 1  # counted once at start-up, before any request


def test_a_cookie_the_upstream_set_for_one_client_is_not_sent_with_another_clients_request(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    """The gateway keeps no cookie jar: an upstream's ``Set-Cookie`` goes back to the
    client that got it, and is not replayed on the next request, whoever sends it."""
    upstream.then_json(message(), headers={"set-cookie": "session=alice-7f3a; Path=/"})
    upstream.then_json(message())
    body = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    first = httpx.post(f"{gateway}/v1/messages", json=body, headers={"x-api-key": "a"})
    assert first.headers["set-cookie"].startswith("session=alice-7f3a")
    second = httpx.post(f"{gateway}/v1/messages", json=body, headers={"x-api-key": "b"})
    assert second.status_code == 200
    assert "cookie" not in upstream.received[1].headers
