"""Check that an environment can be used with Hindsight Experience Replay.

HER needs more of an env than gymnasium's own checker asks for: a dict observation with the goal keys, and a reward
function that can be recomputed for substituted goals, in batches, agreeing with the rewards the env hands out.
When one of these is wrong, training does not crash: it silently learns nothing. ``check_goal_env`` turns each such
mistake into an error that says what to fix.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import gymnasium
import numpy as np
from gymnasium import spaces

from herl.envs.goal_info import InfoBatch, numeric_info_keys, reduction_hint

GOAL_ENV_KEYS = ("observation", "achieved_goal", "desired_goal")


class GoalEnvError(ValueError):
    """An environment cannot be used with HER as it is; the message says what to change. ``without_her``: whether
    herl's algorithms could train it without HER (False where its observations are of a form none takes)."""

    def __init__(self, message: str = "", *, without_her: bool = True) -> None:
        super().__init__(message)
        self.without_her = without_her


class GoalEnvWarning(UserWarning):
    """An environment works with HER but something about it is likely a mistake."""


def check_goal_env(env: gymnasium.Env, n_steps: int = 50, warn: bool = True, *,
                   copy_info_dict: bool | None = None) -> None:
    """Raise :class:`GoalEnvError` if ``env`` cannot be used with HER.

    Checks, in order:

    1. ``env.observation_space`` is a ``gymnasium.spaces.Dict`` with the keys ``observation``, ``achieved_goal`` and
       ``desired_goal``, and the two goal spaces have the same shape (a different dtype or bounds is a warning);
    2. the env (through any gymnasium wrappers) has a callable ``compute_reward``;
    3. over a rollout of ``n_steps`` random actions (resetting when an episode ends), the observations' entries have
       the shapes their spaces declare, and calling ``compute_reward(achieved_goal, desired_goal, info)`` on each
       step's new achieved goal, the desired goal and the step's ``info`` gives the reward that ``step`` returned;
    4. ``compute_reward`` is vectorized: on a batch of 2 pairs of goals it returns shape ``(2,)`` and the rewards it
       gives for each pair alone. The batch's ``info`` is the one HER passes: the two steps' numeric info entries
       as HerReplayBuffer(copy_info_dict=True) stores them, or none (its default).

    ``compute_reward`` is called positionally, as gymnasium-robotics names its second parameter ``goal``.

    The rollout steps the env, so its state and random generators move on; reset it afterwards.

    Args:
        env: A single (not vectorized) gymnasium env, wrapped or not.
        n_steps: Number of random steps in the rollout; at least 2 (the batch probe needs two transitions).
        warn: Also emit :class:`GoalEnvWarning` for likely mistakes that do not prevent training: an observation
            outside its space, goal spaces with different dtypes or bounds, no ``info["is_success"]`` (success rates cannot
            be logged), a non-float reward dtype, a reward that reads ``info`` (when ``copy_info_dict`` is None).
        copy_info_dict: Whether the HER buffer will store the info entries for ``compute_reward``: True checks the
            batch with them only; False also requires a reward that works without them (an error names the fix);
            None (not known yet) checks with them and warns if the reward needs them.
    """
    if n_steps < 2:
        raise ValueError(f"n_steps must be at least 2 (the batch probe needs two transitions), got {n_steps}")
    if isinstance(env, gymnasium.vector.VectorEnv):
        raise GoalEnvError("check_goal_env takes a single env, got a vector env: check one of its sub-envs instead")

    _check_spaces(env.observation_space, warn=warn)
    fix = action_space_fix(env.action_space)
    if warn and fix is not None:
        warnings.warn(f"{fix} (HER itself takes any action space)", GoalEnvWarning, stacklevel=2)
    compute_reward = _find_compute_reward(env)

    achieved, desired, infos, rewards = _rollout(env, n_steps=n_steps, warn=warn)
    goal_shape = tuple(env.observation_space["achieved_goal"].shape)

    # 3. Single calls agree with step. This is what HER relies on: a relabeled reward for the original goal must be
    # the reward the agent actually received.
    for index, (achieved_goal, desired_goal, info, reward) in enumerate(zip(achieved, desired, infos, rewards)):
        try:
            recomputed = np.asarray(compute_reward(achieved_goal, desired_goal, info))
        except Exception as error:
            raise GoalEnvError(
                f"compute_reward(achieved_goal, desired_goal, info) raised {type(error).__name__}: {error}. It must "
                "accept one pair of goals as found in the observation (shaped like the goal space) as well as "
                f"batches (reduce over the goal's axes counted from the end, e.g. {reduction_hint(goal_shape)}, "
                "not axis=1), and the step's info dict"
            ) from error
        if recomputed.size != 1:
            raise GoalEnvError(
                f"compute_reward returned shape {recomputed.shape} for a single pair of goals: it must return one "
                f"reward (shape ()) for one pair, e.g. {reduction_hint(goal_shape)}"
            )
        if warn and index == 0 and not np.issubdtype(recomputed.dtype, np.floating):
            warnings.warn(
                f"compute_reward returned dtype {recomputed.dtype}; return floats (e.g. np.float32) so relabeled "
                "rewards have the dtype of the stored ones",
                GoalEnvWarning,
                stacklevel=2,
            )
        if not np.allclose(recomputed.reshape(()), reward):
            raise GoalEnvError(reward_mismatch_message(f"at rollout step {index}", reward, recomputed.reshape(()).item()))

    # 4. Batched calls. HER relabels whole batches at once, with goals stacked along a leading axis. The values are
    # compared with one-pair-at-a-time calls too, since with 2-D goals a reduction over the wrong axis still returns
    # shape (2,). The second pair asks for the goal already achieved (as HER's relabeling does), so that a sparse
    # reward gives two different values and a mix-up between the pairs shows.
    pairs = [(achieved[0], desired[0]), (achieved[1], achieved[1])]
    batch_achieved = np.stack([np.asarray(achieved_goal) for achieved_goal, _ in pairs])
    batch_desired = np.stack([np.asarray(desired_goal) for _, desired_goal in pairs])
    vectorize_hint = (
        f"it must be vectorized over the leading axis, e.g. use {reduction_hint(goal_shape)} "
        "and no Python branching on the goals' values"
    )
    batch_info = _her_info(infos[:2])
    try:
        batch_rewards = np.asarray(compute_reward(batch_achieved, batch_desired, batch_info))
    except Exception as error:
        unstored = _unstored_info_entry(error, infos[0], batch_info)
        if unstored is not None:
            raise GoalEnvError(
                f"compute_reward reads info[{unstored!r}], a {type(infos[0][unstored]).__name__} "
                f"({infos[0][unstored]!r}): HER stores only numeric info entries (numbers and numeric arrays) and "
                "passes those with a batch of goals; give the reward a numeric entry (e.g. 1.0/0.0 for a flag) or "
                "compute it from the goals"
            ) from error
        raise GoalEnvError(
            f"compute_reward raised {type(error).__name__} on a batch of 2 goals (shape {batch_achieved.shape}, "
            f"info entries {sorted(batch_info.keys())}): {error}; {vectorize_hint}"
        ) from error
    if batch_rewards.shape != (2,):
        raise GoalEnvError(
            f"compute_reward returned shape {batch_rewards.shape} for a batch of 2 goals (shape "
            f"{batch_achieved.shape}): {vectorize_hint}"
        )
    single_rewards = [np.asarray(compute_reward(a, d, info)).reshape(()).item() for (a, d), info in zip(pairs, infos)]
    if not np.allclose(batch_rewards, single_rewards):
        raise GoalEnvError(
            f"compute_reward on a batch of 2 goals returned {batch_rewards.tolist()} but one pair at a time it "
            f"returns {single_rewards}: {vectorize_hint}"
        )
    if copy_info_dict is not True and (copy_info_dict is False or warn):
        _check_reward_without_info(compute_reward, batch_achieved, batch_desired, strict=copy_info_dict is False)


