"""Grasped start: a share of training episodes begin with the object already held in the gripper.

Learning to lift is FetchPickAndPlace's bottleneck: a policy that never closes the gripper on the block and raises
it never sees the reward for goals in the air, and HER cannot relabel a lift that did not happen. Andrychowicz et
al. 2017 (HER) start half of their pick-and-place training episodes from a recorded state in which the box is
already grasped. :class:`GraspedStart` does that on gymnasium-robotics' MuJoCo Fetch envs: after the env's own reset
(object placed, goal drawn), with probability ``share`` it puts the object between the closed fingers at the
gripper's start position. The policy then has to keep the gripper closed to keep the object, and it sees carried
blocks reach goals in the air from its first episodes.

Use it on training envs only: evaluation measures the task as defined, from the env's own start states. herl's
command line does so for ``--set env.grasped_start=p`` (training envs wrapped, evaluation envs never).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

FINGER_JOINTS = ("robot0:l_gripper_finger_joint", "robot0:r_gripper_finger_joint")
OBJECT_JOINT = "object0:joint"


def fetch_object_env(env: gym.Env, wrapper: str, share: float, starts: str, examples: str) -> Any:
    """The unwrapped env under a start aid, after checking the share (0 to 1) and that it is a gymnasium-robotics
    MuJoCo Fetch env (with the attributes the aids use); raises ValueError naming ``wrapper`` otherwise."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
        raise ValueError(f"{wrapper}'s share is the probability that an episode starts {starts}, a number from 0 to "
                         f"1; got {share!r}")
    inner = env.unwrapped
    missing = [name for name in ("model", "data", "_utils", "_mujoco", "has_object", "block_gripper")
               if not hasattr(inner, name)]
    if missing:
        raise ValueError(f"{wrapper} needs a gymnasium-robotics MuJoCo Fetch env ({examples}); "
                         f"{type(inner).__name__} has no {', '.join(missing)}")
    return inner


class GraspedStart(gym.Wrapper):
    """Start a ``share`` of episodes (0 to 1) with the object held in the gripper, in a Fetch env with an object and
    a gripper that moves (FetchPickAndPlace; not FetchPush or FetchSlide, whose gripper is blocked shut).

    The coin is drawn from the env's own ``np_random`` after its reset, so an episode replays exactly from the env's
    seed or generator state. ``info["grasped_start"]`` tells whether the episode started grasped.
    """

    def __init__(self, env: gym.Env, share: float = 0.5) -> None:
        super().__init__(env)
        inner = fetch_object_env(env, "GraspedStart", share, "grasped", "FetchPickAndPlace-v4")
        if not inner.has_object or inner.block_gripper:
            raise ValueError(f"GraspedStart needs a Fetch env with an object and a gripper that opens and closes "
                             f"(FetchPickAndPlace); {env.spec.id if env.spec else type(inner).__name__} "
                             f"{'has no object' if not inner.has_object else 'keeps its gripper blocked shut'}")
        self.share = float(share)
        model = inner.model
        mujoco = inner._mujoco
        # The object's half width along the fingers' axis: the fingers close to touch its sides.
        geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "object0")
        self.half_width = float(model.geom_size[geom][1]) if geom >= 0 else 0.025

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        inner = self.env.unwrapped
        grasped = bool(inner.np_random.uniform() < self.share)
        if grasped:
            self._grasp(inner)
            obs = inner._get_obs()
        return obs, {**info, "grasped_start": grasped}

    def _grasp(self, inner: Any) -> None:
        """The object at the grip site, still, the two fingers closed on its sides."""
        utils, model, data = inner._utils, inner.model, inner.data
        grip = utils.get_site_xpos(model, data, "robot0:grip").copy()
        qpos = utils.get_joint_qpos(model, data, OBJECT_JOINT).copy()
        qpos[:3] = grip
        qpos[3:] = (1.0, 0.0, 0.0, 0.0)
        utils.set_joint_qpos(model, data, OBJECT_JOINT, qpos)
        utils.set_joint_qvel(model, data, OBJECT_JOINT, np.zeros(6))
        for joint in FINGER_JOINTS:
            utils.set_joint_qpos(model, data, joint, self.half_width)
            utils.set_joint_qvel(model, data, joint, 0.0)
        inner._mujoco.mj_forward(model, data)
