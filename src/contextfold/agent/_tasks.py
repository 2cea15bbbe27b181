"""A minimal task list the agent keeps through its TaskCreate/TaskUpdate/TaskList tools."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypeAlias

from pydantic import BaseModel

from ..tool import FunctionTool

__all__ = ["Task", "TaskList", "TaskStatus"]

TaskStatus: TypeAlias = Literal["pending", "in_progress", "completed", "cancelled"]


class Task(BaseModel):
    """One planned piece of work."""

    id: str
    subject: str
    description: str = ""
    status: TaskStatus = "pending"


class TaskList:
    """The agent's plan. ``in_progress`` tells the context engine work is mid-way."""

    def __init__(self, tasks: Iterable[Task] = ()) -> None:
        self._tasks: dict[str, Task] = {}
        self._next = 1
        self.load(tasks)

    def load(self, tasks: Iterable[Task]) -> None:
        """Replace every task (used when a session is restored)."""
        self._tasks = {t.id: t.model_copy() for t in tasks}
        numeric = [int(i) for i in self._tasks if i.isdigit()]
        self._next = max(numeric, default=0) + 1

    def create(self, subject: str, description: str = "") -> Task:
        """Add a pending task and return it."""
        task = Task(id=str(self._next), subject=subject, description=description)
        self._next += 1
        self._tasks[task.id] = task
        return task

    def update(
        self,
        task_id: str,
        *,
        status: TaskStatus | None = None,
        subject: str | None = None,
        description: str | None = None,
    ) -> Task:
        """Change a task; ``KeyError`` naming the known ids if there is no such task."""
        if task_id not in self._tasks:
            known = ", ".join(self._tasks) or "none"
            raise KeyError(f"no task with id {task_id!r}; known ids: {known}")
        changes = {
            k: v
            for k, v in (("status", status), ("subject", subject), ("description", description))
            if v is not None
        }
        task = self._tasks[task_id].model_copy(update=changes)
        self._tasks[task_id] = task
        return task

    def all(self) -> list[Task]:
        """Every task, in creation order."""
        return list(self._tasks.values())

    @property
    def in_progress(self) -> bool:
        """Whether some task is marked ``in_progress``."""
        return any(t.status == "in_progress" for t in self._tasks.values())

    def render(self) -> str:
        """The list as the model sees it."""
        if not self._tasks:
            return "No tasks."
        return "\n".join(
            f"[{t.status}] #{t.id} {t.subject}" + (f": {t.description}" if t.description else "")
            for t in self._tasks.values()
        )

    def tools(self) -> list[FunctionTool]:
        """The TaskCreate, TaskUpdate and TaskList tools, bound to this list."""

        async def task_create(subject: str, description: str = "") -> str:
            """Add a task to your plan. Use it to break multi-step work into steps.

            Args:
                subject: Short imperative title of the task.
                description: Details needed to do it.
            """
            task = self.create(subject, description)
            return f"Created task #{task.id}: {task.subject}"

        async def task_update(
            task_id: str,
            status: TaskStatus | None = None,
            subject: str | None = None,
            description: str | None = None,
        ) -> str:
            """Change a task: mark it in_progress when you start it, completed when done.

            Args:
                task_id: The id TaskCreate returned.
                status: New status.
                subject: New title.
                description: New details.
            """
            task = self.update(task_id, status=status, subject=subject, description=description)
            return f"Task #{task.id} is now [{task.status}] {task.subject}"

        async def task_list() -> str:
            """Show every task with its id and status."""
            return self.render()

        return [
            FunctionTool(task_create, name="TaskCreate"),
            FunctionTool(task_update, name="TaskUpdate"),
            FunctionTool(task_list, name="TaskList"),
        ]
