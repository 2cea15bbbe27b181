"""The gateway in front of a real upstream: llama.cpp's server with the embedded model,
called through the gateway with the official OpenAI SDK."""

from __future__ import annotations

import openai
import pytest

from contextfold.gateway import GatewayConfig, create_app

from .servers import serving


@pytest.mark.slow
def test_chat_completions_reach_llama_server_and_come_back(llama_server: str) -> None:
    app = create_app(GatewayConfig(upstream=llama_server, timeout=120))
    with serving(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-local", max_retries=0)
        ask = [{"role": "user", "content": "Say hello in one word."}]
        answer = client.chat.completions.create(
            model="smollm2",
            messages=ask,
            max_tokens=8,
            temperature=0,
            seed=7,  # type: ignore[arg-type]
        )
        assert answer.choices[0].message.content
        assert answer.usage is not None
        assert answer.usage.prompt_tokens > 0
        chunks = list(
            client.chat.completions.create(
                model="smollm2",
                messages=ask,
                max_tokens=8,
                temperature=0,
                seed=7,
                stream=True,  # type: ignore[arg-type]
            )
        )
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == answer.choices[0].message.content
        models = client.models.list()
        assert models.data
