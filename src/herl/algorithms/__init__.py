"""Off-policy algorithms: each file holds one algorithm's networks, losses and update."""

from herl.algorithms.ddpg import DDPG, DDPGConfig
from herl.algorithms.dqn import DQN, DQNConfig
from herl.algorithms.sac import SAC, SACConfig
from herl.algorithms.td3 import TD3, TD3Config

ALGORITHMS = {cls.__name__: cls for cls in (DQN, DDPG, TD3, SAC)}

__all__ = ["ALGORITHMS", "DDPG", "DDPGConfig", "DQN", "DQNConfig", "SAC", "SACConfig", "TD3", "TD3Config"]
