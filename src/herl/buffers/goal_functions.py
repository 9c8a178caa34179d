"""Binding a user's or an env's reward and termination functions so the engine can call them safely.

The engine calls ``compute_reward(achieved_goal, desired_goal, info)`` once per batch. Two traps
from the field shape this module:

* Argument order. Passing goals positionally lets a swapped signature go unnoticed until a
  learning curve stays flat, so we pass them by keyword whenever the function names its
  parameters (gymnasium-robotics names the second one ``goal``, the GoalEnv API ``desired_goal``).
* Vectorization. A reward written for one goal returns a scalar for a batch, and SB3 users then
  meet an opaque shape mismatch deep in the loss. We probe with a batch of two up front and say
  what to fix.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from herl.envs.goal_info import InfoBatch  # noqa: F401 (the buffers' name for it)
from herl.envs.goal_info import reduction_hint

GoalFunction = Callable[..., Any]

_DESIRED_NAMES = ("desired_goal", "goal", "desired_goals", "goals")
_INFO_NAMES = ("info", "infos")


def bind_goal_function(fn: GoalFunction) -> Callable[[np.ndarray, np.ndarray, Any], Any]:
    """Return ``call(achieved_goal, desired_goal, info)`` that passes each argument to the right parameter.

    By keyword when ``fn`` has a parameter named ``achieved_goal`` and one named ``desired_goal``
    (or ``goal``); otherwise positionally, in that documented order.
    """
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return lambda achieved, desired, info: fn(achieved, desired, info)
    desired_name = next((n for n in _DESIRED_NAMES if n in params), None)
    if "achieved_goal" not in params or desired_name is None:
        return lambda achieved, desired, info: fn(achieved, desired, info)
    info_name = next((n for n in _INFO_NAMES if n in params), None)
    if info_name is None:
        # a third parameter with another name, passed positionally after the goals would be
        # ambiguous, so only keyword arguments are used and the info goes where a third slot is.
        remaining = [n for n in params if n not in ("achieved_goal", desired_name)]
        info_name = remaining[0] if remaining else None
        if info_name is not None and params[info_name].kind is inspect.Parameter.VAR_POSITIONAL:
            # fn(achieved_goal, desired_goal, *args): the info goes into *args, after the goals in their order
            if list(params)[:2] == ["achieved_goal", desired_name]:
                return lambda achieved, desired, info: fn(achieved, desired, info)
            info_name = None
    if info_name is None:
        return lambda achieved, desired, info: fn(achieved_goal=achieved, **{desired_name: desired})
    return lambda achieved, desired, info: fn(achieved_goal=achieved, **{desired_name: desired, info_name: info})


def _unwrap_gym_env(env: Any) -> Any:
    """The object whose compute_reward we call, for a gymnasium Env, vector env or SB3 VecEnv."""
    import gymnasium as gym

    if isinstance(env, gym.vector.VectorEnv):
        if hasattr(env, "envs"):  # SyncVectorEnv
            return env.envs[0]
        if hasattr(env, "env_fns"):  # AsyncVectorEnv, herl's ShardedVectorEnv: a local copy, only to compute rewards
            return env.env_fns[0]()
        raise TypeError(
            f"cannot reach compute_reward through {type(env).__name__}: pass compute_reward= explicitly"
        )
    if not isinstance(env, gym.Env) and hasattr(env, "env_method") and hasattr(env, "num_envs"):
        if hasattr(env, "envs"):  # SB3 DummyVecEnv
            return env.envs[0]
        return _VecEnvMethods(env)  # SB3 SubprocVecEnv: ask the first worker
    return env


def is_remote_goal_env(env: Any) -> bool:
    """Whether ``env``'s goal functions run in another process (an SB3 SubprocVecEnv's first worker)."""
    return isinstance(_unwrap_gym_env(env), _VecEnvMethods)


class _VecEnvMethods:
    """Calls a goal function in the first worker of an SB3 VecEnv."""

    def __init__(self, venv: Any) -> None:
        self._venv = venv

    def compute_reward(self, achieved_goal, desired_goal, info):
        return self._venv.env_method("compute_reward", achieved_goal, desired_goal, info, indices=[0])[0]

    def compute_terminated(self, achieved_goal, desired_goal, info):
        return self._venv.env_method("compute_terminated", achieved_goal, desired_goal, info, indices=[0])[0]

    def has(self, name: str) -> bool:
        """Whether the workers' env has ``name`` (asked once, when the function is looked up)."""
        return bool(self._venv.has_attr(name))


