"""herl: goal-conditioned reinforcement learning with Hindsight Experience Replay."""

from herl import envs  # registers herl/BitFlipping-v0 and herl/PointReach-v0
from herl.buffers import (
    KEY_TO_GOAL_STRATEGY,
    DictReplayBufferSamples,
    GoalSelectionStrategy,
    HerReplayBuffer,
    ReplayBuffer,
    ReplayBufferSamples,
)

__version__ = "0.1.0"

__all__ = [
    "KEY_TO_GOAL_STRATEGY",
    "DictReplayBufferSamples",
    "GoalSelectionStrategy",
    "HerReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferSamples",
    "envs",
    "__version__",
]
