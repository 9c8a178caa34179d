"""Push on MuJoCo MJX: thousands of pushers moving cubes to goals on a table, simulated by MuJoCo's JAX backend.

FetchPush's task with its physics and without its arm: a gripper-sized sphere slides over a table (velocity-controlled
along x and y, as Fetch's end effector follows its action), and a 5 cm cube that it can only move by touching it
slides, tips and rotates under MuJoCo's contacts and friction. The goal is a place on the table; the cube's centre
within 5 cm of it is a success (Fetch's threshold). Every env is one MJX simulation, all stepped by one jitted JAX
function on the chosen device, and the results reach PyTorch through DLPack without a copy.

MJX is an optional dependency (``pip install mujoco-mjx`` of the installed MuJoCo's version); importing this module
does not import JAX, building an env does.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from herl.batched.env import resolve_device
from herl.batched.mjx import MJXGoalEnv, import_mjx
from herl.errors import POSITIVE_INT, check, number

_OWNER = "MJXPush"

HEIGHT = 0.025
"""The cube's half size and the height of its centre at rest; the goal lies at this height."""

SCENE = f"""
<mujoco model="herl_mjx_push">
  <option timestep="0.01" iterations="4" ls_iterations="8"><flag eulerdamp="disable"/></option>
  <worldbody>
    <geom name="table" type="plane" size="1 1 0.1" contype="2" conaffinity="2"/>
    <body name="pusher" pos="0 0 {HEIGHT}">
      <joint name="pusher_x" type="slide" axis="1 0 0" limited="true" range="-0.3 0.3" damping="5"/>
      <joint name="pusher_y" type="slide" axis="0 1 0" limited="true" range="-0.3 0.3" damping="5"/>
      <geom name="pusher" type="sphere" size="0.02" mass="1" contype="1" conaffinity="1"/>
    </body>
    <body name="cube" pos="0.1 0 {HEIGHT}">
      <freejoint name="cube"/>
      <geom name="cube" type="box" size="{HEIGHT} {HEIGHT} {HEIGHT}" mass="0.2" contype="3" conaffinity="3"/>
    </body>
  </worldbody>
  <actuator>
    <velocity joint="pusher_x" kv="50" ctrlrange="-1 1"/>
    <velocity joint="pusher_y" kv="50" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""
"""The scene: the pusher collides with the cube only (contype 1), the cube with the table too (contype 3 against the
table's 2)."""

_OBS_DIM = 20


class MJXPush(MJXGoalEnv):
    """``n_envs`` pushers on tables, each pushing a cube to within ``distance_threshold`` of its goal, in MuJoCo MJX.

    At each reset the pusher starts at the table's centre, the cube at a distance of 8 to 15 cm from it in a uniformly
    drawn direction, and the goal uniformly in the square of side 30 cm around the centre, on the table. An action in
    ``[-1, 1]^2`` (clipped to it) is the pusher's target velocity along x and y in ``max_speed`` m/s; the pusher stays
    within 30 cm of the centre. Each step simulates ``substeps`` steps of 10 ms.

    The observation (20 numbers): the pusher's position and velocity (x, y), the cube's position, its position
    relative to the pusher, its orientation (quaternion), its linear and angular velocity. The achieved goal is the
    cube's position, the desired goal the goal (x, y, and the cube's resting height). The reward is 0.0 with the cube's
    centre within ``distance_threshold`` of the goal and -1.0 otherwise; success never ends an episode, and every
    episode is truncated after ``max_episode_steps`` steps, then restarts inside ``step``.

    Starts come from one ``torch.Generator`` on ``device``; every step draws starts for all envs and keeps those of the
    envs whose episode ended. ``state_dict`` holds every array of the MJX simulation state, so a run continues
    bit-identically.

    Args:
        n_envs: Number of envs stepped together.
        max_speed: The pusher's largest speed along each axis, in m/s.
        substeps: Simulation steps of 10 ms per env step (5: 50 ms, about Fetch's 40).
        distance_threshold: Distance of the cube to the goal within which the reward is 0, in metres.
        max_episode_steps: Steps before each episode is truncated.
        device: Where the envs' tensors live and MJX runs (``"cpu"`` or ``"cuda"``).
    """

    owner = _OWNER
    achieved = slice(4, 7)

    def __init__(self, *, n_envs: int, max_speed: float = 1.0, substeps: int = 5, distance_threshold: float = 0.05,
                 max_episode_steps: int = 50, device: torch.device | str = "cpu") -> None:
        check(_OWNER, "n_envs", n_envs, POSITIVE_INT)
        check(_OWNER, "max_speed", max_speed, number(0.0, 10.0, low_open=True))
        check(_OWNER, "substeps", substeps, POSITIVE_INT)
        check(_OWNER, "distance_threshold", distance_threshold, number(0.0))
        check(_OWNER, "max_episode_steps", max_episode_steps, POSITIVE_INT)
        self.n_envs = int(n_envs)
        self.max_speed = float(max_speed)
        self.substeps = int(substeps)
        self.distance_threshold = float(distance_threshold)
        self.max_episode_steps = int(max_episode_steps)
        self.device = resolve_device(device)

        goal_box = spaces.Box(low=np.array([-1.0, -1.0, -1.0], np.float32), high=np.ones(3, np.float32),
                              dtype=np.float32)
        self.single_observation_space = spaces.Dict({
            "observation": spaces.Box(-np.inf, np.inf, shape=(_OBS_DIM,), dtype=np.float32),
            "achieved_goal": goal_box,
            "desired_goal": spaces.Box(low=np.array([-0.15, -0.15, HEIGHT], np.float32),
                                       high=np.array([0.15, 0.15, HEIGHT], np.float32), dtype=np.float32),
        })
        self.single_action_space = spaces.Box(low=-1.0, high=1.0, shape=(2,), dtype=np.float32)

        self._start_mjx()
        self._step_fn, blank = _simulation(self.n_envs, self._jax_device)
        self._set_data(self._jax.tree_util.tree_map(
            lambda leaf: self._jnp.broadcast_to(leaf, (self.n_envs, *leaf.shape)), blank))

        self._start_state()

    # ----------------------------------------------------------------------------------------------------------------
    # Pieces

    def _draw_starts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Start positions ``qpos`` (pusher x, y; cube position and orientation) and goals for every env."""
        draws = torch.rand((self.n_envs, 4), generator=self._generator, device=self.device)
        angle = draws[:, 0] * (2.0 * torch.pi)
        radius = 0.08 + 0.07 * draws[:, 1]
        zeros = torch.zeros(self.n_envs, device=self.device)
        ones, height = torch.ones_like(zeros), torch.full_like(zeros, HEIGHT)
        qpos = torch.stack([zeros, zeros, radius * torch.cos(angle), radius * torch.sin(angle), height, ones, zeros,
                            zeros, zeros], dim=1)
        goal = torch.stack([0.3 * draws[:, 2] - 0.15, 0.3 * draws[:, 3] - 0.15, height], dim=1)
        return qpos, goal

    def _control(self, actions: torch.Tensor) -> torch.Tensor:
        return actions * self.max_speed

    def _simulate(self, control: torch.Tensor, start: torch.Tensor, reset: torch.Tensor, *,
                  simulate: bool) -> tuple[Any, Any, Any]:
        return self._step_fn(self._data, self._to_jax(control), self._to_jax(start), self._to_jax(reset),
                             self.substeps if simulate else 0)


@functools.cache
def _simulation(n_envs: int, device: Any) -> tuple[Any, Any]:
    """The jitted step of ``n_envs`` envs on the JAX ``device``, and one env's data at rest; built once per process
    for each ``(n_envs, device)`` (compiling takes seconds), so that envs alike (a run's and its evaluation's,
    a resumed run's) share them.

    The step simulates ``substeps`` steps under ``ctrl``, then puts the envs of ``reset`` at their start ``qpos`` (at
    rest); it returns the new data and the observations before the resets and after."""
    import mujoco

    jax, jnp, mjx = import_mjx(_OWNER)
    with jax.default_device(device):
        model = mjx.put_model(mujoco.MjModel.from_xml_string(SCENE), device=device)
        blank = mjx.make_data(model, device=device)

    def simulate(data, ctrl, substeps):
        data = data.replace(ctrl=ctrl)
        return jax.lax.fori_loop(0, substeps, lambda _, d: mjx.step(model, d), data)

    def observe(data):
        qpos, qvel = data.qpos, data.qvel
        pusher = jnp.concatenate([qpos[:, :2], jnp.full((n_envs, 1), HEIGHT, qpos.dtype)], axis=1)
        cube = qpos[:, 2:5]
        return jnp.concatenate([qpos[:, :2], qvel[:, :2], cube, cube - pusher, qpos[:, 5:9], qvel[:, 2:5],
                                qvel[:, 5:8]], axis=1)

    def step(data, ctrl, qpos, reset, substeps):
        stepped = jax.vmap(simulate, in_axes=(0, 0, None))(data, ctrl, substeps)
        fresh = jax.vmap(lambda q: blank.replace(qpos=q))(qpos)
        merged = jax.tree_util.tree_map(
            lambda new, old: jnp.where(reset.reshape((n_envs,) + (1,) * (new.ndim - 1)), new, old), fresh, stepped)
        return merged, observe(stepped), observe(merged)

    return jax.jit(step), blank