def env_goal_function(env: Any, name: str) -> GoalFunction | None:
    """``env``'s ``compute_reward`` or ``compute_terminated``, looked up through wrappers; None if it has none."""
    if env is None:
        return None
    target = _unwrap_gym_env(env)
    if isinstance(target, _VecEnvMethods) and not target.has(name):
        return None
    getter = getattr(target, "get_wrapper_attr", None)
    try:
        fn = getter(name) if getter is not None else getattr(target, name)
    except AttributeError:
        return None
    return fn if callable(fn) else None


def probe_vectorized(
    call: Callable[[np.ndarray, np.ndarray, Any], Any],
    goal_shape: tuple[int, ...],
    goal_dtype: np.dtype,
    info: Any,
    *,
    what: str,
) -> None:
    """Call ``call`` on a batch of two goals and insist on one value per goal."""
    achieved = np.zeros((2, *goal_shape), dtype=goal_dtype)
    desired = np.zeros((2, *goal_shape), dtype=goal_dtype)
    fix = (
        f"{what} must be vectorized: given achieved_goal and desired_goal shaped (batch, *goal_shape) it "
        f"returns one value per row, e.g. reduce with {reduction_hint(goal_shape)}"
    )
    try:
        result = np.asarray(call(achieved, desired, info))
    except Exception as err:  # the user's code: any failure is reported with the fix
        held = sorted(info.keys()) if hasattr(info, "keys") else []
        missing = err.args[0] if isinstance(err, KeyError) and len(err.args) == 1 else None
        if isinstance(missing, str) and missing not in held:
            raise ValueError(f"{what} reads info[{missing!r}], which HER's buffer does not hold (it holds "
                             f"{held}): with HerReplayBuffer(copy_info_dict=True) it stores the step's numeric info "
                             "entries (numbers and numeric arrays, never strings or objects); give the entry as a "
                             "number or compute the value from the goals") from err
        raise ValueError(f"{what} failed on a batch of 2 goals ({type(err).__name__}: {err}). {fix}; its info holds "
                         f"the stored info entries ({sorted(info.keys()) if hasattr(info, 'keys') else info!r}; "
                         "HerReplayBuffer(copy_info_dict=True) stores the step's numbers) by name and by row: "
                         "info['key'] or info[i]['key']") from err
    if result.shape == () and what == "compute_terminated":
        return  # a constant (gymnasium-robotics' Fetch returns False for any batch): it broadcasts when relabeling
    if result.shape not in ((2,), (2, 1)):
        raise ValueError(f"{what} returned shape {result.shape} for a batch of 2 goals, expected (2,). {fix}")


def goal_function_values(result: Any, n: int, what: str) -> np.ndarray:
    """A reward or termination function's output for ``n`` goals as a float32 vector of length ``n``; anything else
    (strings, a fixed-size array, NaN) is an error naming the function and what it returned.

    ``compute_terminated`` may return one value for the whole batch (Fetch's ``False``): it is broadcast.
    """
    from herl.errors import NonFiniteError

    try:
        values = np.asarray(result, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} returned {type(result).__name__} values that are not numbers ({err}): it must return "
                         f"one number per goal") from None
    if values.size != n:
        if what == "compute_terminated" and values.size == 1:
            return np.broadcast_to(values.reshape(()), (n,)).copy()
        raise ValueError(f"{what} returned shape {values.shape} for a batch of {n} goals: it must return one value per "
                         "goal, shaped (batch,)")
    values = values.reshape(n)
    if not math.isfinite(np.add.reduce(values, None)) and not np.isfinite(values).all():  # the sum: ~1 µs cheaper
        raise NonFiniteError(f"{what} returned NaN or infinity for {int((~np.isfinite(values)).sum())} of {n} relabeled "
                             "goals; nothing was sampled. Fix the function (rewards must be finite numbers)")
    return values