INFO_FIX = ("keep the step's info entries for it: --set her.copy_info_dict=true on the command line, "
            "replay_buffer_kwargs=dict(copy_info_dict=True) in Python")
"""How to train with a ``compute_reward`` that reads ``info``."""


def _her_info(infos: list[dict[str, Any]]) -> Any:
    """The ``info`` that HER's buffer passes to ``compute_reward`` for a batch of these steps' transitions when it
    stores the info entries (``copy_info_dict=True``): their numeric entries, by name and by row. An entry some of
    the steps lack is left out."""
    keys = [key for key in numeric_info_keys(infos) if all(key in info for info in infos)]
    return InfoBatch({key: np.stack([np.asarray(info[key]) for info in infos]) for key in keys}, len(infos))


def _unstored_info_entry(error: Exception, info: dict[str, Any], batch_info: Any) -> str | None:
    """The step's info entry that ``compute_reward`` looked up and HER does not store (a string, None, an object),
    where ``error`` is the ``KeyError`` of that lookup; else None."""
    if not isinstance(error, KeyError) or len(error.args) != 1:
        return None
    key = error.args[0]
    if isinstance(key, str) and key in info and key not in batch_info:
        return key
    return None


def _check_reward_without_info(
    compute_reward: Callable[..., Any], achieved: np.ndarray, desired: np.ndarray, *, strict: bool
) -> None:
    """Call ``compute_reward`` on a batch with the empty ``info`` HER passes by default (no ``copy_info_dict``):
    where it fails though it works with the steps' info entries, the reward reads ``info``. An error if ``strict``,
    else a warning."""
    try:
        compute_reward(achieved, desired, InfoBatch({}, len(achieved)))
    except Exception as error:
        message = (f"compute_reward reads info: with the empty info HER passes by default it raised "
                   f"{type(error).__name__}: {error}; {INFO_FIX}")
        if strict:
            raise GoalEnvError(message) from error
        warnings.warn(message, GoalEnvWarning, stacklevel=3)


