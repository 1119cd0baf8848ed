"""Agents: the model client, the agent loop both roles share, trajectories, and the role drivers (SPEC §5).

Only this package talks to a model. Public API:

    ModelClient(base_url, model, api_key_env=..., sampling=Sampling(...), want_token_ids=...)
    AgentConfig(max_turns, command_timeout, context_tokens, wall_clock_s, max_format_errors, output_chars)
    Agent(client, sandbox, config).run(Trajectory(...), system, task)
    run_llm_injection(sandbox, client, out_dir=..., strategy=..., thresholds=..., seed=...) -> InjectionResult
"""

from .client import Completion, ContextLengthError, ModelClient, ModelError, Sampling
from .injector import (DEFAULT_MIXTURE, InjectionResult, Thresholds, choose_strategy, injection_summary,
                       run_llm_injection)
from .loop import Agent, AgentConfig
from .tools import FormatError, ToolCall, parse_tool_call
from .prompts import STRATEGIES, injector_prompts, solver_system, solver_task
from .trajectory import EXIT_STATUSES, FORMAT, Trajectory

__all__ = [
    "Agent", "AgentConfig", "Completion", "ContextLengthError", "DEFAULT_MIXTURE", "EXIT_STATUSES", "FORMAT",
    "FormatError", "InjectionResult", "ModelClient", "ModelError", "STRATEGIES", "Sampling", "Thresholds",
    "ToolCall", "Trajectory", "choose_strategy", "injection_summary", "injector_prompts", "parse_tool_call",
    "run_llm_injection", "solver_system", "solver_task",
]
