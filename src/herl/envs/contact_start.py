"""Contact start: a share of training episodes begin with the object right beside the gripper.

FetchPush's and FetchSlide's reward depends on the object alone. Until the gripper first touches it, every stored
transition's achieved goal is the object's start position, HER's relabeled goals all say "leave it there", and the
critic learns nothing about moving it: a run spends its first tens of thousands of env steps in that phase, and how
long varies between seeds by as much (docs/benchmarks.md, FetchPush §7 and §16). :class:`ContactStart` shortens it:
after the env's own reset (object placed, goal drawn), with probability ``share`` it moves the object next to the
gripper, at the gripper's height, on a side drawn uniformly, a few millimetres short of touching. Almost any action
towards it then moves it, and HER relabels those moves from the first episodes on. It is to pushing what
:class:`~herl.envs.GraspedStart` is to pick-and-place: a reset distribution that makes the hard-to-find event common,
with the goal and the task unchanged.

Use it on training envs only: evaluation measures the task from the env's own start states. herl's command line does
so for ``--set env.contact_start=p`` (training envs wrapped, evaluation envs never).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from herl.envs.grasped_start import OBJECT_JOINT, fetch_object_env

GAP = 0.005
"""Clearance, in metres, between the object and the nearest part of the robot at the start."""


class ContactStart(gym.Wrapper):
    """Start a ``share`` of episodes (0 to 1) with the object beside the gripper, in a Fetch env whose gripper is
    blocked shut and moves at the object's height (FetchPush, FetchSlide; for FetchPickAndPlace see
    :class:`~herl.envs.GraspedStart`).

    The coin and the side are drawn from the env's own ``np_random`` after its reset, so an episode replays exactly
    from the env's seed or generator state. ``info["contact_start"]`` tells whether the episode started so.
    """

    def __init__(self, env: gym.Env, share: float = 0.5) -> None:
        super().__init__(env)
        inner = fetch_object_env(env, "ContactStart", share, "with the object beside the gripper",
                                 "FetchPush-v4, FetchSlide-v4")
        name = env.spec.id if env.spec else type(inner).__name__
        if not inner.has_object:
            raise ValueError(f"ContactStart needs a Fetch env with an object to push (FetchPush, FetchSlide); "
                             f"{name} has none")
        if not inner.block_gripper:
            raise ValueError(f"ContactStart is for Fetch envs whose gripper is blocked shut and moves at the object's "
                             f"height (FetchPush, FetchSlide); {name}'s gripper opens and starts above the object: "
                             f"use env.grasped_start=p (herl.envs.GraspedStart) there")
        self.share = float(share)
        mujoco, model = inner._mujoco, inner.model
        self._object_body = model.body(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "object0")).id
        self._object_geoms = np.flatnonzero(model.geom_bodyid == self._object_body)
        # Geoms of the robot: those of bodies whose name starts with "robot0:"; narrowed at the first placement to
        # those near the grip site (the only ones the object can come near).
        self._robot_geoms = np.array([g for g in range(model.ngeom)
                                      if (mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, int(model.geom_bodyid[g]))
                                          or "").startswith("robot0:")])
        self._narrowed = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        inner = self.env.unwrapped
        contact = bool(inner.np_random.uniform() < self.share)
        if contact:
            angle = float(inner.np_random.uniform(0.0, 2.0 * np.pi))
            self._place(inner, np.array([np.cos(angle), np.sin(angle)]))
            obs = inner._get_obs()
        return obs, {**info, "contact_start": contact}

    def _distance_to_robot(self, inner: Any) -> float:
        """The smallest signed distance from the object's geoms to the robot's (negative: overlapping)."""
        mujoco, model, data = inner._mujoco, inner.model, inner.data
        best = np.inf
        for a in self._object_geoms:
            for b in self._robot_geoms:
                best = min(best, mujoco.mj_geomDistance(model, data, int(a), int(b), 0.1, None))
        return float(best)

    def _place(self, inner: Any, direction: np.ndarray) -> None:
        """The object on the line from the gripper along ``direction``, at rest, ``GAP`` short of the robot."""
        utils, model, data, mujoco = inner._utils, inner.model, inner.data, inner._mujoco
        grip = utils.get_site_xpos(model, data, "robot0:grip").copy()
        if not self._narrowed:
            near = np.linalg.norm(data.geom_xpos[self._robot_geoms] - grip, axis=1) < 0.3
            self._robot_geoms, self._narrowed = self._robot_geoms[near], True
        qpos = utils.get_joint_qpos(model, data, OBJECT_JOINT).copy()
        utils.set_joint_qvel(model, data, OBJECT_JOINT, np.zeros(6))

        def gap_at(distance: float) -> float:
            qpos[:2] = grip[:2] + distance * direction
            utils.set_joint_qpos(model, data, OBJECT_JOINT, qpos)
            mujoco.mj_forward(model, data)
            return self._distance_to_robot(inner)

        # The distance is found by bisection on the clearance (which grows with it along the line).
        lo, hi = 0.0, 0.1
        while gap_at(hi) < GAP and hi < 0.4:
            lo, hi = hi, hi * 2
        for _ in range(12):  # to 0.1 / 2**12 m, a fortieth of a millimetre
            mid = 0.5 * (lo + hi)
            if gap_at(mid) < GAP:
                lo = mid
            else:
                hi = mid
        gap_at(hi)
