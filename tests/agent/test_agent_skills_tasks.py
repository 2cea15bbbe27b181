from pathlib import Path

from contextfold.middleware import system_prompt_middleware
from contextfold.model import ScriptedModel, tool_reply
from contextfold.tool import Toolkit

from .agent_support import Calls, assert_valid, make_agent


def write_skill(root: Path, name: str, description: str) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\n---\nDo things.\n", encoding="utf-8"
    )


async def test_skills_join_the_system_prompt_before_middleware(tmp_path: Path) -> None:
    write_skill(tmp_path / "agent_skills", "pdf", "Split and merge PDF files.")
    write_skill(tmp_path / "kit_skills", "git", "Commit safely.")
    model = ScriptedModel(["ok"])
    agent = make_agent(
        model,
        Toolkit(skills_dir=tmp_path / "kit_skills"),
        skills_dir=tmp_path / "agent_skills",
        middleware=[system_prompt_middleware(lambda p, a: p + "\n[env]")],
    )
    await agent.reply("hi")
    system = model.requests[0].messages[0].text
    assert system.startswith("You are helpful.\n\n# Skills\n")
    assert "- git: Commit safely." in system
    assert "- pdf: Split and merge PDF files." in system
    assert system.endswith("[env]")


async def test_no_skills_leaves_the_prompt_alone() -> None:
    model = ScriptedModel(["ok"])
    await make_agent(model).reply("hi")
    assert model.requests[0].messages[0].text == "You are helpful."


async def test_task_tools_are_offered_when_enabled() -> None:
    model = ScriptedModel(["ok"])
    await make_agent(model, tasks_enabled=True).reply("hi")
    assert model.requests[0].tool_names == [
        "Read",
        "Grep",
        "Glob",
        "Search",
        "TaskCreate",
        "TaskUpdate",
        "TaskList",
    ]


async def test_tasks_are_kept_through_tools_and_reach_the_engine() -> None:
    model = ScriptedModel(
        [
            tool_reply(
                ("TaskCreate", {"subject": "Read the logs"}),
                ("TaskCreate", {"subject": "Fix the bug", "description": "in parser.py"}),
            ),
            tool_reply(("TaskUpdate", {"task_id": "1", "status": "in_progress"})),
            tool_reply(("TaskList", {})),
            tool_reply(("TaskUpdate", {"task_id": "1", "status": "completed"})),
            "All done.",
        ]
    )
    agent = make_agent(model, tasks_enabled=True)
    calls = Calls(agent)
    await agent.reply("plan it")
    assert [(t.id, t.subject, t.status) for t in agent.tasks.all()] == [
        ("1", "Read the logs", "completed"),
        ("2", "Fix the bug", "pending"),
    ]
    assert [c["task_in_progress"] for c in calls.prepare] == [False, False, True, True, False]
    listing = model.requests[3].messages[-1].tool_results[0].text()
    assert listing == "[in_progress] #1 Read the logs\n[pending] #2 Fix the bug: in parser.py"
    assert_valid(model)


async def test_updating_an_unknown_task_is_an_error_result() -> None:
    model = ScriptedModel(
        [tool_reply(("TaskUpdate", {"task_id": "9", "status": "completed"})), "ok"]
    )
    await make_agent(model, tasks_enabled=True).reply("go")
    result = model.requests[1].messages[-1].tool_results[0]
    assert result.is_error
    assert "no task with id '9'" in result.text()


async def test_invalid_task_status_is_rejected_by_schema() -> None:
    model = ScriptedModel([tool_reply(("TaskUpdate", {"task_id": "1", "status": "done"})), "ok"])
    await make_agent(model, tasks_enabled=True).reply("go")
    result = model.requests[1].messages[-1].tool_results[0]
    assert result.is_error
    assert "invalid arguments for TaskUpdate" in result.text()


async def test_skills_are_read_once_per_reply(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill(root, "pdf", "Split and merge PDF files.")
    toolkit = Toolkit()

    @toolkit.register
    def add_skill() -> str:
        """Write a new skill."""
        write_skill(root, "zip", "Pack files.")
        return "written"

    model = ScriptedModel([tool_reply(("add_skill", {})), "done", "again"])
    agent = make_agent(model, toolkit, skills_dir=root)
    await agent.reply("go")
    during = [r.messages[0].text for r in model.requests]
    assert all("zip" not in text for text in during)
    await agent.reply("next")
    assert "zip" in model.requests[-1].messages[0].text
