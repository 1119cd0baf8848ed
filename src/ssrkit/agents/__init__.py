"""Agents: the model client, the agent loop both roles share, trajectories, and the role drivers (SPEC §5)."""

from .client import Completion, ContextLengthError, ModelClient, ModelError, Sampling

__all__ = ["Completion", "ContextLengthError", "ModelClient", "ModelError", "Sampling"]
