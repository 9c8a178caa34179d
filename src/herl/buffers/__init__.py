"""The HER engine: episode storage, goal selection and relabeling, plain replay."""

from herl.buffers.her import HerReplayBuffer
from herl.buffers.replay import NStepReplayBuffer, ReplayBuffer
from herl.buffers.samples import DictReplayBufferSamples, ReplayBufferSamples
from herl.buffers.storage import EpisodeStorage, FieldSpec
from herl.buffers.strategies import KEY_TO_GOAL_STRATEGY, GoalSelectionStrategy

__all__ = [
    "KEY_TO_GOAL_STRATEGY",
    "DictReplayBufferSamples",
    "EpisodeStorage",
    "FieldSpec",
    "GoalSelectionStrategy",
    "HerReplayBuffer",
    "NStepReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferSamples",
]