def reward_mismatch_message(where: str, reward: float, recomputed: float) -> str:
    """What to fix when ``compute_reward`` does not give the reward ``step`` returned (also used by HER buffers,
    which check the first episode they store)."""
    return (
        f"compute_reward disagrees with step {where}: step returned reward {reward!r} but "
        f"compute_reward(achieved_goal, desired_goal, info) returned {recomputed!r}. Both must compute the reward "
        "from the new achieved goal and the desired goal the same way (if a wrapper changes the reward, give it a "
        "compute_reward that changes it the same way)"
    )


def _check_spaces(observation_space: spaces.Space, *, warn: bool) -> None:
    if not isinstance(observation_space, spaces.Dict):
        raise GoalEnvError(
            f"observation_space is {type(observation_space).__name__}, not gymnasium.spaces.Dict: a goal env's "
            f"observations must be dicts with the keys {list(GOAL_ENV_KEYS)}"
        )
    missing = [key for key in GOAL_ENV_KEYS if key not in observation_space.spaces]
    if missing:
        raise GoalEnvError(
            f"observation_space lacks the key(s) {missing} (it has {list(observation_space.spaces)}): a goal env's "
            f"observation dict must have the keys {list(GOAL_ENV_KEYS)}"
        )
    stored = (spaces.Box, spaces.Discrete, spaces.MultiBinary, spaces.MultiDiscrete)
    for key, space in observation_space.spaces.items():
        if not isinstance(space, stored):
            raise GoalEnvError(
                f"observation_space's entry {key!r} is a {type(space).__name__} space; herl's buffers and networks "
                "take entries that are arrays (Box, Discrete, MultiBinary, MultiDiscrete): give its parts entries of "
                "their own, or flatten them into one Box", without_her=False
            )
    achieved, desired = observation_space["achieved_goal"], observation_space["desired_goal"]
    if achieved.shape != desired.shape:
        raise GoalEnvError(
            f"achieved_goal has shape {achieved.shape} but desired_goal has shape {desired.shape}: they must have the "
            "same shape, since HER substitutes achieved goals for desired goals"
        )
    if warn and achieved.dtype != desired.dtype:
        warnings.warn(
            f"achieved_goal's space has dtype {achieved.dtype} but desired_goal's has dtype {desired.dtype}: HER "
            f"stores achieved goals as desired goals (cast to {desired.dtype}); declare both goal spaces with the same "
            "dtype unless that is meant",
            GoalEnvWarning,
            stacklevel=3,
        )
    if warn and isinstance(achieved, spaces.Box) and isinstance(desired, spaces.Box) and not (
        np.array_equal(achieved.low, desired.low) and np.array_equal(achieved.high, desired.high)
    ):
        warnings.warn(
            f"achieved_goal's space has bounds {_bounds(achieved)} but desired_goal's has {_bounds(desired)}: HER "
            "hands achieved goals to the policy as desired goals, so these fall outside desired_goal's space; "
            "unless that is meant, declare both with the bounds of the goals the env can reach",
            GoalEnvWarning,
            stacklevel=3,
        )


def action_space_fix(action_space: spaces.Space) -> str | None:
    """What to do with an action space no herl algorithm takes (DQN takes Discrete, the others Box), or None."""
    if isinstance(action_space, (spaces.Discrete, spaces.Box)):
        return None
    if isinstance(action_space, spaces.MultiDiscrete):
        combinations = int(np.prod(action_space.nvec, dtype=np.int64))
        return (f"no herl algorithm takes {action_space} actions: give the env a Discrete({combinations}) action space "
                "(one action per combination) for DQN, or a Box one for SAC, TD3, DDPG, TQC or CrossQ")
    if isinstance(action_space, spaces.MultiBinary):
        combinations = 2 ** int(np.prod(action_space.shape))
        return (f"no herl algorithm takes {action_space} actions: give the env a Discrete({combinations}) action space "
                "(one action per combination) for DQN, or a Box one for SAC, TD3, DDPG, TQC or CrossQ")
    return (f"no herl algorithm takes {type(action_space).__name__} actions: give the env a Discrete action space for "
            "DQN, or a Box one for SAC, TD3, DDPG, TQC or CrossQ")


