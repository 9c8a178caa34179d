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
from herl.errors import ArchiveError  # noqa: E402
from herl.training import (  # noqa: E402
    ActionNoise,
    BaseCallback,
    CallbackList,
    CheckpointCallback,
    ConvertCallback,
    EvalCallback,
    EventCallback,
    EveryNTimesteps,
    LogEveryNTimesteps,
    NormalActionNoise,
    OffPolicyAlgorithm,
    OrnsteinUhlenbeckActionNoise,
    ProgressBarCallback,
    StopTrainingOnMaxEpisodes,
    StopTrainingOnNoModelImprovement,
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
    "ArchiveError",
    "BaseCallback",
    "CallbackList",
    "CheckpointCallback",
    "ConvertCallback",
    "DictReplayBufferSamples",
    "HER",
    "HerReplayStorage",
    "HindsightReplayBuffer",
    "EvalCallback",
    "EventCallback",
    "EveryNTimesteps",
    "GoalSelectionStrategy",
    "HerReplayBuffer",
    "LogEveryNTimesteps",
    "NStepReplayBuffer",
    "NormalActionNoise",
    "OffPolicyAlgorithm",
    "OrnsteinUhlenbeckActionNoise",
    "ProgressBarCallback",
    "ReplayBuffer",
    "ReplayBufferSamples",
    "StopTrainingOnMaxEpisodes",
    "StopTrainingOnNoModelImprovement",
    "StopTrainingOnRewardThreshold",
    "StopTrainingOnSuccessThreshold",
    "configure",
    "envs",
    "evaluate_policy",
    "__version__",
]
