"""The one error type of `ssrkit.train`: a problem the user can act on (bad input, missing dependency)."""

from ..errors import SsrkitError


class TrainError(SsrkitError):
    """A user-facing training error. The CLI prints its message on one line and exits with code 2."""


class NothingToTrain(TrainError):
    """The rollouts hold nothing to learn from (no trajectories with rewards, or only zero-variance groups).

    `ssrkit train --allow-empty` treats it as a finished no-op, so a self-play round whose solver solved
    everything (or nothing) keeps its policy instead of stopping the run."""
