"""SFT: chat transcripts of successful solver attempts, one JSON object a line."""

from __future__ import annotations

from typing import Any, Iterator

from ...store.artifact import Artifact

def sft_examples(artifact: Artifact) -> Iterator[dict[str, Any]]:
    """Chat transcripts of the artifact's successful solver attempts."""
    from ...store import trajectory as trajectories
    from ...store.attempts import scored_attempts

    for attempt in scored_attempts(artifact):
        if not attempt.passed:
            continue
        traj = trajectories.read_or_none(attempt.trajectory)  # none, or not an ssrkit.trajectory/1 file: skipped
        if not traj or not traj.get("messages"):
            continue
        yield {
            "messages": traj["messages"],
            "artifact": artifact.id,
            "attempt": attempt.name,
            "model": traj.get("model"),
            "exit_status": traj.get("exit_status"),
        }
