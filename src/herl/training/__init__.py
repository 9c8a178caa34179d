"""Training: the shared off-policy loop, evaluation, callbacks, exploration noise and logging."""

from herl.training.base import OffPolicyAlgorithm
from herl.training.callbacks import (
    BaseCallback,
    CallbackList,
    CheckpointCallback,
    EvalCallback,
    FunctionCallback,
    StopTrainingOnRewardThreshold,
    StopTrainingOnSuccessThreshold,
)
from herl.training.evaluation import evaluate_policy
from herl.training.logger import Logger, configure
from herl.training.noise import ActionNoise, NormalActionNoise, OrnsteinUhlenbeckActionNoise

__all__ = [
    "ActionNoise",
    "BaseCallback",
    "CallbackList",
    "CheckpointCallback",
    "EvalCallback",
    "FunctionCallback",
    "Logger",
    "NormalActionNoise",
    "OffPolicyAlgorithm",
    "OrnsteinUhlenbeckActionNoise",
    "StopTrainingOnRewardThreshold",
    "StopTrainingOnSuccessThreshold",
    "configure",
    "evaluate_policy",
]
