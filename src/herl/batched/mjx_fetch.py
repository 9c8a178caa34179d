"""FetchPush with Fetch's arm on MuJoCo MJX: thousands of Fetch robots pushing blocks, simulated on one device.

gymnasium-robotics' FetchPush model (the 7-joint arm on its base, the mocap-welded gripper, the table and the block)
stepped by MuJoCo's JAX backend, with FetchPush's action, observation, starts, goals and reward. Two things differ
from the model as it ships, because MJX cannot step it otherwise (``benchmarks/mjx_fetch_probe.py``): no geom
keeps a margin or gap (MJX has no margins for plane-mesh pairs), and the mesh geoms (the arm's links) collide with
nothing, since mesh-mesh contacts make MJX slow. What pushing needs still collides: the fingers, the block, the table
and the floor. A policy trained here reads FetchPush-v4's observations, in their order.

MJX is an optional dependency (``pip install mujoco-mjx`` of the installed MuJoCo's version), and so is
gymnasium-robotics (for the model); importing this module imports neither, building an env does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from herl.batched.env import resolve_device
from herl.batched.mjx import MJXGoalEnv, import_mjx
from herl.errors import POSITIVE_INT, check, number

_OWNER = "MJXFetchPush"
_OBS_DIM = 25
_FINGERS = ("robot0:l_gripper_finger_joint", "robot0:r_gripper_finger_joint")
_INITIAL_QPOS = {"robot0:slide0": 0.405, "robot0:slide1": 0.48, "robot0:slide2": 0.0,
                 "object0:joint": [1.25, 0.53, 0.4, 1.0, 0.0, 0.0, 0.0]}
"""FetchPush's joint positions before its set-up moves the gripper over the table."""
_OBJ_RANGE = 0.15  # the block starts within this of the gripper along x and y, ...
_MIN_START_DISTANCE = 0.1  # ... and at least this far from it
_TARGET_RANGE = 0.15  # the goal lies within this of the gripper along x and y
_START_DRAWS = 32
"""Candidate block positions drawn per start; the first at least 10 cm from the gripper is taken (each is too close
with probability 0.35, all 32 with 2e-15; then the last is moved out to 10 cm along its direction)."""


@dataclass(frozen=True)
class FetchSetup:
    """The filtered FetchPush model after FetchPush's set-up, in MuJoCo (not MJX) arrays."""

    model: Any
    qpos: np.ndarray
    qvel: np.ndarray
    mocap_pos: np.ndarray
    mocap_quat: np.ndarray
    gripper_start: np.ndarray
    """The gripper's position after set-up: the centre of the starts and goals."""
    table_height: float
    """The block's height at rest on the table: every goal's height."""
    object_qposadr: int
    finger_qposadr: tuple[int, int]
    finger_dofadr: tuple[int, int]
    grip_site: int
    object_site: int
    gripper_body: int


def fetch_push_model() -> Any:
    """gymnasium-robotics' FetchPush model with margins and gaps zeroed and mesh geoms colliding with nothing."""
    try:
        import gymnasium_robotics
        import mujoco
    except ImportError as err:
        raise ImportError(f"{_OWNER} needs gymnasium-robotics' FetchPush model: pip install gymnasium-robotics "
                          f"({err})") from err
    path = Path(gymnasium_robotics.__file__).parent / "envs" / "assets" / "fetch" / "push.xml"
    model = mujoco.MjModel.from_xml_path(str(path))
    mesh = model.geom_type == mujoco.mjtGeom.mjGEOM_MESH
    model.geom_contype[mesh] = 0
    model.geom_conaffinity[mesh] = 0
    model.geom_margin[:] = 0.0
    model.geom_gap[:] = 0.0
    return model


