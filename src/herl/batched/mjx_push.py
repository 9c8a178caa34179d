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

import contextlib
import functools
import io
import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from herl.batched.env import (BatchedStep, TensorStateEnv, check_actions, check_goal_shape, new_generator,
                              require_reset, reseed, resolve_device)
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


_COMMAND_BUFFER_FLAG = "--xla_gpu_enable_command_buffer"


def import_mjx() -> tuple[Any, Any, Any]:
    """``(jax, jax.numpy, mujoco.mjx)``; ``ImportError`` naming the package to install when MJX is missing.

    When JAX is not imported yet, two settings are made for it (each unless the user made it): it does not take most
    of a GPU's memory at start (it shares the GPU with PyTorch here), and it replays no CUDA command buffers
    (``XLA_FLAGS=--xla_gpu_enable_command_buffer=``). With them, XLA's compiled step fails on an H100 once its
    inputs are PyTorch's memory ("Failed to set memcpy D2D node params: CUDA_ERROR_INVALID_VALUE").
    """
    if "jax" not in sys.modules:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        flags = os.environ.get("XLA_FLAGS", "")
        if _COMMAND_BUFFER_FLAG not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} {_COMMAND_BUFFER_FLAG}=".strip()
    try:
        import jax
        import jax.numpy as jnp
        import mujoco

        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):  # MJX prints that its optional Warp backend is missing
            from mujoco import mjx
        for line in printed.getvalue().splitlines():
            if not line.startswith(("Failed to import warp", "Failed to import mujoco_warp")):
                print(line)
    except ImportError as err:
        try:
            import mujoco
            version = f"=={mujoco.__version__}"
        except ImportError:
            version = ""
        raise ImportError(f"{_OWNER} needs MuJoCo's JAX backend: pip install mujoco-mjx{version} ({err})") from err
    return jax, jnp, mjx


def jax_device(jax: Any, device: torch.device) -> Any:
    """The JAX device that is ``device``: the CPU, or the CUDA GPU of the same index."""
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type == "cuda":
        try:
            return jax.devices("cuda")[device.index or 0]
        except RuntimeError as err:
            raise ValueError(f"{_OWNER} on {device}: this JAX has no CUDA backend ({err}); install JAX with CUDA "
                             "(pip install 'jax[cuda13]', the CUDA of your driver) or use device='cpu'") from err
        if _COMMAND_BUFFER_FLAG not in os.environ.get("XLA_FLAGS", ""):
            warnings.warn(f"{_OWNER} on {device}: JAX was imported before herl could turn off its CUDA command "
                          "buffers, with which MJX's step can fail on PyTorch's memory (\"Failed to set memcpy D2D "
                          f"node params\"); set XLA_FLAGS={_COMMAND_BUFFER_FLAG}= before JAX is imported",
                          RuntimeWarning, stacklevel=3)
    raise ValueError(f"{_OWNER} runs on 'cpu' or 'cuda' devices, got {device}")


