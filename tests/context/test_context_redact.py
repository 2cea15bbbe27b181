"""The redaction hook: what is offloaded or summarized passes ``ContextConfig.redact``.

The corpus below is the contract of :func:`redact_credentials`: every positive loses its
secret (and keeps its label), every negative comes back unchanged.
"""

from __future__ import annotations

import pytest

from contextfold.context import (
    REDACTED,
    ContextConfig,
    ContextEngine,
    redact_credentials,
    redact_messages,
)
from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from contextfold.model import ScriptedModel
from contextfold.workspace import MemoryWorkspace

_KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"

# (text, the secret that must disappear)
POSITIVES = [
    (
        "Authorization: Bearer eyZ0eXAiOiJKV1QiLCJhbGci0iJIUzI1NiJ9abc",
        "eyZ0eXAiOiJKV1QiLCJhbGci0iJIUzI1NiJ9abc",
    ),
    ("curl -H 'authorization: bearer 9f8e7d6c5b4a39281706'", "9f8e7d6c5b4a39281706"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA1234==", "dXNlcjpwYXNzd29yZA1234"),
    ("OPENAI_API_KEY is sk-abc123def456ghi789jkl012mno345", "sk-abc123def456ghi789jkl012mno345"),
    ("key sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56", "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56"),
    (
        "anthropic: sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1",
        "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1",
    ),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("temporary ASIAY34FZKBOKMUTVV7A in use", "ASIAY34FZKBOKMUTVV7A"),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    (f"-----BEGIN RSA PRIVATE KEY-----\n{_KEY_BODY}\n-----END RSA PRIVATE KEY-----", _KEY_BODY),
    (f"-----BEGIN PRIVATE KEY-----\n{_KEY_BODY}\n-----END PRIVATE KEY-----", _KEY_BODY),
    (f"-----BEGIN OPENSSH PRIVATE KEY-----\n{_KEY_BODY}\n(cut)", _KEY_BODY),
    (f'"key": "-----BEGIN EC PRIVATE KEY-----\\n{_KEY_BODY}\\n"', _KEY_BODY),
    ("DATABASE_URL=postgresql://app:s3cr3t-pw@db.internal:5432/prod", "s3cr3t-pw"),
    ("git clone https://bob:hunter2hunter@github.com/x/y.git", "hunter2hunter"),
    ("redis://:Pa55word!@cache:6379/0", "Pa55word!"),
    ('password = "correct-horse-battery"', "correct-horse-battery"),
    ("{'api_key': 'a1b2c3d4e5f6'}", "a1b2c3d4e5f6"),
    ('{"client_secret": "Zq81-mn0p"}', "Zq81-mn0p"),
    (
        "export GITHUB_TOKEN=ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    ),
    ("DB_PASSWORD=opensesame42", "opensesame42"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github_pat_11ABCDEFG0123456789"),
    ("slack xoxb-123456789012-abcdefABCDEF", "xoxb-123456789012-abcdefABCDEF"),
    ("maps key AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI", "AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
]

NEGATIVES = [
    "The bearer of this letter is a friend.",
    "Bearer authentication sends a token in the header.",
    "basic configuration works",
    "pip install scikit-learn; import sklearn",
    "the task-runner-for-the-nightly-build finished",
    "commit 3f1c2ab9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "password: str = Field(description='the password')",
    "password = os.environ['DB_PASSWORD']",
    'password = ""',
    "token = get_token()",
    "export API_TOKEN=$API_TOKEN",
    "see https://user@github.com/x/y and https://example.com:8080/path",
    "postgresql://localhost/db",
    "AKIA is the prefix of AWS access key ids",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    "def test_password_reset(self):\n    assert reset('alice')",
    "sk-learn is a misspelling",
    f"already masked: Bearer {REDACTED} and sk-{REDACTED}",
]


@pytest.mark.parametrize(("text", "secret"), POSITIVES)
def test_credential_shapes_are_masked(text: str, secret: str) -> None:
    out = redact_credentials(text)
    assert secret not in out
    assert REDACTED in out


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact_credentials(text) == text


@pytest.mark.parametrize(("text", "_"), POSITIVES)
def test_redaction_is_idempotent(text: str, _: str) -> None:
    once = redact_credentials(text)
    assert redact_credentials(once) == once


def test_labels_stay_so_the_agent_knows_what_was_there() -> None:
    out = redact_credentials("postgresql://app:s3cr3t-pw@db:5432/x Bearer 9f8e7d6c5b4a3928")
    assert out == f"postgresql://app:{REDACTED}@db:5432/x Bearer {REDACTED}"


def test_every_text_of_a_message_is_redacted_and_ids_are_kept() -> None:
    key = "sk-abc123def456ghi789jkl012mno345"
    msgs = [
        Msg("user", f"use {key}", "user"),
        Msg(
            "assistant",
            [
                TextBlock(text=f"calling with {key}"),
                ToolCallBlock(id="c", name="sh", input={"cmd": f"curl -H 'Bearer {key}'"}),
            ],
            "assistant",
        ),
        Msg("tool", [ToolResultBlock(id="c", name="sh", output=[TextBlock(text=key)])], "user"),
    ]
    out = redact_messages(msgs, redact_credentials)
    assert [m.id for m in out] == [m.id for m in msgs]
    assert all(key not in m.model_dump_json() for m in out)
    assert all(key in m.model_dump_json() for m in msgs)  # the originals are untouched


SECRET = "sk-live0123456789abcdefghijklmnop"


async def _session(config: ContextConfig) -> tuple[ContextEngine, MemoryWorkspace]:
    ws = MemoryWorkspace()
    counter = ScriptedModel([]).token_counter
    engine = ContextEngine(
        counter=counter, context_size=800, config=config, offloader=ws, session_id="s"
    )
    for i in range(12):
        engine.append(Msg("user", f"turn {i} my key is {SECRET} " + "word " * 20, "user"))
    engine.append(Msg("assistant", [ToolCallBlock(id="c1", name="env", input={})], "assistant"))
    big = f"OPENAI_API_KEY={SECRET}\n" + "line of output\n" * 200
    await engine.add_tool_results(
        Msg("tool", [ToolResultBlock(id="c1", name="env", output=big)], "user")
    )
    await engine.prepare("system")
    return engine, ws


async def _stored(ws: MemoryWorkspace) -> str:
    return "\n".join([(await ws.read_bytes(i.ref)).decode() for i in await ws.list_items()])


async def test_offloaded_and_summarized_content_is_redacted() -> None:
    engine, ws = await _session(
        ContextConfig(redact=redact_credentials, tool_result_limit=100, trigger_ratio=0.5)
    )
    assert engine.compressions == 1
    stored = await _stored(ws)
    assert "turn 0 my key is" in stored  # the compressed messages are there...
    assert "line of output" in stored  # ...and the whole tool result
    assert SECRET not in stored
    assert engine.summary is not None
    assert SECRET not in engine.summary.model_dump_json()


async def test_without_a_redactor_content_is_kept_as_it_was() -> None:
    engine, ws = await _session(ContextConfig(tool_result_limit=100, trigger_ratio=0.5))
    assert engine.compressions == 1
    assert SECRET in await _stored(ws)


async def test_a_custom_redactor_sees_what_is_summarized() -> None:
    seen: list[str] = []

    def redact(text: str) -> str:
        seen.append(text)
        return text.replace("key", "k**")

    engine, _ = await _session(
        ContextConfig(redact=redact, tool_result_limit=100, trigger_ratio=0.5)
    )
    assert any("turn 0 my key is" in t for t in seen)
    assert engine.summary is not None
    assert "my key" not in engine.summary.text
