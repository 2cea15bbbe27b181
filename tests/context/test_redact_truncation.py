"""A secret cut by truncation is not kept in part (issue 28).

A tool result over ``tool_result_limit`` is cut to a head and a tail; a key straddling the
cut (``AIza`` and 30 of its 35 characters) no longer has the shape the redactor knows, so
the part kept went into the request and the saved state as it was. With
``ContextConfig(redact=...)`` the whole text is redacted before the cut: no 8-character
run of the secret is in what is sent, stored in the state or offloaded.
"""

from __future__ import annotations

import json
from typing import Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.context import ContextConfig, ContextEngine, redact_credentials
from contextfold.context._trim import ToolResultTruncator
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.model import ScriptedModel
from contextfold.workspace import MemoryWorkspace

_COUNTER = ScriptedModel([]).token_counter
_LIMIT = 100

# (label, secret, end): what precedes the secret, the secret, what follows it.
SECRETS = [
    ("maps key ", "AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI", ""),
    ("token ", "ghp_16C7e42F292c6912E7710c838347Ae178B4a", ""),
    ("id ", "AKIAIOSFODNN7EXAMPLE", ""),
    ("openai ", "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56", ""),
    ("slack ", "xoxb-123456789012-abcdefABCDEF", ""),
    ("export DB_PASSWORD=", "opensesame42-and-more", ""),
    ('{"SecretAccessKey": "', "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", '"}'),
]


def _runs(secret: str, text: str) -> list[str]:
    """The 8-character runs of ``secret`` found in ``text``."""
    return [secret[i : i + 8] for i in range(len(secret) - 7) if secret[i : i + 8] in text]


async def _everything_kept(
    output: str, keep: Literal["head_tail", "head"] = "head_tail"
) -> tuple[str, str, str]:
    """(sent, state, offloaded) after a tool result of ``output`` goes through an engine
    that redacts and truncates."""
    ws = MemoryWorkspace()
    await ws.initialize()
    config = ContextConfig(
        redact=redact_credentials, tool_result_limit=_LIMIT, truncation_keep=keep
    )
    engine = ContextEngine(
        counter=_COUNTER, context_size=4000, config=config, offloader=ws, session_id="s"
    )
    engine.append(Msg("assistant", [ToolCallBlock(id="c", name="sh", input={})], "assistant"))
    await engine.add_tool_results(
        Msg("tool", [ToolResultBlock(id="c", name="sh", output=output)], "user")
    )
    prepared = await engine.prepare("system")
    sent = "\n".join(m.model_dump_json() for m in prepared.messages())
    state = json.dumps(engine.state().redacted(config.redact).to_json())
    items = [(await ws.read_bytes(i.ref)).decode() for i in await ws.list_items()]
    return sent, state, "\n".join(items)


def _cut_through(label: str, secret: str, end: str) -> str:
    """A tool result whose head, cut without redaction, ends inside ``secret``."""
    truncator = ToolResultTruncator(_COUNTER, limit=_LIMIT, keep="head_tail")
    for pad in range(0, 2000, 3):
        output = "x " * pad + label + secret + end + "\n" + "tail line\n" * 200
        cut = truncator.cut(ToolResultBlock(id="c", name="sh", output=output), ref=None).text()
        if secret[:8] in cut and secret not in cut:
            return output
    raise AssertionError(f"no cut falls inside {secret}")


async def test_a_secret_cut_by_truncation_is_not_kept_in_part() -> None:
    for label, secret, end in SECRETS:
        output = _cut_through(label, secret, end)
        assert redact_credentials(output).count(secret) == 0  # the whole text is masked
        for where, text in zip(
            ("sent", "state", "offloaded"), await _everything_kept(output), strict=True
        ):
            assert not _runs(secret, text), (secret, where)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, len(SECRETS) - 1),
    before=st.integers(0, 400),
    after=st.integers(120, 400),
    keep=st.sampled_from(["head_tail", "head"]),
)
async def test_no_8_character_run_of_a_secret_survives_any_cut(
    which: int, before: int, after: int, keep: Literal["head_tail", "head"]
) -> None:
    label, secret, end = SECRETS[which]
    # words around the secret: over the limit whatever ``before`` is, so always cut, the
    # cut falling before, inside or after the secret
    output = "w " * before + label + secret + end + "\n" + "v " * after
    sent, state, offloaded = await _everything_kept(output, keep)
    assert "[REDACTED]" in offloaded  # the whole result, redacted
    assert not _runs(secret, sent + state + offloaded)
