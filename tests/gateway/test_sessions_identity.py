"""Which conversation a request belongs to: the precedence of the identities a client may
send (``x-contextfold-session``, Claude Code's headers, ``prompt_cache_key``) and the hash
that keeps parallel subagents apart; keys of Anthropic bodies unchanged by the OpenAI ones
(states saved before still load)."""

from __future__ import annotations

from typing import Any

from contextfold.gateway import session_key
from contextfold.gateway._sessions import content_digest

CHAT_A: dict[str, Any] = {
    "model": "gpt-test",
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "task A"},
    ],
}
CHAT_B: dict[str, Any] = {
    **CHAT_A,
    "messages": [CHAT_A["messages"][0], {"role": "user", "content": "task B"}],
}


def test_the_explicit_header_wins_over_everything() -> None:
    headers = {"x-contextfold-session": "mine", "x-claude-code-session-id": "s-1"}
    body = {**CHAT_A, "prompt_cache_key": "k"}
    assert session_key(headers, body) == "h:mine"


def test_claude_codes_session_wins_over_a_prompt_cache_key() -> None:
    body = {**CHAT_A, "prompt_cache_key": "k"}
    headers = {"x-claude-code-session-id": "s-1", "x-claude-code-agent-id": "a-1"}
    assert session_key(headers, body) == "cc:s-1:a-1"


def test_a_prompt_cache_key_names_the_conversation_with_its_opening() -> None:
    a = {**CHAT_A, "prompt_cache_key": "k"}
    b = {**CHAT_B, "prompt_cache_key": "k"}
    # One key may group many conversations that share a prefix (OpenAI's advice):
    # their first messages keep them apart...
    assert session_key({}, a) != session_key({}, b)
    # ...and the key keeps apart conversations that open alike.
    assert session_key({}, a) != session_key({}, {**CHAT_A, "prompt_cache_key": "other"})
    assert session_key({}, a) != session_key({}, CHAT_A)
    assert session_key({}, a).startswith("pk:k:")
    # A later turn (more messages) is the same conversation.
    later = {**a, "messages": [*a["messages"], {"role": "assistant", "content": "ok"}]}
    assert session_key({}, later) == session_key({}, a)


def test_a_responses_body_opens_with_its_instructions_and_first_input_item() -> None:
    a = {"model": "m", "instructions": "Be brief.", "input": "task A", "prompt_cache_key": "k"}
    b = {**a, "input": "task B"}
    assert session_key({}, a) != session_key({}, b)
    listed = {**a, "input": [{"role": "user", "content": "task A"}]}
    turn = {**listed, "input": [*listed["input"], {"role": "assistant", "content": "ok"}]}
    assert session_key({}, listed) == session_key({}, turn)
    assert session_key({}, {**a, "instructions": "Other."}) != session_key({}, a)


def test_keys_of_anthropic_bodies_are_the_ones_states_were_saved_under() -> None:
    body = {"system": "s", "messages": [{"role": "user", "content": "task A"}]}
    opening = content_digest("", ["s", "task A"])[:32]
    assert session_key({}, body) == f"x:{opening}"
    assert session_key({"x-claude-code-session-id": "s-1"}, body) == f"cc:s-1:{opening}"


def test_a_chat_body_opens_with_its_system_message() -> None:
    other = {
        **CHAT_A,
        "messages": [{"role": "system", "content": "Another agent."}, CHAT_A["messages"][1]],
    }
    assert session_key({}, other) != session_key({}, CHAT_A)
