"""Scripted experts for the Fetch tasks of gymnasium-robotics: demonstrations without a trained agent.

Each expert is a function of one observation dict (no memory), so it works from any state, e.g. after a missed
grasp. They read positions from the observation (gymnasium-robotics ``fetch_env.py``): ``observation[0:3]`` is
the gripper's position, ``[3:6]`` the object's, ``[6:9]`` object minus gripper, ``[9:11]`` the two finger
openings; ``desired_goal`` is where the object (FetchReach: the gripper) must go. An action moves the gripper
by up to 5 cm a step per axis (``action[:3] * 0.05``) and opens (+1) or closes (-1) the fingers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

GAIN = 10.0
"""Proportional gain: an action of ``GAIN * error`` moves the gripper by half the error per step (capped at 5 cm)."""


def _move(delta: np.ndarray, gripper: float) -> np.ndarray:
    return np.append(np.clip(GAIN * delta, -1.0, 1.0), gripper).astype(np.float32)


def fetch_reach_expert(obs: Mapping[str, np.ndarray]) -> np.ndarray:
    """FetchReach: move the gripper straight to the goal."""
    return _move(obs["desired_goal"] - obs["observation"][0:3], 0.0)


def fetch_pick_and_place_expert(obs: Mapping[str, np.ndarray]) -> np.ndarray:
    """FetchPickAndPlace: above the block with open fingers, down, close, then carry the block to the goal."""
    o = obs["observation"]
    grip, block, rel, width = o[0:3], o[3:6], o[6:9], o[9] + o[10]
    horizontal = np.linalg.norm(rel[:2])
    in_hand = horizontal < 0.02 and abs(rel[2]) < 0.02
    if in_hand and width < 0.06:  # fingers closed on the block (open fingers are ~0.1 apart, the block is 0.05 wide)
        return _move(obs["desired_goal"] - block, -1.0)
    if in_hand and horizontal < 0.01 and abs(rel[2]) < 0.01:
        return _move(np.zeros(3), -1.0)  # close, holding still
    if horizontal > 0.01:  # over the block first, high enough not to push it
        return _move(np.array([rel[0], rel[1], block[2] + 0.05 - grip[2]]), 1.0)
    return _move(rel, 1.0)  # straight down onto it, fingers open


def fetch_push_expert(obs: Mapping[str, np.ndarray]) -> np.ndarray:
    """FetchPush (fingers blocked): behind the block as seen from the goal, at height, down, then push it along
    the line to the goal, correcting sideways drift."""
    o = obs["observation"]
    grip, block, goal = o[0:3], o[3:6], obs["desired_goal"]
    to_goal = goal[:2] - block[:2]
    distance = np.linalg.norm(to_goal)
    if distance < 1e-3:
        return _move(np.zeros(3), -1.0)
    u = to_goal / distance
    offset = grip[:2] - block[:2]
    along = offset @ u  # negative: the gripper is behind the block
    side = offset - along * u
    behind = block[:2] - 0.06 * u
    height = block[2] - grip[2]
    if along < -0.03 and np.linalg.norm(side) < 0.01 and abs(height) < 0.02:
        push = goal[:2] - 0.05 * u - grip[:2]  # the gripper stops where the block sits on the goal
        return _move(np.array([*(push - 2.0 * side), height]), -1.0)
    if np.linalg.norm(behind - grip[:2]) < 0.01:
        return _move(np.array([*(behind - grip[:2]), height]), -1.0)  # at the spot behind: go down
    if grip[2] < block[2] + 0.04:  # up before moving across, not to knock the block
        return _move(np.array([0.0, 0.0, block[2] + 0.06 - grip[2]]), -1.0)
    return _move(np.array([*(behind - grip[:2]), block[2] + 0.06 - grip[2]]), -1.0)


SCRIPTED_EXPERTS: dict[str, Callable[[Mapping[str, np.ndarray]], np.ndarray]] = {
    "FetchReach": fetch_reach_expert,
    "FetchPush": fetch_push_expert,
    "FetchPickAndPlace": fetch_pick_and_place_expert,
}


def scripted_expert(env_id: str) -> Callable[[Mapping[str, np.ndarray]], np.ndarray]:
    """The scripted expert for a Fetch env id (``FetchPickAndPlace-v4``, ``FetchPushDense-v4``, ...)."""
    name = env_id.rpartition(":")[2].rpartition("/")[2].split("-")[0].removesuffix("Dense")
    try:
        return SCRIPTED_EXPERTS[name]
    except KeyError:
        raise ValueError(f"no scripted expert for {env_id!r}: herl has them for {sorted(SCRIPTED_EXPERTS)}; "
                         "record demonstrations from a trained model instead") from None


def run_expert(expert: Any, env: Any, *, n_episodes: int, seed: int = 0) -> float:
    """Success rate of ``expert`` (a callable of one observation) over ``n_episodes`` episodes of ``env``."""
    successes = []
    obs, info = env.reset(seed=seed)
    for _ in range(n_episodes):
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(expert(obs))
            done = terminated or truncated
        successes.append(float(info.get("is_success", 0.0)))
        obs, info = env.reset()
    return float(np.mean(successes))
