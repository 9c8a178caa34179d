"""What herl's MuJoCo MJX envs share: importing JAX and MJX with herl's settings, the JAX device of a torch device,
and the base class whose state is an MJX simulation's arrays beside torch tensors.

MJX is an optional dependency (``pip install mujoco-mjx`` of the installed MuJoCo's version); importing this module
does not import JAX, :func:`import_mjx` does.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from herl.batched.env import (BatchedStep, TensorStateEnv, check_actions, check_goal_shape, new_generator,
                              require_reset, reseed)

COMMAND_BUFFER_FLAG = "--xla_gpu_enable_command_buffer"


def import_mjx(owner: str = "herl's MJX envs") -> tuple[Any, Any, Any]:
    """``(jax, jax.numpy, mujoco.mjx)``; ``ImportError`` naming the package to install when MJX is missing.

    When JAX has not started its backends yet (imported or not: it reads its settings when it first computes), two
    settings are made for it (each unless the user made it): it does not take most of a GPU's memory at start (it
    shares the GPU with PyTorch here), and it replays no CUDA command buffers
    (``XLA_FLAGS=--xla_gpu_enable_command_buffer=``). With them, XLA's compiled step fails on an H100 once its
    inputs are PyTorch's memory ("Failed to set memcpy D2D node params: CUDA_ERROR_INVALID_VALUE").
    """
    if not _jax_started():
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        flags = os.environ.get("XLA_FLAGS", "")
        if COMMAND_BUFFER_FLAG not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} {COMMAND_BUFFER_FLAG}=".strip()
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
        raise ImportError(f"{owner} needs MuJoCo's JAX backend: pip install mujoco-mjx{version} ({err})") from err
    return jax, jnp, mjx


def _jax_started() -> bool:
    """Whether JAX has made its backends, after which it reads no more settings from the environment. Importing JAX
    (``from mujoco import mjx`` does, as does ``pytest.importorskip("mujoco.mjx")``) starts none."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # a JAX without that function: assume the worst
        return True


def jax_device(jax: Any, device: torch.device, owner: str = "herl's MJX envs") -> Any:
    """The JAX device that is ``device``: the CPU, or the CUDA GPU of the same index (with a warning when JAX was
    set up before herl could turn off its CUDA command buffers)."""
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type != "cuda":
        raise ValueError(f"{owner} runs on 'cpu' or 'cuda' devices, got {device}")
    try:
        found = jax.devices("cuda")[device.index or 0]
    except RuntimeError as err:
        raise ValueError(f"{owner} on {device}: this JAX has no CUDA backend ({err}); install JAX with CUDA "
                         "(pip install 'jax[cuda13]', the CUDA of your driver) or use device='cpu'") from err
    if COMMAND_BUFFER_FLAG not in os.environ.get("XLA_FLAGS", ""):
        warnings.warn(f"{owner} on {device}: JAX had started before herl could turn off its CUDA command buffers, "
                      "with which MJX's step can fail on PyTorch's memory (\"Failed to set memcpy D2D node params\"); "
                      f"set XLA_FLAGS={COMMAND_BUFFER_FLAG}= before JAX first computes", RuntimeWarning, stacklevel=4)
    return found


def leaf_name(path: tuple[Any, ...]) -> str:
    """``qpos``, ``contact.dist``, ...: a data leaf's path as dotted attribute names."""
    return ".".join(str(next(getattr(key, a) for a in ("name", "key", "idx") if hasattr(key, a))) for key in path)


