"""Tools and skills: functions and tool objects the agent can call, and how calls are run."""

from ._readback import readback_tools
from ._skills import Skill, load_skills, parse_front_matter, skills_prompt
from ._tool import FunctionTool, Tool, ToolOutput, to_tool_output
from ._toolkit import SpecCache, Toolkit, error_result, run_tool

__all__ = [
    "FunctionTool",
    "Skill",
    "SpecCache",
    "Tool",
    "ToolOutput",
    "Toolkit",
    "error_result",
    "load_skills",
    "parse_front_matter",
    "readback_tools",
    "run_tool",
    "skills_prompt",
    "to_tool_output",
]
