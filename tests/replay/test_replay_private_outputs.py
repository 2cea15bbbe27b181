"""What ``replay`` writes holds the recorded conversation: with ``--redact`` (or the
replay's ``ContextConfig.redact``) no credential of it is in the request dumps, ``--json``
or the report, and every file is ``0600``, every folder created for one ``0700``, under
the usual umask 022 (issue 28)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from contextfold.context import ContextConfig, redact_credentials
from contextfold.replay import (
    ReplayResult,
    RequestDump,
    RunResult,
    load_recordings,
    replay_run,
    write_json,
)

runner = CliRunner(env={"COLUMNS": "240", "TERMINAL_WIDTH": "240"})

SECRETS = {
    "env": "opensesame42-prod",
    "aws_id": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "github": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
}


def _recording(folder: Path) -> Path:
    """One run as a JSON list of OpenAI messages, with credentials in the user's message,
    a tool call's arguments and a (long, so truncated and offloaded) tool result."""
    aws = json.dumps({"AccessKeyId": SECRETS["aws_id"], "SecretAccessKey": SECRETS["aws_secret"]})
    messages = [
        {"role": "system", "content": "You operate the deployment."},
        {"role": "user", "content": f"deploy; DB_PASSWORD={SECRETS['env']} is set"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "sh",
                        "arguments": json.dumps({"cmd": f"GITHUB_TOKEN={SECRETS['github']} gh"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": aws + "\n" + "log line\n" * 400},
        {"role": "assistant", "content": "Deployed."},
    ]
    path = folder / "deploy.json"
    path.write_text(json.dumps(messages))
    return path


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _replay(cli: typer.Typer, tmp_path: Path, *extra: str) -> dict[str, Path]:
    out = tmp_path / "out"
    paths = {
        "dumps": out / "dumps",
        "json": out / "metrics" / "m.json",
        "report": out / "html" / "r.html",
    }
    args = [
        "replay",
        str(_recording(tmp_path)),
        "-c",
        "2000",
        "--tool-result-limit",
        "200",
        "--dump-requests",
        str(paths["dumps"]),
        "--json",
        str(paths["json"]),
        "--report",
        str(paths["report"]),
        *extra,
    ]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    return paths


def _written(paths: dict[str, Path]) -> str:
    files = [*paths["dumps"].iterdir(), paths["json"], paths["report"]]
    return "\n".join(f.read_text() for f in files)


def test_with_redact_no_credential_is_written(
    cli: typer.Typer, tmp_path: Path, umask_022: None
) -> None:
    paths = _replay(cli, tmp_path, "--redact")
    dump = next(paths["dumps"].iterdir()).read_text()
    assert "[REDACTED]" in dump
    assert "log line" in dump  # the conversation is still there
    written = _written(paths)
    for name, secret in SECRETS.items():
        assert secret not in written, name


def test_outputs_are_private_whatever_the_umask(
    cli: typer.Typer, tmp_path: Path, umask_022: None
) -> None:
    paths = _replay(cli, tmp_path)
    # without --redact the dump is the request exactly as it would be sent...
    assert SECRETS["github"] in next(paths["dumps"].iterdir()).read_text()
    # ...and so kept from other users
    for folder in (paths["dumps"], paths["json"].parent, paths["report"].parent):
        assert _mode(folder) == 0o700, folder
    for file in (*paths["dumps"].iterdir(), paths["json"], paths["report"]):
        assert _mode(file) == 0o600, file


def test_an_existing_output_file_is_made_private(tmp_path: Path, umask_022: None) -> None:
    path = tmp_path / "m.json"
    path.write_text("old")
    path.chmod(0o644)
    write_json(ReplayResult(context_size=1, summarizer="x", counter="y", runs=[]), path)
    assert _mode(path) == 0o600
    assert json.loads(path.read_text())["runs"] == []


def test_a_symlink_in_place_of_an_output_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep")
    (tmp_path / "m.json").symlink_to(target)
    with pytest.raises(OSError):
        write_json(
            ReplayResult(context_size=1, summarizer="x", counter="y", runs=[]), tmp_path / "m.json"
        )
    assert target.read_text() == "keep"


async def test_the_library_dump_follows_the_configs_redactor(tmp_path: Path) -> None:
    ((run, _),) = load_recordings([_recording(tmp_path)]).runs
    dump = RequestDump(tmp_path / "dumps")
    config = ContextConfig(redact=redact_credentials, tool_result_limit=200)
    result = await replay_run(run, context_size=2000, config=config, dump=dump)
    assert result.error is None
    text = dump.path(run.instance_id).read_text()
    assert "[REDACTED]" in text
    assert not [s for s in SECRETS.values() if s in text]


def test_json_and_report_texts_pass_the_redactor() -> None:
    key = SECRETS["github"]
    run = RunResult(
        run_id="r", source=f"runs/{key}.json", format="openai", context_size=1, error=f"bad {key}"
    )
    result = ReplayResult(context_size=1, summarizer="x", counter="y", runs=[run])
    dumped = result.redacted(redact_credentials).model_dump_json()
    assert key not in dumped
    assert "bad [REDACTED]" in dumped
    assert result.redacted(None) is result
