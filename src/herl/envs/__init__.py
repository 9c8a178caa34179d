"""Goal environments for HER, their gymnasium registration, and a checker for goal envs.

Importing this module registers:

- ``herl/BitFlipping-v0``: :class:`BitFlippingEnv`; constructor arguments pass through ``gym.make`` (e.g.
  ``gym.make("herl/BitFlipping-v0", n_bits=15)``). The env truncates itself after ``max_steps``, so no
  ``TimeLimit`` is added.
- ``herl/PointReach-v0``: :class:`PointReachEnv` inside gymnasium's ``TimeLimit(50)``, like Fetch; the env's own
  limit is switched off, so ``gym.make(..., max_episode_steps=k)`` sets the episode length (see the class docstring).

:class:`ActionRepeat` applies each action for several env steps (``--set env.action_repeat=k`` on the command line);
:class:`TimeFeature` appends the share of the time limit left to the observation (``--set env.time_feature=true``);
:class:`GraspedStart` starts a share of a Fetch pick-and-place env's training episodes with the object in the gripper
(``--set env.grasped_start=p``), :class:`ContactStart` a share of a Fetch push or slide env's training episodes with the
object beside the gripper (``--set env.contact_start=p``). :func:`shared_mujoco_models` lets many Fetch envs in one
process share one MuJoCo model per task (``herl train --n-envs N`` does so); :class:`ShardedVectorEnv` splits many envs
over a few processes that step at once (``herl train --n-envs N --set vector_env=async``).
"""

from __future__ import annotations

import gymnasium

from herl.envs.action_repeat import ActionRepeat
from herl.envs.bit_flipping import BitFlippingEnv
from herl.envs.contact_start import ContactStart
from herl.envs.checks import GoalEnvError, GoalEnvWarning, check_goal_env
from herl.envs.grasped_start import GraspedStart
from herl.envs.point_reach import PointReachEnv
from herl.envs.shared_models import shared_mujoco_models
from herl.envs.sharded import ShardedVectorEnv
from herl.envs.time_feature import TimeFeature

__all__ = ["ActionRepeat", "BitFlippingEnv", "ContactStart", "GoalEnvError", "GoalEnvWarning", "GraspedStart", "PointReachEnv",
           "ShardedVectorEnv", "TimeFeature", "check_goal_env", "shared_mujoco_models"]


def _register_envs() -> None:
    # Skip ids already present, so importing twice or importlib.reload(herl.envs) neither raises nor warns.
    if "herl/BitFlipping-v0" not in gymnasium.envs.registry:
        gymnasium.register(id="herl/BitFlipping-v0", entry_point="herl.envs.bit_flipping:BitFlippingEnv")
    if "herl/PointReach-v0" not in gymnasium.envs.registry:
        gymnasium.register(
            id="herl/PointReach-v0",
            entry_point="herl.envs.point_reach:PointReachEnv",
            max_episode_steps=50,
            # gym.make keeps its own max_episode_steps argument, so the env's limit is off and TimeLimit is the one.
            kwargs={"max_episode_steps": None},
        )


_register_envs()
