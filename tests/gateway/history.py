"""Anthropic-shaped conversations for the edit tests."""

from __future__ import annotations

from typing import Any


def tool_history(
    pairs: int, *, size: int = 2_000, names: tuple[str, ...] = ("bash", "read")
) -> list[dict[str, Any]]:
    """A user request, then ``pairs`` tool use/result pairs (tools named in turn from
    ``names``, each result ``size`` characters), then the user's next question."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(pairs):
        name = names[i % len(names)]
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {i}."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{i:02d}",
                        "name": name,
                        "input": {"arg": f"{name} {i} " + "a" * 200},
                    },
                ],
            }
        )
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": f"toolu_{i:02d}",
            "content": f"output {i} " + "lorem ipsum " * (size // 12),
        }
        if i == 0:  # a key the edit must keep
            result["cache_control"] = {"type": "ephemeral"}
        messages.append({"role": "user", "content": [result]})
    messages.append({"role": "assistant", "content": "All done so far."})
    messages.append({"role": "user", "content": "Now run the linter."})
    return messages


def thinking_history(turns: int) -> list[dict[str, Any]]:
    """``turns`` user turns; each answered by thinking, a tool call, its result, then
    thinking and text (one turn: the tool loop continues it)."""
    messages: list[dict[str, Any]] = []
    for t in range(turns):
        messages.append({"role": "user", "content": f"Question {t}?"})
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": f"Let me think about {t}. " * 40,
                        "signature": f"sig{t}a",
                    },
                    {
                        "type": "tool_use",
                        "id": f"toolu_t{t}",
                        "name": "bash",
                        "input": {"cmd": "ls"},
                    },
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_t{t}", "content": "a.py"}
                ],
            }
        )
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "redacted_thinking", "data": f"opaque{t}"},
                    {"type": "text", "text": f"Answer {t}."},
                ],
            }
        )
    messages.append({"role": "user", "content": "And now?"})
    return messages
