"""Agents: the model client, the agent loop both roles share, the tool-call protocol, trajectories (SPEC §5).

Only this package talks to a model. The role drivers live with their stages: the injector's in
`ssrkit.inject.llm` (`run_llm_injection`), the solver's in `ssrkit.solve.solvers` (`run_llm_solver`). Public API:

    ModelClient(base_url, model, api_key_env=..., sampling=Sampling(...), want_token_ids=...)
    AgentConfig(max_turns, command_timeout, context_tokens, wall_clock_s, max_format_errors, output_chars)
    Agent(client, sandbox, config).run(Trajectory(...), system, task)
"""

from .client import Completion, ContextLengthError, ModelClient, ModelError, Sampling
from .loop import Agent, AgentConfig
from .tools import FormatError, ToolCall, parse_tool_call
from .prompts import STRATEGIES, injector_prompts, solver_system, solver_task
from .trajectory import EXIT_STATUSES, FORMAT, Trajectory

__all__ = [
    "Agent", "AgentConfig", "Completion", "ContextLengthError", "EXIT_STATUSES", "FORMAT", "FormatError",
    "ModelClient", "ModelError", "STRATEGIES", "Sampling", "ToolCall", "Trajectory", "injector_prompts",
    "parse_tool_call", "solver_system", "solver_task",
]
