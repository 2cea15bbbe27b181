"""Tools and skills: functions and tool objects the agent can call, and how calls are run."""

from ._readback import readback_tools
from ._skills import Skill, load_skills, parse_front_matter
from ._tool import FunctionTool, Tool, ToolOutput, to_tool_output
from ._toolkit import Toolkit, error_result, run_tool

__all__ = [
    "FunctionTool",
    "Skill",
    "Tool",
    "ToolOutput",
    "Toolkit",
    "error_result",
    "load_skills",
    "parse_front_matter",
    "readback_tools",
    "run_tool",
    "to_tool_output",
]
