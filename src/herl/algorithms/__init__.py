"""Off-policy algorithms: each file holds one algorithm's networks, losses and update."""

from herl.algorithms.crossq import CrossQ, CrossQConfig
from herl.algorithms.ddpg import DDPG, DDPGConfig
from herl.algorithms.dqn import DQN, DQNConfig
from herl.algorithms.sac import SAC, SACConfig
from herl.algorithms.td3 import TD3, TD3Config
from herl.algorithms.tqc import TQC, TQCConfig

from herl.training.base import ALGORITHMS_BY_NAME

ALGORITHMS = {cls.__name__: cls for cls in (DQN, DDPG, TD3, SAC, TQC, CrossQ)}
ALGORITHMS_BY_NAME.update(ALGORITHMS)  # model files name their algorithm; OffPolicyAlgorithm.load resolves it there

__all__ = ["ALGORITHMS", "CrossQ", "CrossQConfig", "DDPG", "DDPGConfig", "DQN", "DQNConfig", "SAC", "SACConfig", "TD3", "TD3Config", "TQC", "TQCConfig"]