@functools.cache
def fetch_setup() -> FetchSetup:
    """FetchPush's set-up on the filtered model, in MuJoCo: the joints at their initial positions, the mocap weld
    made exact, the gripper moved over the table and 10 of FetchPush's env steps simulated (400 ms, whatever an
    env's ``n_substeps``); what a reset returns to."""
    import mujoco
    from gymnasium_robotics.utils import mujoco_utils as utils

    model = fetch_push_model()
    data = mujoco.MjData(model)
    for name, value in _INITIAL_QPOS.items():
        utils.set_joint_qpos(model, data, name, value)
    utils.reset_mocap_welds(model, data)
    mujoco.mj_forward(model, data)
    target = np.array([-0.498, 0.005, -0.431]) + utils.get_site_xpos(model, data, "robot0:grip")
    utils.set_mocap_pos(model, data, "robot0:mocap", target)
    utils.set_mocap_quat(model, data, "robot0:mocap", np.array([1.0, 0.0, 1.0, 0.0]))
    for _ in range(10):
        mujoco.mj_step(model, data, nstep=20)

    def joint(name: str) -> int:
        return mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)

    def site(name: str) -> int:
        return mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, name)

    return FetchSetup(
        model=model, qpos=data.qpos.copy(), qvel=data.qvel.copy(), mocap_pos=data.mocap_pos.copy(),
        mocap_quat=data.mocap_quat.copy(), gripper_start=data.site_xpos[site("robot0:grip")].copy(),
        table_height=float(data.site_xpos[site("object0")][2]),
        object_qposadr=int(model.jnt_qposadr[joint("object0:joint")]),
        finger_qposadr=tuple(int(model.jnt_qposadr[joint(n)]) for n in _FINGERS),
        finger_dofadr=tuple(int(model.jnt_dofadr[joint(n)]) for n in _FINGERS),
        grip_site=site("robot0:grip"), object_site=site("object0"),
        gripper_body=mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "robot0:gripper_link"))


