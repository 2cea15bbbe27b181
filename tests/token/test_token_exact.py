"""Text counts equal tiktoken's, the reference tokenizer."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.token import OpenAITokenCounter

from .token_helpers import reference_count, swebench_texts

CORPUS = {
    "code": 'def f(x: int) -> int:\n    """Square."""\n    return x ** 2  # noqa\n'
    "\n\tif a!=b: pass\n",
    "json": json.dumps({"a": [1, 2.5, None, True], "b": {"c": 'd"e\\f', "ü": "\u0000"}}),
    "json_indented": json.dumps({"id": 42, "items": [{"k": "v"}] * 3}, indent=2),
    "log": "2024-05-01T12:00:01.123Z ERROR [worker-3] Traceback (most recent call last):\n"
    "  File \"/usr/lib/python3.11/x.py\", line 12, in <module>\nKeyError: 'x'\n",
    "chinese": "上下文管理是长时间运行的智能体的核心问题。压缩历史消息，保留关键信息。",
    "japanese_korean": "トークンを数える。토큰을 세어 보세요. 日本語の文章です。",
    "emoji": "ship it 🚀🚀 👩‍👩‍👧‍👦 🇫🇷 🧠✨ ❤️‍🔥",
    "special_tokens": "<|endoftext|> and <|im_start|>user<|im_end|> <|endofprompt|>",
    "whitespace": "   \n\n\t\t  x  \r\n  \u00a0\u2003 end   ",
    "numbers": "3.14159265358979 1234567890 0x7fff_ffff 1e-10 -42",
    "mixed_scripts": "Привет мир! مرحبا بالعالم नमस्ते दुनिया Γειά σου",
    "url": "https://example.com/a/b?c=d&e=%20f#frag user@example.org",
    "empty": "",
}


@pytest.mark.parametrize("kind", sorted(CORPUS))
def test_count_text_equals_tiktoken_on_varied_text(encoding: str, kind: str) -> None:
    text = CORPUS[kind]
    assert OpenAITokenCounter(encoding).count_text(text) == reference_count(encoding, text)


def test_count_text_equals_tiktoken_on_recorded_swebench_messages(encoding: str) -> None:
    counter = OpenAITokenCounter(encoding)
    texts = swebench_texts()
    assert len(texts) > 50
    ours = counter.count_texts(texts)
    assert ours == [reference_count(encoding, t) for t in texts]


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300))
def test_count_text_equals_tiktoken_on_generated_unicode(text: str) -> None:
    for encoding in ("o200k_base", "cl100k_base"):
        assert OpenAITokenCounter(encoding).count_text(text) == reference_count(encoding, text)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(
        alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Z", "Cc"]),
        max_size=400,
    )
)
def test_count_text_equals_tiktoken_on_generated_mixed_categories(text: str) -> None:
    counter = OpenAITokenCounter("o200k_base")
    assert counter.count_text(text) == reference_count("o200k_base", text)


def test_unknown_encoding_is_rejected_with_the_supported_ones_named() -> None:
    with pytest.raises(ValueError, match="o200k_base, cl100k_base"):
        OpenAITokenCounter("p50k_base")
