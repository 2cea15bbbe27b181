"""Every request of a replay, written as it would be sent (``replay --dump-requests DIR``).

One JSONL file per replayed run, ``<run id>.jsonl``, one line per model call in call order:
``run``, ``step`` (the reasoning step the call precedes), ``kind`` (``reasoning`` or
``summary``), the request body in the chosen provider's wire form (``messages`` and
``tools``, plus ``tool_choice`` and, for Anthropic, ``system``: exactly what the model
adapters send, from the same functions), ``tokens`` (our count), for reasoning calls
``layers`` (which messages are the system prompt, the summary and the context) and, for
summary calls, ``output``. A summarizer without a model (extractive, none) writes one
summary line: the request a model summarizer would have sent in its place. The input of
any outside grader.

Every text of a line passes the redactor (``RequestDump(redact=...)``, else the replay's
``ContextConfig.redact``) when there is one; files are ``0600`` and a folder created for
them ``0700``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from ..context import (
    ModelInput,
    ModelSummarizer,
    Redactor,
    Summarizer,
    SummaryRequest,
    SummaryResult,
    redact_messages,
    summary_prompt,
)
from ..message import Msg, ToolChoice, ToolSpec, anthropic_request, openai_request
from ..model import ModelCall
from ..token import TokenCounter
from ..workspace import encode_key
from ._files import open_private, private_dir

__all__ = ["DumpFormat", "ObservedSummarizer", "RequestDump", "RunDump", "SummaryCall"]

DumpFormat = Literal["openai", "anthropic"]


class RequestDump:
    """Where a replay writes its requests: a directory, one file per run."""

    def __init__(
        self,
        directory: str | Path,
        *,
        format: DumpFormat = "openai",
        redact: Redactor | None = None,
    ) -> None:
        if format not in ("openai", "anthropic"):
            raise ValueError(f"dump format must be 'openai' or 'anthropic', got {format!r}")
        self.directory = Path(directory)
        self.format: DumpFormat = format
        self.redact = redact
        """What every text written passes; ``None``: the replay's ``ContextConfig.redact``."""
        private_dir(self.directory)

    def path(self, run_id: str) -> Path:
        """The file of one run (its id, made safe as a file name)."""
        return self.directory / f"{encode_key(run_id)}.jsonl"

    def run(self, run_id: str, *, redact: Redactor | None = None) -> RunDump:
        """A writer for one run's requests (replacing an earlier dump of it); its texts
        pass this dump's redactor, else ``redact``."""
        return RunDump(
            self.path(run_id),
            run_id=run_id,
            format=self.format,
            redact=self.redact if self.redact is not None else redact,
        )


