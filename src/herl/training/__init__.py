"""Training: the shared off-policy loop, evaluation, callbacks, exploration noise and logging."""

from herl.training.base import OffPolicyAlgorithm
from herl.training.callbacks import (
    BaseCallback,
    CallbackList,
    CheckpointCallback,
    ConvertCallback,
    EvalCallback,
    EventCallback,
    EveryNTimesteps,
    ForeignCallback,
    FunctionCallback,
    LogEveryNTimesteps,
    ProgressBarCallback,
    StopTrainingOnMaxEpisodes,
    StopTrainingOnNoModelImprovement,
    StopTrainingOnRewardThreshold,
    StopTrainingOnSuccessThreshold,
)
from herl.training.envs import VecEnv
from herl.training.evaluation import evaluate_policy
from herl.training.logger import Logger, configure
from herl.training.noise import ActionNoise, NormalActionNoise, OrnsteinUhlenbeckActionNoise

__all__ = [
    "ActionNoise",
    "BaseCallback",
    "CallbackList",
    "CheckpointCallback",
    "ConvertCallback",
    "EvalCallback",
    "EventCallback",
    "EveryNTimesteps",
    "ForeignCallback",
    "FunctionCallback",
    "LogEveryNTimesteps",
    "Logger",
    "NormalActionNoise",
    "OffPolicyAlgorithm",
    "OrnsteinUhlenbeckActionNoise",
    "ProgressBarCallback",
    "StopTrainingOnMaxEpisodes",
    "StopTrainingOnNoModelImprovement",
    "StopTrainingOnRewardThreshold",
    "StopTrainingOnSuccessThreshold",
    "VecEnv",
    "configure",
    "evaluate_policy",
]