class MJXFetchPush(MJXGoalEnv):
    """``n_envs`` Fetch robots, each pushing a block to within ``distance_threshold`` of its goal, in MuJoCo MJX.

    FetchPush-v4's task on its own model (two changes for MJX, in the module's notes). An action in ``[-1, 1]^4``
    (clipped to it) moves the gripper's target by up to 5 cm along x, y and z; the fourth number is the gripper's,
    which pushing keeps closed (it has no effect, as in FetchPush). Each step simulates ``n_substeps`` steps of 2 ms.

    The observation (25 numbers, FetchPush's): the gripper's position, the block's position, the block's position
    relative to the gripper, the fingers' positions, the block's orientation (Euler angles), the block's linear
    velocity relative to the gripper's and its angular velocity, the gripper's linear velocity and the fingers'
    velocities, velocities times the step's duration. The achieved goal is the block's position, the desired goal a
    point on the table. The reward is 0.0 with the block's centre within ``distance_threshold`` of the goal and -1.0
    otherwise; success never ends an episode, and every episode is truncated after ``max_episode_steps`` steps, then
    restarts inside ``step``.

    At each reset the robot takes its pose after FetchPush's set-up, the block is placed uniformly within 15 cm of
    the gripper along x and y but at least 10 cm from it, and the goal uniformly within 15 cm of the gripper along
    x and y, at the block's height. Starts come from one ``torch.Generator`` on ``device``; every step draws starts
    for all envs and keeps those of the envs whose episode ended. ``state_dict`` holds every array of the MJX
    simulation state, so a run continues bit-identically.

    Args:
        n_envs: Number of envs stepped together.
        n_substeps: Simulation steps of 2 ms per env step (FetchPush's 20: 40 ms).
        distance_threshold: Distance of the block to the goal within which the reward is 0, in metres.
        max_episode_steps: Steps before each episode is truncated (FetchPush-v4's 50).
        device: Where the envs' tensors live and MJX runs (``"cpu"`` or ``"cuda"``).
    """

    owner = _OWNER
    achieved = slice(3, 6)

    def __init__(self, *, n_envs: int, n_substeps: int = 20, distance_threshold: float = 0.05,
                 max_episode_steps: int = 50, device: torch.device | str = "cpu") -> None:
        check(_OWNER, "n_envs", n_envs, POSITIVE_INT)
        check(_OWNER, "n_substeps", n_substeps, POSITIVE_INT)
        check(_OWNER, "distance_threshold", distance_threshold, number(0.0))
        check(_OWNER, "max_episode_steps", max_episode_steps, POSITIVE_INT)
        self.n_envs = int(n_envs)
        self.n_substeps = int(n_substeps)
        self.distance_threshold = float(distance_threshold)
        self.max_episode_steps = int(max_episode_steps)
        self.device = resolve_device(device)

        self._start_mjx()
        setup = fetch_setup()
        self._center = torch.tensor(setup.gripper_start, dtype=torch.float32, device=self.device)

        low = setup.gripper_start - _TARGET_RANGE
        high = setup.gripper_start + _TARGET_RANGE
        low[2] = high[2] = setup.table_height
        self.single_observation_space = spaces.Dict({
            "observation": spaces.Box(-np.inf, np.inf, shape=(_OBS_DIM,), dtype=np.float32),
            "achieved_goal": spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32),
            "desired_goal": spaces.Box(low=low.astype(np.float32), high=high.astype(np.float32), dtype=np.float32),
        })
        self.single_action_space = spaces.Box(low=-1.0, high=1.0, shape=(4,), dtype=np.float32)
        goals = self.single_observation_space["desired_goal"]
        self._goal_bounds = (torch.as_tensor(goals.low, device=self.device),
                             torch.as_tensor(goals.high, device=self.device))

        self._step_fn, data = _simulation(self.n_envs, self.n_substeps, self._jax_device)
        self._set_data(data)

        self._start_state()

    # ----------------------------------------------------------------------------------------------------------------
    # Pieces

    def _draw_starts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The block's start (x, y) and the goal for every env, as FetchPush draws them."""
        n = self.n_envs
        draws = torch.rand((n, 2 * _START_DRAWS + 3), generator=self._generator, device=self.device)
        offsets = (2.0 * draws[:, : 2 * _START_DRAWS] - 1.0).reshape(n, _START_DRAWS, 2) * _OBJ_RANGE
        distance = offsets.norm(dim=2)
        far = distance >= _MIN_START_DISTANCE
        first = torch.where(far.any(dim=1), far.to(torch.int64).argmax(dim=1), _START_DRAWS - 1)
        offset = offsets[torch.arange(n, device=self.device), first]
        picked = distance.gather(1, first[:, None])
        offset = torch.where(picked >= _MIN_START_DISTANCE, offset,
                             offset * (_MIN_START_DISTANCE / picked.clamp_min(1e-9)))
        block = self._center[:2] + offset
        goal = self._center + (2.0 * draws[:, 2 * _START_DRAWS:] - 1.0) * _TARGET_RANGE
        # the declared bounds put the goal's height at the table's, and keep float32 rounding inside them
        return block, goal.clamp(*self._goal_bounds)

    def _simulate(self, control: torch.Tensor, start: torch.Tensor, reset: torch.Tensor, *,
                  simulate: bool) -> tuple[Any, Any, Any]:
        return self._step_fn(self._data, self._to_jax(control), self._to_jax(start), self._to_jax(reset), simulate)


def _mat2euler(jnp: Any, mat: Any) -> Any:
    """Euler angles of rotation matrices ``(..., 3, 3)``, as gymnasium-robotics' ``rotations.mat2euler``."""
    cy = jnp.sqrt(mat[..., 2, 2] ** 2 + mat[..., 1, 2] ** 2)
    regular = cy > np.finfo(np.float64).eps * 4.0
    z = jnp.where(regular, -jnp.arctan2(mat[..., 0, 1], mat[..., 0, 0]), -jnp.arctan2(-mat[..., 1, 0], mat[..., 1, 1]))
    y = -jnp.arctan2(-mat[..., 0, 2], cy)
    x = jnp.where(regular, -jnp.arctan2(mat[..., 1, 2], mat[..., 2, 2]), 0.0)
    return jnp.stack([x, y, z], axis=-1)


