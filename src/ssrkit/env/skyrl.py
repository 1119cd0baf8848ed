"""SkyRL-gym's text environment over `SolverEpisode` (extra `skyrl`: skyrl-gym; docs/env.md).

    import skyrl_gym, ssrkit.env.skyrl
    ssrkit.env.skyrl.register()                                   # id "ssrkit-solver"
    env = skyrl_gym.make("ssrkit-solver", env_config={}, extras={"artifact": DIR, "repo": REPO})

A dataset row's `extras` name the artifact (and its repository when artifact.toml has none). The row's prompt
is replaced by ssrkit's own system and task message (`init`), so the model sees what `ssrkit solve` shows.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from ..agents import AgentConfig
from ..store.source import RepoSource
from .solver import SolverEpisode

ENV_ID = "ssrkit-solver"


class SolverTextEnv(BaseTextEnv):
    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        extras = dict(extras or {})
        config = AgentConfig(max_turns=int(extras.get("max_turns", AgentConfig.max_turns)))
        source = RepoSource.local(extras["repo"]) if extras.get("repo") else None
        self.episode = SolverEpisode(extras["artifact"], source, config=config)
        self.max_turns = config.max_turns

    def init(self, prompt: Any) -> tuple[list[dict[str, str]], dict[str, Any]]:
        return self.episode.reset(), {"artifact": self.episode.artifact.id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        r = self.episode.step(action)
        return BaseTextEnvStepOutput(observations=r.messages, reward=r.reward if r.reward is not None else 0.0,
                                     done=r.done, metadata=r.info, postprocessed_action=None)

    def close(self) -> None:
        self.episode.close()


def register() -> None:
    """Make `skyrl_gym.make(ENV_ID, ...)` build a `SolverTextEnv` (once per process)."""
    import skyrl_gym

    if ENV_ID not in skyrl_gym.envs.registration.registry:
        skyrl_gym.register(id=ENV_ID, entry_point=f"{__name__}:SolverTextEnv")
