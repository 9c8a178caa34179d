"""Many Fetch envs in one process on one MuJoCo model.

Each gymnasium-robotics Fetch env loads its own ``MjModel`` from the task's XML: about 8.6 MB of meshes and
constants, of ~10 MB for the whole env. Stepping only reads the model (the state lives in the env's ``MjData``), so
envs of one task can share one model. Inside :func:`shared_mujoco_models`, a Fetch env made in this process loads
its task's model the first time and reuses it after that; its ``MjData``, random generator and goal stay its own.
1,024 FetchPush envs then take about 0.8 GB instead of 10 (made and reset), are made about twice as fast, and step
exactly as envs with their own models do (same observations, to the bit).

Only the Fetch tasks' model files are shared: their code writes to the model only where every env writes the same
values (the mocap welds) or to draw one (the goal's marker, set again before each frame). Other MuJoCo envs can move
bodies of the model per env (the Adroit hand tasks do), so they keep their own. :func:`herl.run.envs.make_training_env`
builds ``n_envs`` envs stepped in the training process this way; so can a script::

    with shared_mujoco_models():
        envs = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("FetchPush-v4")] * 256)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class _SharedModels:
    """Stands for ``mujoco.MjModel`` in gymnasium-robotics' env module: ``from_xml_path`` of a Fetch model file
    returns the one model loaded for that file; everything else is MuJoCo's."""

    def __init__(self, mujoco: Any, shared_dir: Path) -> None:
        self._mujoco = mujoco
        self._shared_dir = shared_dir
        self.models: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mujoco.MjModel, name)

    def from_xml_path(self, path: str, *args: Any, **kwargs: Any) -> Any:
        resolved = Path(path).resolve()
        if args or kwargs or self._shared_dir not in resolved.parents:
            return self._mujoco.MjModel.from_xml_path(path, *args, **kwargs)
        key = str(resolved)
        if key not in self.models:
            self.models[key] = self._mujoco.MjModel.from_xml_path(path)
        return self.models[key]


class _MujocoWithSharedModels:
    """Stands for the ``mujoco`` module in gymnasium-robotics' env module while envs are made."""

    def __init__(self, mujoco: Any, shared_dir: Path) -> None:
        self._mujoco = mujoco
        self.MjModel = _SharedModels(mujoco, shared_dir)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mujoco, name)


@contextlib.contextmanager
def shared_mujoco_models() -> Iterator[None]:
    """While the block runs, gymnasium-robotics Fetch envs made in this process share one MuJoCo model per task (see
    the module's docstring); each env keeps its own simulation state. Without gymnasium-robotics, or with its
    mujoco-py envs, it changes nothing. Envs made in the block keep working after it, and step as they would alone."""
    try:
        from gymnasium_robotics.envs import robot_env
    except ImportError:
        yield
        return
    mujoco = getattr(robot_env, "mujoco", None)
    if mujoco is None or isinstance(mujoco, _MujocoWithSharedModels):  # no MuJoCo bindings, or already sharing
        yield
        return
    shared_dir = (Path(robot_env.__file__).parent / "assets" / "fetch").resolve()
    robot_env.mujoco = _MujocoWithSharedModels(mujoco, shared_dir)
    try:
        yield
    finally:
        robot_env.mujoco = mujoco


def restore_mujoco_module(env: Any) -> None:
    """Point an env made inside :func:`shared_mujoco_models` back at the ``mujoco`` module itself (it kept the
    stand-in, which works but is not MuJoCo's own module); other envs are left as they are."""
    unwrapped = getattr(env, "unwrapped", env)
    stand_in = getattr(unwrapped, "_mujoco", None)
    if isinstance(stand_in, _MujocoWithSharedModels):
        unwrapped._mujoco = stand_in._mujoco


def make_envs_sharing_models(env_fns: Any) -> list[Any]:
    """Each of ``env_fns`` called inside :func:`shared_mujoco_models`, and the envs pointed back at MuJoCo's own module
    (:func:`restore_mujoco_module`): the envs of one process, sharing their Fetch models."""
    with shared_mujoco_models():
        envs = [fn() for fn in env_fns]
    for env in envs:
        restore_mujoco_module(env)
    return envs
