"""Env ids of the batched goal envs, for the command line (``herl train --env herl/BatchedPointReach-v0``).

A batched env is not a gymnasium env (it steps ``n_envs`` copies at once, as tensors), so these ids are not
registered with gymnasium: they name a class here, and :func:`make_batched_env` builds it with the number of envs
and the device the run chooses and the env arguments (``--set env.NAME=VALUE``) it is given.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from typing import Any

import torch

from herl.batched.bit_flipping import BatchedBitFlipping
from herl.batched.env import BatchedGoalEnv
from herl.batched.mjx_fetch import MJXFetchPush
from herl.batched.mjx_push import MJXPush
from herl.batched.point_reach import BatchedPointReach
from herl.batched.push import BatchedPush

BATCHED_ENVS: dict[str, type[BatchedGoalEnv]] = {
    "herl/BatchedPointReach-v0": BatchedPointReach,
    "herl/BatchedBitFlipping-v0": BatchedBitFlipping,
    "herl/BatchedPush-v0": BatchedPush,
    "herl/MJXPush-v0": MJXPush,
    "herl/MJXFetchPush-v0": MJXFetchPush,
}
"""Each batched env id and its class."""

GYMNASIUM_TWINS = {"herl/BatchedPointReach-v0": "herl/PointReach-v0", "herl/MJXFetchPush-v0": "FetchPush-v4"}
"""The gymnasium env whose observations (the same keys and shapes, with the default settings) and actions a model
trained on a batched one reads, where there is one: the model acts in it as it is (``herl eval --env ... --video``)."""

_RUN_ARGUMENTS = ("n_envs", "device")
"""Constructor arguments the run sets itself, never the env settings."""


def is_batched_env(env_id: str) -> bool:
    """Whether ``env_id`` names a batched env of :data:`BATCHED_ENVS`."""
    return env_id in BATCHED_ENVS


def batched_env_class(env_id: str) -> type[BatchedGoalEnv]:
    """The class ``env_id`` names; ``ValueError`` naming the ids (and the closest) for an unknown one."""
    if env_id not in BATCHED_ENVS:
        close = difflib.get_close_matches(env_id, list(BATCHED_ENVS), n=2, cutoff=0.6)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise ValueError(f"unknown batched env id {env_id!r}{hint}: the batched envs are {', '.join(BATCHED_ENVS)}")
    return BATCHED_ENVS[env_id]


def env_arguments(env_id: str) -> list[str]:
    """The env settings ``env_id`` takes: its constructor's keyword arguments but ``n_envs`` and ``device``."""
    parameters = inspect.signature(batched_env_class(env_id)).parameters.values()
    return [p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
            and p.name not in _RUN_ARGUMENTS]


def check_env_kwargs(env_id: str, env_kwargs: Mapping[str, Any]) -> None:
    """``TypeError`` naming the env settings ``env_id`` takes if ``env_kwargs`` has one it does not (``n_envs`` and
    ``device`` are the run's, not env settings)."""
    allowed = env_arguments(env_id)
    unknown = sorted(set(env_kwargs) - set(allowed))
    if unknown:
        given = ", ".join(f"env.{name}" for name in unknown)
        run_own = [name for name in unknown if name in _RUN_ARGUMENTS]
        why = (f" ({', '.join(run_own)} is the run's own: set it with --{run_own[0].replace('_', '-')})"
               if run_own else "")
        raise TypeError(f"{env_id} takes no {given}{why}; its settings are: "
                        f"{', '.join(f'env.{name}' for name in allowed)}")


def make_batched_env(env_id: str, n_envs: int, device: torch.device | str = "cpu", **env_kwargs: Any) -> BatchedGoalEnv:
    """``n_envs`` envs of ``env_id`` on ``device``, built with ``env_kwargs``.

    An argument the env does not take raises ``TypeError`` naming the ones it does (:func:`check_env_kwargs`); a
    value it refuses raises the env's ``ValueError``.
    """
    check_env_kwargs(env_id, env_kwargs)
    return batched_env_class(env_id)(n_envs=n_envs, device=device, **env_kwargs)