def _bounds(space: spaces.Box) -> str:
    """``[low, high]``, each a number where it is the same for every entry."""
    ends = [np.unique(end).item() if np.unique(end).size == 1 else end.tolist() for end in (space.low, space.high)]
    return f"[{ends[0]}, {ends[1]}]"


def _outside(space: spaces.Space, value: Any) -> str | None:
    """What is wrong with an observation entry ``value`` that ``space`` does not contain (None if it does)."""
    if space.contains(value):
        return None
    if not isinstance(space, spaces.Box):
        return f"a value not in {space}"
    array = np.asarray(value)
    if array.shape != space.shape:
        return f"shape {array.shape} where the space has {space.shape}"
    if not np.can_cast(array.dtype, space.dtype):
        return f"dtype {array.dtype} where the space has {space.dtype}"
    return f"values outside the space's bounds {_bounds(space)}"


def _check_shapes(observation: dict[str, Any], observation_space: spaces.Dict, where: str) -> None:
    """Raise :class:`GoalEnvError` if ``observation`` (returned by ``where``) lacks an entry its space declares or
    holds one of another shape: the buffer stores every entry in an array of the declared shape."""
    for key, space in observation_space.spaces.items():
        if key not in observation:
            raise GoalEnvError(
                f"{where} returned an observation without the entry {key!r} that the env's observation_space "
                f"declares (it has {list(observation)}): return every declared entry, or leave {key!r} out of the space"
            )
        declared, shape = space.shape, np.shape(observation[key])
        if declared is not None and shape != declared:
            raise GoalEnvError(
                f"{where} returned an observation whose {key} has shape {shape} where the env's observation_space "
                f"says {declared}: return {key} with the shape its space declares (or declare the shape it has)"
            )


def _find_compute_reward(env: gymnasium.Env) -> Callable[..., Any]:
    # get_wrapper_attr looks through the wrappers, outermost first, so a wrapper may override the reward function.
    try:
        compute_reward = env.get_wrapper_attr("compute_reward")
    except AttributeError:
        compute_reward = getattr(env.unwrapped, "compute_reward", None)
    if not callable(compute_reward):
        raise GoalEnvError(
            f"{type(env.unwrapped).__name__} has no compute_reward method: HER recomputes rewards for substituted "
            "goals, so define compute_reward(self, achieved_goal, desired_goal, info) returning the reward, "
            "vectorized over a leading batch axis"
        )
    return compute_reward


def _rollout(
    env: gymnasium.Env, *, n_steps: int, warn: bool
) -> tuple[list[Any], list[Any], list[dict[str, Any]], list[float]]:
    """Step ``env`` with random actions; return each step's new achieved goal, desired goal, info and reward."""
    achieved: list[Any] = []
    desired: list[Any] = []
    infos: list[dict[str, Any]] = []
    rewards: list[float] = []
    warned_space = warned_success = False

    observation, _ = env.reset()
    if isinstance(observation, dict) and all(key in observation for key in GOAL_ENV_KEYS):
        _check_shapes(observation, env.observation_space, "reset")
    for _ in range(n_steps):
        observation, reward, terminated, truncated, info = env.step(env.action_space.sample())
        if not isinstance(observation, dict) or any(key not in observation for key in GOAL_ENV_KEYS):
            raise GoalEnvError(
                f"step returned an observation of type {type(observation).__name__} with keys "
                f"{list(observation) if isinstance(observation, dict) else None}, but the observation_space declares "
                f"a dict: return a dict with the keys {list(GOAL_ENV_KEYS)}"
            )
        _check_shapes(observation, env.observation_space, "step")
        if warn and not warned_space:
            outside = {key: _outside(env.observation_space[key], observation[key]) for key in GOAL_ENV_KEYS}
            outside = {key: why for key, why in outside.items() if why is not None}
            if outside:
                warned_space = True
                warnings.warn(
                    f"step returned an observation outside observation_space: "
                    f"{'; '.join(f'{key} has {why}' for key, why in outside.items())}; declare the spaces with the "
                    "dtype and bounds of the values the env returns",
                    GoalEnvWarning,
                    stacklevel=3,
                )
        if warn and not warned_success and "is_success" not in info:
            warned_success = True
            warnings.warn(
                "step's info has no 'is_success' key: success rates cannot be logged; add info['is_success']",
                GoalEnvWarning,
                stacklevel=3,
            )
        achieved.append(observation["achieved_goal"])
        desired.append(observation["desired_goal"])
        infos.append(info)
        rewards.append(float(reward))
        if terminated or truncated:
            observation, _ = env.reset()
    return achieved, desired, infos, rewards
