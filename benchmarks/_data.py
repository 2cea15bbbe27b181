"""Benchmark inputs in a neutral form, so both systems replay exactly the same turns.

A :class:`Session` is a system prompt, the user's task and a list of :class:`Step`: what
the assistant said, the one shell command it ran, and what that command printed. Each
system's driver turns a session into its own message types.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "REPO_ROOT",
    "SWEBENCH_DIR",
    "Session",
    "Step",
    "load_swebench",
    "synthetic_session",
    "text_corpus",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
SWEBENCH_DIR = REPO_ROOT / "data" / "trajectories" / "swebench-verified-gemini3pro"
TAU_FILE = REPO_ROOT / "data" / "trajectories" / "tau-bench-airline-gpt4o" / "gpt-4o-airline.json"

_BASH = re.compile(r"```bash\s*\n(.*?)```", re.DOTALL)
FINAL_TEXT = "The task is complete."


@dataclass
class Step:
    """One reasoning step: the assistant's text, its shell command, the command's output."""

    thought: str
    command: str
    output: str


@dataclass
class Session:
    """A recorded (or generated) run, replayed step by step."""

    name: str
    system: str
    task: str
    steps: list[Step] = field(default_factory=list)

    @property
    def n_messages(self) -> int:
        """Messages in chat-completions terms: system, task, a call and a result per step."""
        return 2 + 2 * len(self.steps)


def _load_one(path: Path) -> Session:
    data = json.loads(path.read_text(encoding="utf-8"))
    msgs = data["messages"]
    system = msgs[0]["content"]
    task = msgs[1]["content"]
    steps: list[Step] = []
    i = 2
    while i < len(msgs):
        m = msgs[i]
        if m["role"] != "assistant":
            i += 1
            continue
        text = m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
        match = _BASH.search(text)
        command = match.group(1).strip() if match else ""
        thought = (text[: match.start()] if match else text).strip()
        output = ""
        if i + 1 < len(msgs) and msgs[i + 1]["role"] == "user":
            nxt = msgs[i + 1]["content"]
            output = nxt if isinstance(nxt, str) else json.dumps(nxt)
            i += 1
        steps.append(Step(thought, command, output))
        i += 1
    return Session(path.name.removesuffix(".traj.json"), system, task, steps)


def load_swebench(limit: int | None = None) -> list[Session]:
    """The 44 recorded SWE-bench Verified runs, sorted by name."""
    paths = sorted(SWEBENCH_DIR.glob("*.traj.json"))
    if limit is not None:
        paths = paths[:limit]
    return [_load_one(p) for p in paths]


_MODULES = ["core", "utils", "io", "models", "views", "parser", "cache", "auth", "db", "api"]
_FUNCS = ["load_config", "parse_header", "resolve_path", "flush_buffer", "compute_hash"]
_ERRORS = [
    "KeyError: 'timeout'",
    "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
    "AssertionError: expected 3 == 4",
    "ValueError: invalid literal for int() with base 10: 'x'",
]


def synthetic_session(n_messages: int, *, seed: int = 0) -> Session:
    """A deterministic session of about ``n_messages`` messages with short, varied turns.

    Turns carry paths, function names, error lines and numbers, so the same session can
    also feed the retention figure.
    """
    rng = random.Random(seed)
    steps: list[Step] = []
    for k in range((n_messages - 2) // 2):
        mod = rng.choice(_MODULES)
        func = rng.choice(_FUNCS)
        path = f"src/pkg/{mod}/{func}_{k % 97}.py"
        line = rng.randint(1, 900)
        thought = f"THOUGHT: step {k}: check {func}_{k} in {path} around line {line}."
        command = f"sed -n {line},{line + 20}p {path}"
        if k % 7 == 3:
            err = rng.choice(_ERRORS)
            output = (
                f"<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n"
                f'  File "{path}", line {line}, in {func}_{k}\n{err}\n</output>'
            )
        else:
            output = (
                f"<returncode>0</returncode>\n<output>\ndef {func}_{k}(value):\n"
                f"    return value * {rng.randint(2, 999)}\n</output>"
            )
        steps.append(Step(thought, command, output))
    return Session(
        f"synthetic-{n_messages}",
        "You are a helpful assistant that runs one shell command per step.",
        "Fix the failing tests in src/pkg and report what you changed.",
        steps,
    )


def text_corpus() -> dict[str, list[str]]:
    """Texts by kind (code, logs, JSON, CJK) for the token-accuracy figure.

    Code, logs and JSON come from the recorded runs; CJK text is generated from common
    characters and punctuation (the recordings hold almost none).
    """
    sessions = load_swebench()
    code: list[str] = []
    logs: list[str] = []
    for s in sessions:
        for st in s.steps:
            body = st.output
            if len(body) < 200:
                continue
            if re.search(r"^\s*(def |class |import |from \S+ import)", body, re.M):
                code.append(body)
            elif re.search(r"Traceback|Error|FAILED|passed|warning", body):
                logs.append(body)
    tau = json.loads(TAU_FILE.read_text(encoding="utf-8"))
    js: list[str] = []
    for run in tau[:80]:
        for m in run.get("traj", []):
            if m.get("role") == "tool" and isinstance(m.get("content"), str):
                c = m["content"]
                if c.startswith(("{", "[")) and len(c) > 100:
                    js.append(c)
    rng = random.Random(7)
    common = (
        "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可"
        "她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已"
        "老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力"
    )
    cjk: list[str] = []
    for _ in range(120):
        parts = []
        for _ in range(rng.randint(8, 40)):
            parts.append("".join(rng.choice(common) for _ in range(rng.randint(4, 18))))
            parts.append(rng.choice("，。、；：！？"))
        cjk.append("".join(parts))
    return {"code": code[:300], "logs": logs[:300], "json": js[:300], "cjk": cjk}