class RunDump:
    """Writes one run's requests, a line each, as they are made."""

    def __init__(
        self, path: Path, *, run_id: str, format: DumpFormat, redact: Redactor | None = None
    ) -> None:
        self.run_id = run_id
        self.format = format
        self.redact = redact
        self.step = 0
        """The reasoning step the next calls precede (set by the replay)."""
        self._file = open_private(path)

    def body(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
    ) -> dict[str, Any]:
        """The request body in this dump's wire form."""
        if self.format == "anthropic":
            return anthropic_request(messages, tools, tool_choice if tools else None, cache=True)
        return openai_request(messages, tools, tool_choice)

    def write(
        self,
        kind: Literal["reasoning", "summary"],
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        *,
        tokens: int,
        tool_choice: ToolChoice | None = None,
        output: Any = None,
        model_input: ModelInput | None = None,
    ) -> None:
        """One line: a request of ``kind`` before the current step.

        With ``model_input`` (a reasoning request), the line also says where its layers
        are: ``layers`` maps ``system``, ``summary`` and ``context`` to ``[start, end)``
        index ranges of ``messages`` (exact in the OpenAI form; in the Anthropic form
        ``system`` is null, the system prompt being a parameter of its own, and a summary
        merged into the next user turn counts as the summary).
        """
        line: dict[str, Any] = {"run": self.run_id, "step": self.step, "kind": kind}
        if self.redact is not None:
            messages = redact_messages(messages, self.redact)
            output = _redacted(output, self.redact)
        body = self.body(messages, tools, tool_choice)
        line.update(body)
        if model_input is not None:
            line["layers"] = self._layers(model_input, len(body["messages"]))
        line["tokens"] = tokens
        if kind == "summary":
            line["output"] = output
        self._file.write(json.dumps(line, ensure_ascii=False) + "\n")

    def _layers(self, model_input: ModelInput, total: int) -> dict[str, list[int] | None]:
        system = (
            0 if self.format == "anthropic" else len(self.body([model_input.system])["messages"])
        )
        summary = 0
        if model_input.summary is not None:
            summary = len(self.body([model_input.summary])["messages"])
        return {
            "system": None if self.format == "anthropic" else [0, system],
            "summary": [system, system + summary],
            "context": [system + summary, total],
        }

    def summary(self, call: SummaryCall) -> None:
        """One summary call's line."""
        self.write(
            "summary",
            call.messages,
            call.tools,
            tool_choice=call.tool_choice,
            tokens=call.tokens,
            output=call.output,
        )

    def close(self) -> None:
        """Flush and close the file."""
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclass(frozen=True)
class SummaryCall:
    """One call a summarizer made (or, without a model, the messages it read)."""

    messages: Sequence[Msg]
    tools: Sequence[ToolSpec]
    tool_choice: ToolChoice | None
    tokens: int
    output: Any
    output_tokens: int


class ObservedSummarizer:
    """A summarizer that reports every call it makes to ``observe``, then answers as
    ``inner``.

    A model summarizer's calls are reported as sent (each attempt, with what the model
    answered); a summarizer without a model reports one call: the messages it read.
    """

    def __init__(
        self,
        inner: Summarizer,
        observe: Callable[[SummaryCall], None],
        counter: TokenCounter,
        context_size: int,
    ) -> None:
        self.inner = inner
        self.observe = observe
        self.counter = counter
        self.context_size = context_size

    def __repr__(self) -> str:
        return repr(self.inner)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """``inner``'s summary; every call it made is reported first."""
        calls: list[ModelCall] = []
        model = self.inner.model if isinstance(self.inner, ModelSummarizer) else None
        remove = model.add_listener(calls.append) if model is not None else None
        try:
            result = await self.inner.summarize(request)
        finally:
            if remove is not None:
                remove()
            if model is not None:
                for call in calls:
                    usage = call.response.usage
                    answer = _answer(call)
                    self.observe(
                        SummaryCall(
                            call.messages,
                            call.tools,
                            call.tool_choice,
                            model.token_counter.count_request(call.messages, call.tools),
                            answer,
                            usage.output_tokens
                            if usage is not None and usage.output_tokens
                            else self.counter.count_text(json.dumps(answer, ensure_ascii=False)),
                        )
                    )
        if model is None:
            # No model was asked: report the request a model summarizer would have sent,
            # priced and dumped as if it had been.
            prompt = summary_prompt(request, self.counter, self.context_size)
            tools = prompt.offered or ()
            self.observe(
                SummaryCall(
                    prompt.messages,
                    tools,
                    None,
                    self.counter.count_request(prompt.messages, tools),
                    result.fields,
                    self.counter.count_text(json.dumps(result.fields, ensure_ascii=False)),
                )
            )
        return result


def _redacted(value: Any, redact: Redactor) -> Any:
    """``value`` (JSON) with every string passed through ``redact``, keys included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redacted(v, redact) for v in value]
    if isinstance(value, dict):
        return {redact(str(k)): _redacted(v, redact) for k, v in value.items()}
    return value


def _answer(call: ModelCall) -> Any:
    """What the model answered: the arguments of its (first) tool call, else the JSON
    object of its text, else its text."""
    calls = call.response.tool_calls
    if calls:
        return calls[0].input
    text = call.response.text
    try:
        value = json.loads(text[text.find("{") : text.rfind("}") + 1])
    except ValueError:
        return text
    return value if isinstance(value, dict) else text
