"""Agents: the model client, the agent loop both roles share, trajectories, and the role drivers (SPEC §5)."""

from .client import Completion, ContextLengthError, ModelClient, ModelError, Sampling
from .loop import Agent, AgentConfig, FormatError, ToolCall, parse_tool_call
from .trajectory import EXIT_STATUSES, FORMAT, Trajectory

__all__ = [
    "Agent", "AgentConfig", "Completion", "ContextLengthError", "EXIT_STATUSES", "FORMAT", "FormatError",
    "ModelClient", "ModelError", "Sampling", "ToolCall", "Trajectory", "parse_tool_call",
]