@functools.cache
def _simulation(n_envs: int, n_substeps: int, device: Any) -> tuple[Any, Any]:
    """The jitted step of ``n_envs`` envs on the JAX ``device``, and the envs' data at FetchPush's set-up pose;
    built once per process for each setting (compiling takes seconds to a minute), so that envs alike share them.

    ``step(data, action, block, reset, simulate)``: with ``simulate``, FetchPush's step under ``action`` (the
    gripper's target moved, ``n_substeps`` steps simulated, the fingers held closed); then the envs of ``reset``
    take the set-up pose with their block at ``block`` (x, y). Returns the new data and the observations before the
    resets and after."""
    jax, jnp, mjx = import_mjx(_OWNER)
    setup = fetch_setup()
    dt = n_substeps * float(setup.model.opt.timestep)
    fingers_q = jnp.array(setup.finger_qposadr)
    fingers_v = jnp.array(setup.finger_dofadr)
    object_xy = jnp.array([setup.object_qposadr, setup.object_qposadr + 1])
    grip, block_site, gripper = setup.grip_site, setup.object_site, setup.gripper_body
    grip_body = int(setup.model.site_bodyid[grip])
    block_body = int(setup.model.site_bodyid[block_site])
    rotation = jnp.array([1.0, 0.0, 1.0, 0.0], dtype=jnp.float32)

    with jax.default_device(device):
        model = mjx.put_model(setup.model, device=device)
        start = mjx.make_data(model, device=device).replace(
            qpos=jnp.asarray(setup.qpos, jnp.float32), qvel=jnp.asarray(setup.qvel, jnp.float32),
            mocap_pos=jnp.asarray(setup.mocap_pos, jnp.float32), mocap_quat=jnp.asarray(setup.mocap_quat, jnp.float32))
        start = jax.jit(mjx.forward)(model, start)

    def act(d, action):
        """FetchPush's step: the mocap put on the gripper's pose, moved by the action, then simulated."""
        quat = d.xquat[gripper] + rotation
        d = d.replace(mocap_pos=(d.xpos[gripper] + 0.05 * action[:3])[None],
                      mocap_quat=(quat / jnp.linalg.norm(quat))[None])
        d = jax.lax.fori_loop(0, n_substeps, lambda _, x: mjx.step(model, x), d)
        return mjx.forward(model, d.replace(qpos=d.qpos.at[fingers_q].set(0.0)))

    def restart(block):
        return mjx.forward(model, start.replace(qpos=start.qpos.at[object_xy].set(block)))

    def observe(d):
        grip_pos, block_pos = d.site_xpos[grip], d.site_xpos[block_site]
        grip_velp = jnp.dot(d.qvel, mjx.jac(model, d, grip_pos, grip_body)[0]) * dt
        jacp, jacr = mjx.jac(model, d, block_pos, block_body)
        block_velp = jnp.dot(d.qvel, jacp) * dt - grip_velp
        block_velr = jnp.dot(d.qvel, jacr) * dt
        return jnp.concatenate([grip_pos, block_pos, block_pos - grip_pos, d.qpos[fingers_q],
                                _mat2euler(jnp, d.site_xmat[block_site]), block_velp, block_velr, grip_velp,
                                d.qvel[fingers_v] * dt]).astype(jnp.float32)

    def step(data, action, block, reset, simulate):
        stepped = jax.vmap(act)(data, action) if simulate else data
        fresh = jax.vmap(restart)(block)
        merged = jax.tree_util.tree_map(
            lambda new, old: jnp.where(reset.reshape((n_envs,) + (1,) * (new.ndim - 1)), new, old), fresh, stepped)
        return merged, jax.vmap(observe)(stepped), jax.vmap(observe)(merged)

    data = jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (n_envs, *leaf.shape)), start)
    return jax.jit(step, static_argnums=4), data