class MJXPush(TensorStateEnv):
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
    state_names = ("goal",)

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

        self._jax, self._jnp, _ = import_mjx()
        self._jax_device = jax_device(self._jax, self.device)
        self._step_fn, blank = _simulation(self.n_envs, self._jax_device)
        self._data = self._jax.tree_util.tree_map(
            lambda leaf: self._jnp.broadcast_to(leaf, (self.n_envs, *leaf.shape)), blank)
        self._treedef = self._jax.tree_util.tree_structure(self._data)
        self._leaf_names = [_leaf_name(path) for path, _ in self._jax.tree_util.tree_flatten_with_path(self._data)[0]]

        self._generator = new_generator(self.device)
        self._goal = torch.zeros((self.n_envs, 3), dtype=torch.float32, device=self.device)
        self._elapsed = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        self._started = False

    # ----------------------------------------------------------------------------------------------------------------
    # The interface

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        reseed(_OWNER, self._generator, seed)
        qpos, self._goal = self._draw_starts()
        everyone = torch.ones(self.n_envs, dtype=torch.bool, device=self.device)
        zero_ctrl = torch.zeros((self.n_envs, 2), dtype=torch.float32, device=self.device)
        # a step of no simulation: every env takes its start (the step function's reset path)
        self._data, _, obs = self._step_fn(self._data, self._to_jax(zero_ctrl), self._to_jax(qpos),
                                           self._to_jax(everyone), 0)
        self._elapsed = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        self._started = True
        return self._observe(obs, self._goal)

    def step(self, actions: torch.Tensor) -> BatchedStep:
        require_reset(_OWNER, self._started)
        check_actions(_OWNER, actions, (self.n_envs, 2), self.device, integer=False)
        ctrl = actions.to(torch.float32).clamp(-1.0, 1.0) * self.max_speed
        elapsed = self._elapsed + 1
        truncated = elapsed >= self.max_episode_steps
        qpos, fresh_goal = self._draw_starts()
        self._data, final, obs = self._step_fn(self._data, self._to_jax(ctrl.contiguous()), self._to_jax(qpos),
                                               self._to_jax(truncated), self.substeps)
        final_obs = self._observe(final, self._goal)
        success = self._success(final_obs["achieved_goal"], self._goal)
        reward = success.to(torch.float32) - 1.0
        terminated = torch.zeros_like(success)
        self._goal = torch.where(truncated[:, None], fresh_goal, self._goal)
        self._elapsed = elapsed.masked_fill(truncated, 0)
        return BatchedStep(self._observe(obs, self._goal), final_obs, reward, terminated, truncated, success)

    def compute_reward(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        """0.0 with the cube within ``distance_threshold`` of the desired goal, else -1.0; goals ``(..., 3)`` give
        float32 rewards ``(...)`` (the function ``step`` uses)."""
        check_goal_shape(f"{_OWNER}.compute_reward", achieved_goal, desired_goal, 3)
        return self._success(achieved_goal, desired_goal).to(torch.float32) - 1.0

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The arrays of every env's MJX simulation state (``data.qpos``, ``data.qvel``, ...) beside the goals,
        the step counters and the generator."""
        leaves = self._jax.tree_util.tree_leaves(self._data)
        return {**{f"data.{name}": torch.from_dlpack(leaf).clone() for name, leaf in zip(self._leaf_names, leaves)},
                **super().state_dict()}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        super().load_state_dict(state)  # checks every key, the simulation's too
        leaves = [self._to_jax(state[f"data.{name}"].to(self.device)) for name in self._leaf_names]
        self._data = self._jax.tree_util.tree_unflatten(self._treedef, leaves)

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

    def _to_jax(self, tensor: torch.Tensor) -> Any:
        return self._jax.device_put(self._jnp.from_dlpack(tensor.contiguous()), self._jax_device)

    def _observe(self, obs: Any, goal: torch.Tensor) -> dict[str, torch.Tensor]:
        observation = torch.from_dlpack(obs)
        return {"observation": observation, "achieved_goal": observation[:, 4:7].clone(), "desired_goal": goal.clone()}

    def _success(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        difference = achieved_goal.to(torch.float32) - desired_goal.to(torch.float32)
        return difference.square().sum(dim=-1) <= self.distance_threshold * self.distance_threshold


@functools.cache
def _simulation(n_envs: int, device: Any) -> tuple[Any, Any]:
    """The jitted step of ``n_envs`` envs on the JAX ``device``, and one env's data at rest; built once per process
    for each ``(n_envs, device)`` (compiling takes seconds), so that envs alike (a run's and its evaluation's,
    a resumed run's) share them.

    The step simulates ``substeps`` steps under ``ctrl``, then puts the envs of ``reset`` at their start ``qpos`` (at
    rest); it returns the new data and the observations before the resets and after."""
    import mujoco

    jax, jnp, mjx = import_mjx()
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


def _leaf_name(path: tuple[Any, ...]) -> str:
    """``qpos``, ``contact.dist``, ...: a data leaf's path as dotted attribute names."""
    return ".".join(str(next(getattr(key, a) for a in ("name", "key", "idx") if hasattr(key, a))) for key in path)
