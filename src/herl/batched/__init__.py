"""Batched goal envs on one device, their HER buffer and their training loop.

A batched goal env steps thousands of copies of a goal env at once, as PyTorch tensors on one device (the interface
that GPU simulators such as MuJoCo MJX or Warp implement), and restarts ended episodes itself. Its rollouts, the HER
buffer that stores and relabels them, and the updates all stay on that device, so a step of every env costs a few
tensor operations rather than a Python call per env.

- :class:`BatchedGoalEnv` and :class:`BatchedStep`: the interface;
- :class:`BatchedPointReach` and :class:`BatchedBitFlipping`: the batched twins of herl's PointReach and bit flipping
  envs, giving the same numbers to the bit; :class:`BatchedPush`: a pusher moving a puck to a goal in the plane,
  HER's object-goal setting without a physics engine; :class:`MJXPush`: a cube pushed over a table in MuJoCo MJX
  (contacts and friction, every env one MJX simulation; needs ``mujoco-mjx``); :class:`MJXFetchPush`: FetchPush with
  Fetch's arm in MuJoCo MJX (gymnasium-robotics' model; FetchPush's observations, starts and goals);
- :func:`check_batched_goal_env`: checks that an env keeps the interface's promises;
- :class:`BatchedHerBuffer`: HER replay on the device, fed one step of every env at a time;
- :class:`BatchedTrainer`: trains any herl algorithm on a batched env, and saves and resumes the whole run.
"""

from __future__ import annotations

from herl.batched.bit_flipping import BatchedBitFlipping
from herl.batched.buffer import BatchedHerBuffer
from herl.batched.checks import check_batched_goal_env
from herl.batched.env import BatchedGoalEnv, BatchedStep
from herl.batched.mjx_fetch import MJXFetchPush
from herl.batched.mjx_push import MJXPush
from herl.batched.point_reach import BatchedPointReach
from herl.batched.push import BatchedPush
from herl.batched.trainer import BatchedSettings, BatchedTrainer

__all__ = [
    "BatchedBitFlipping",
    "BatchedGoalEnv",
    "BatchedHerBuffer",
    "BatchedPointReach",
    "BatchedPush",
    "BatchedSettings",
    "BatchedStep",
    "BatchedTrainer",
    "MJXFetchPush",
    "MJXPush",
    "check_batched_goal_env",
]
