"""herl: goal-conditioned reinforcement learning with Hindsight Experience Replay."""

__version__ = "0.1.0"

from herl import envs  # noqa: E402  (registers herl/BitFlipping-v0 and herl/PointReach-v0)
from herl.algorithms import DDPG, DQN, SAC, TD3, TQC, CrossQ  # noqa: E402
from herl.buffers import (  # noqa: E402
    KEY_TO_GOAL_STRATEGY,
    DictReplayBufferSamples,
    GoalSelectionStrategy,
    HerReplayBuffer,
    NStepReplayBuffer,
    ReplayBuffer,
    ReplayBufferSamples,
)
from herl.compat import HER, HerReplayStorage, HindsightReplayBuffer  # noqa: E402
from herl.training import (  # noqa: E402
    ActionNoise,
    BaseCallback,
    CallbackList,
    CheckpointCallback,
    EvalCallback,
    NormalActionNoise,
    OrnsteinUhlenbeckActionNoise,
    StopTrainingOnRewardThreshold,
    StopTrainingOnSuccessThreshold,
    configure,
    evaluate_policy,
)

__all__ = [
    "CrossQ",
    "DDPG",
    "DQN",
    "KEY_TO_GOAL_STRATEGY",
    "SAC",
    "TD3",
    "TQC",
    "ActionNoise",
    "BaseCallback",
    "CallbackList",
    "CheckpointCallback",
    "DictReplayBufferSamples",
    "HER",
    "HerReplayStorage",
    "HindsightReplayBuffer",
    "EvalCallback",
    "GoalSelectionStrategy",
    "HerReplayBuffer",
    "NStepReplayBuffer",
    "NormalActionNoise",
    "OrnsteinUhlenbeckActionNoise",
    "ReplayBuffer",
    "ReplayBufferSamples",
    "StopTrainingOnRewardThreshold",
    "StopTrainingOnSuccessThreshold",
    "configure",
    "envs",
    "evaluate_policy",
    "__version__",
]