class MJXGoalEnv(TensorStateEnv):
    """Base of herl's MJX envs: an object pushed to a goal, every env one MJX simulation (``self._data``, a batch of
    MJX data on ``self._jax_device``), the reward -1/0 on the object's distance to the goal (``distance_threshold``),
    episodes truncated at ``max_episode_steps`` and restarted inside :meth:`step`; :meth:`state_dict` holds every
    array of the simulation beside the tensors :class:`TensorStateEnv` keeps.

    A subclass sets ``n_envs``, ``device``, ``distance_threshold``, ``max_episode_steps``, its spaces and
    :attr:`achieved`, calls :meth:`_start_mjx`, then :meth:`_set_data` and :meth:`_start_state`, and defines
    :meth:`_draw_starts` and :meth:`_simulate` (and :meth:`_control` where actions are scaled).
    """

    state_names = ("goal",)
    achieved: slice
    """Where the achieved goal (the object's position) lies in the observation."""

    def _start_mjx(self) -> None:
        """Import JAX and MJX and find the JAX device of ``self.device``."""
        self._jax, self._jnp, _ = import_mjx(self.owner)
        self._jax_device = jax_device(self._jax, self.device, self.owner)

    def _start_state(self) -> None:
        """The generator, goals and step counters of an env not reset yet."""
        self._generator = new_generator(self.device)
        self._goal = torch.zeros((self.n_envs, 3), dtype=torch.float32, device=self.device)
        self._elapsed = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        self._started = False

    def _set_data(self, data: Any) -> None:
        """Take ``data`` as the simulation state, and remember its structure and its arrays' names."""
        self._data = data
        self._treedef = self._jax.tree_util.tree_structure(data)
        self._leaf_names = [leaf_name(path) for path, _ in self._jax.tree_util.tree_flatten_with_path(data)[0]]

    # ----------------------------------------------------------------------------------------------------------------
    # The interface

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        reseed(self.owner, self._generator, seed)
        start, self._goal = self._draw_starts()
        everyone = torch.ones(self.n_envs, dtype=torch.bool, device=self.device)
        still = torch.zeros((self.n_envs, *self.single_action_space.shape), dtype=torch.float32, device=self.device)
        # a step of no simulation: every env takes its start (the step function's reset path)
        self._data, _, obs = self._simulate(still, start, everyone, simulate=False)
        self._elapsed = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        self._started = True
        return self._observe(obs, self._goal)

    def step(self, actions: torch.Tensor) -> BatchedStep:
        require_reset(self.owner, self._started)
        check_actions(self.owner, actions, (self.n_envs, *self.single_action_space.shape), self.device,
                      integer=False)
        control = self._control(actions.to(torch.float32).clamp(-1.0, 1.0))
        elapsed = self._elapsed + 1
        truncated = elapsed >= self.max_episode_steps
        start, fresh_goal = self._draw_starts()
        self._data, final, obs = self._simulate(control, start, truncated, simulate=True)
        final_obs = self._observe(final, self._goal)
        success = self._success(final_obs["achieved_goal"], self._goal)
        reward = success.to(torch.float32) - 1.0
        terminated = torch.zeros_like(success)
        self._goal = torch.where(truncated[:, None], fresh_goal, self._goal)
        self._elapsed = elapsed.masked_fill(truncated, 0)
        return BatchedStep(self._observe(obs, self._goal), final_obs, reward, terminated, truncated, success)

    def compute_reward(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        """0.0 with the object within ``distance_threshold`` of the desired goal, else -1.0; goals ``(..., 3)`` give
        float32 rewards ``(...)`` (the function ``step`` uses)."""
        check_goal_shape(f"{self.owner}.compute_reward", achieved_goal, desired_goal, 3)
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

    def _to_jax(self, tensor: torch.Tensor) -> Any:
        """``tensor`` as a JAX array on the simulation's device (without a copy where it is there already)."""
        return self._jax.device_put(self._jnp.from_dlpack(tensor.contiguous()), self._jax_device)

    # ----------------------------------------------------------------------------------------------------------------
    # What a subclass defines

    def _draw_starts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """What :meth:`_simulate` needs to restart every env (drawn for all, kept for those restarting), and the
        goals ``(n_envs, 3)``."""
        raise NotImplementedError

    def _control(self, actions: torch.Tensor) -> torch.Tensor:
        """What the simulation takes from actions clipped to ``[-1, 1]``: by default, the actions."""
        return actions

    def _simulate(self, control: torch.Tensor, start: torch.Tensor, reset: torch.Tensor, *,
                  simulate: bool) -> tuple[Any, Any, Any]:
        """One step of every env under ``control`` (none without ``simulate``), then the envs of ``reset`` restarted
        from ``start``: the new data, and the observations ``(n_envs, dim)`` before the restarts and after."""
        raise NotImplementedError

    # ----------------------------------------------------------------------------------------------------------------
    # Pieces

    def _observe(self, obs: Any, goal: torch.Tensor) -> dict[str, torch.Tensor]:
        observation = torch.from_dlpack(obs)
        return {"observation": observation, "achieved_goal": observation[:, self.achieved].clone(),
                "desired_goal": goal.clone()}

    def _success(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        difference = achieved_goal.to(torch.float32) - desired_goal.to(torch.float32)
        return difference.square().sum(dim=-1) <= self.distance_threshold * self.distance_threshold
