"""ssrkit episodes as environments (docs/env.md): the solver's and the injector's episodes in process.

    with SolverEpisode(artifact_dir, RepoSource.local(repo)) as ep:
        messages = ep.reset()                      # system + task, as `ssrkit solve --solver llm` sends them
        while True:
            r = ep.step(policy(messages))          # the model's reply: one tool call
            if r.done: break                       # r.reward: the hardened grade (+1 / -1), r.info: the verdict
            messages += [{"role": "assistant", "content": ...}, *r.messages]

`InjectorEpisode` on a repository; its reward is settled for the group by `injector_group_rewards` once its
artifacts' solve attempts are known. The OpenEnv server (`ssrkit env serve`, extra `env`) is `ssrkit.env.server`;
the TRL adapter (extra `trl`) `ssrkit.env.trl`; the SkyRL-gym adapter `ssrkit.env.skyrl`.
"""

from .episode import Episode, StepResult
from .injector import InjectorEpisode, injector_group_rewards
from .solver import SolverEpisode

__all__ = ["Episode", "InjectorEpisode", "SolverEpisode", "StepResult", "injector_group_rewards"]
