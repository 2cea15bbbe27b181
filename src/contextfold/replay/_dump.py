"""Every request of a replay, written as it would be sent (``replay --dump-requests DIR``).

One JSONL file per replayed run, ``<run id>.jsonl``, one line per model call in call order:
``run``, ``step`` (the reasoning step the call precedes), ``kind`` (``reasoning`` or
``summary``), the request body in the chosen provider's wire form (``messages`` and
``tools``, plus ``tool_choice`` and, for Anthropic, ``system``: exactly what the model
adapters send, from the same functions), ``tokens`` (our count), for reasoning calls
``layers`` (which messages are the system prompt, the summary and the context) and, for
summary calls, ``output``. A summarizer without a model (extractive, none) writes one
summary line whose ``messages`` are the messages it read. The input of any outside grader.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from ..context import ModelInput, ModelSummarizer, Summarizer, SummaryRequest, SummaryResult
from ..message import Msg, ToolChoice, ToolSpec, anthropic_request, openai_request
from ..model import ModelCall
from ..token import TokenCounter
from ..workspace import encode_key

__all__ = ["DumpFormat", "RequestDump", "RunDump"]

DumpFormat = Literal["openai", "anthropic"]


class RequestDump:
    """Where a replay writes its requests: a directory, one file per run."""

    def __init__(self, directory: str | Path, *, format: DumpFormat = "openai") -> None:
        if format not in ("openai", "anthropic"):
            raise ValueError(f"dump format must be 'openai' or 'anthropic', got {format!r}")
        self.directory = Path(directory)
        self.format: DumpFormat = format
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, run_id: str) -> Path:
        """The file of one run (its id, made safe as a file name)."""
        return self.directory / f"{encode_key(run_id)}.jsonl"

    def run(self, run_id: str) -> RunDump:
        """A writer for one run's requests (replacing an earlier dump of it)."""
        return RunDump(self.path(run_id), run_id=run_id, format=self.format)


class RunDump:
    """Writes one run's requests, a line each, as they are made."""

    def __init__(self, path: Path, *, run_id: str, format: DumpFormat) -> None:
        self.run_id = run_id
        self.format = format
        self.step = 0
        """The reasoning step the next calls precede (set by the replay)."""
        self._file = path.open("w", encoding="utf-8")

    def body(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
    ) -> dict[str, Any]:
        """The request body in this dump's wire form."""
        if self.format == "anthropic":
            return anthropic_request(messages, tools, tool_choice if tools else None)
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


class DumpingSummarizer:
    """A summarizer that writes its calls to a :class:`RunDump`, then answers as ``inner``.

    A model summarizer's calls are recorded as sent (each attempt its own line, with what
    the model answered); a summarizer without a model gets one line, the messages it read.
    """

    def __init__(self, inner: Summarizer, dump: RunDump, counter: TokenCounter) -> None:
        self.inner = inner
        self.dump = dump
        self.counter = counter

    def __repr__(self) -> str:
        return repr(self.inner)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """``inner``'s summary; every call it made is written first."""
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
                    self.dump.write(
                        "summary",
                        call.messages,
                        call.tools,
                        tool_choice=call.tool_choice,
                        tokens=model.token_counter.count_request(call.messages, call.tools),
                        output=_answer(call),
                    )
        if model is None:
            messages = list(request.messages)
            self.dump.write(
                "summary",
                messages,
                (),
                tokens=self.counter.count_request(messages, ()),
                output=result.fields,
            )
        return result


def _answer(call: ModelCall) -> Any:
    """What the model answered: the arguments of its (first) tool call, else its text."""
    calls = call.response.tool_calls
    return calls[0].input if calls else call.response.text
