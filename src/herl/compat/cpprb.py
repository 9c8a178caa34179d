"""cpprb's ``HindsightReplayBuffer`` on herl's HER engine.

cpprb users write ``from cpprb import HindsightReplayBuffer``; here it is
``from herl.compat.cpprb import HindsightReplayBuffer`` with the same constructor and calls:
``add(**transition)`` stages the running episode, ``on_episode_end(goal)`` relabels it and moves it
into the main store, ``sample(batch_size, beta)`` returns a dict of NumPy arrays.

This class only translates. cpprb's flat state becomes the engine's goal-env observation
(``observation`` = state, ``achieved_goal`` = ``goal_func(state)``, ``desired_goal`` = the goal given at
episode end) and its ``reward_func(next_state, action, goal)`` becomes the engine's
``compute_reward`` with the next state and action passed in ``info`` (``reward_context``). Relabeling
at episode end with k stored copies is the engine's ``online_sampling=False`` mode, and prioritized
replay is the engine's sum tree.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from herl.buffers import HerReplayBuffer
from herl.buffers.goal_functions import goal_function_values
from herl.buffers.storage import GatheredRows
from herl.errors import NON_NEGATIVE_INT, NonFiniteError, as_integer, check, number

# Engine observation keys for extra env_dict entries (e.g. "done"): prefixed so that a user's key
# can never collide with the goal-env keys. See _extra_key.
_EXTRA_PREFIX = "cpprb:"
# cpprb's keyword arguments that herl honours, with cpprb's defaults.
_PER_DEFAULTS = {"alpha": 0.6, "eps": 1e-4}
# What cpprb offers that has no meaning (or no equivalent yet) here, and what to do instead.
_REJECTED = {
    "next_of": "herl stores next states itself; list next_obs in env_dict as usual",
    "stack_compress": "frame-stack compression is not supported; store the stacked frames",
    "Nstep": "this cpprb-style buffer has no N-step returns; herl's own HerReplayBuffer(n_steps=...) has them",
    "mmap_prefix": "memory-mapped storage is not supported; use herl's save()/load() of the engine for persistence",
    "check_for_update": "multiprocess priority checking is not supported (update priorities from the sampling process)",
}


def _extra_key(name: str) -> str:
    return _EXTRA_PREFIX + name


def _shape(value: Any) -> tuple[int, ...]:
    """cpprb's shape convention: an int n means (n,), and the default is (1,)."""
    if value is None:
        return (1,)
    return tuple(int(n) for n in np.atleast_1d(value))


def _box(shape: tuple[int, ...], dtype: np.dtype) -> spaces.Box:
    """A Box that only carries a stored field's shape and dtype to the engine (bounds are unused)."""
    if dtype.kind == "b":
        return spaces.Box(0, 1, shape, dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return spaces.Box(info.min, info.max, shape, dtype)
    return spaces.Box(-np.inf, np.inf, shape, dtype)


class HindsightReplayBuffer:
    """Hindsight Experience Replay with cpprb's interface, relabeling once per episode.

    Args:
        size: capacity of the main store in transitions; relabeled copies count, so an episode of T
            transitions takes (k+1)·T of it.
        env_dict: the stored fields, ``{name: {"shape": ..., "dtype": ...}}`` as in cpprb (shape
            defaults to 1, dtype to ``default_dtype``, float32). It must hold ``state``,
            ``action`` and ``next_state``; other entries (e.g. ``"done"``) are stored and returned
            as they are. ``"goal"`` and ``"rew"`` are added by the buffer.
        max_episode_len: the longest episode ``add`` may stage before ``on_episode_end``.
        reward_func: batched ``reward_func(next_state, action, goal) -> rewards``.
        goal_func: batched ``goal_func(state) -> goals``; the state itself when None.
        goal_shape: shape of a goal; the state's shape when None.
        state, action, next_state: names of those fields in ``env_dict``.
        strategy: "future", "episode", "random" or "final": the relabeled goals come from the
            episode's next states after the transition, from any of them, from every next state in
            the store (the ended episode's included), or from its last one.
        additional_goals: k, the relabeled copies stored per transition ("final" stores one).
        prioritized: proportional prioritized replay (Schaul et al. 2015); ``sample`` then returns
            ``weights`` and ``indexes``.
        alpha, eps: cpprb's prioritization exponent and the constant added to priorities,
            p = (|δ| + eps)^alpha.
        default_dtype: dtype of the fields whose ``env_dict`` entry names none.
        seed: herl's addition: the seed of the buffer's generator, for reproducible relabeling and sampling.
    """

    def __init__(
        self,
        size: int,
        env_dict: Mapping[str, Mapping[str, Any]],
        max_episode_len: int,
        reward_func: Callable[[np.ndarray, np.ndarray, np.ndarray], Any],
        *,
        goal_func: Callable[[np.ndarray], Any] | None = None,
        goal_shape: Iterable[int] | int | None = None,
        state: str = "obs",
        action: str = "act",
        next_state: str = "next_obs",
        strategy: str = "future",
        additional_goals: int = 4,
        prioritized: bool = True,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        for name, why in _REJECTED.items():
            if kwargs.get(name):
                raise ValueError(f"{name}={kwargs[name]!r} is not supported by herl's HindsightReplayBuffer: {why}")
            kwargs.pop(name, None)
        default_dtype = np.dtype(kwargs.pop("default_dtype", None) or np.float32)
        per = {key: kwargs.pop(key, default) for key, default in _PER_DEFAULTS.items()}
        if kwargs:
            # cpprb ignores unknown names, so a typo silently keeps the default (cpprb's own HER test passes
            # "additonal_goals=1" and gets 4); herl names it and the closest known argument
            known = ["goal_func", "goal_shape", "state", "action", "next_state", "strategy", "additional_goals",
                     "prioritized", "seed", "default_dtype", *_PER_DEFAULTS, *_REJECTED]
            hints = [f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name)
                     for name in sorted(kwargs) for close in [difflib.get_close_matches(name, known, n=1)]]
            raise TypeError(
                f"unexpected keyword argument(s) {', '.join(hints)}: herl's HindsightReplayBuffer takes cpprb's "
                f"alpha, eps and default_dtype (and seed) besides its named arguments"
            )
        owner = "HindsightReplayBuffer"
        # checked under cpprb's names (the engine's would say priority_eps), never float()-converted raw
        check(owner, "alpha", per["alpha"], number(0.0))
        check(owner, "eps", per["eps"], number(0.0, low_open=True, note="a zero priority would never be drawn again"))
        per = {key: float(value) for key, value in per.items()}
        size = as_integer(owner, "size", size)
        max_episode_len = as_integer(owner, "max_episode_len", max_episode_len)
        additional_goals = as_integer(owner, "additional_goals", additional_goals, NON_NEGATIVE_INT)
        if strategy not in ("future", "episode", "random", "final"):
            raise ValueError(f"unknown strategy {strategy!r}: use 'future', 'episode', 'random' or 'final'")
        for role, name in (("state", state), ("action", action), ("next_state", next_state)):
            if name not in env_dict:
                raise ValueError(f"env_dict has no {name!r} entry, which {role}={name!r} names: add it or pass {role}=")
        for reserved in ("rew", "goal"):
            if reserved in env_dict:
                raise ValueError(f"env_dict must not contain {reserved!r}: the buffer adds it (as cpprb does)")

        self.fields = {
            name: (_shape(spec.get("shape")), np.dtype(spec.get("dtype") or default_dtype)) for name, spec in env_dict.items()
        }
        if self.fields[state] != self.fields[next_state]:
            raise ValueError(f"{state!r} is {self.fields[state]} but {next_state!r} is {self.fields[next_state]}: they must match")
        state_shape, state_dtype = self.fields[state]
        self.goal_shape = state_shape if goal_shape is None else _shape(goal_shape)
        self.goal_dtype = state_dtype  # cpprb stores goals with the state's dtype
        self.reward_dtype = default_dtype
        self.state, self.action, self.next_state = state, action, next_state
        self.extras = [name for name in env_dict if name not in (state, action, next_state)]
        self.reward_func = reward_func
        self.goal_func = goal_func
        self.strategy = strategy
        self.additional_goals = 1 if strategy == "final" else int(additional_goals)
        self.prioritized = bool(prioritized)
        self.alpha, self.eps = per["alpha"], per["eps"]
        self.size = int(size)
        self.max_episode_len = int(max_episode_len)

        goal_box = _box(self.goal_shape, self.goal_dtype)
        observation_space = spaces.Dict(
            {
                "observation": _box(state_shape, state_dtype),
                "achieved_goal": goal_box,
                "desired_goal": goal_box,
                # Extra fields ride along as observation keys, the one place where the engine both
                # stores and returns arbitrary fields (engine change wanted: samples that carry the
                # stored info/<key> fields, so that these need not be stored with both states).
                **{_extra_key(name): _box(*self.fields[name]) for name in self.extras},
            }
        )
        try:
            self._engine = HerReplayBuffer(
                self.size, observation_space, _box(*self.fields[action]), device="cpu",
                n_sampled_goal=self.additional_goals, goal_selection_strategy=strategy,
                compute_reward=self._compute_reward, online_sampling=False, max_episode_length=self.max_episode_len,
                reward_context=("action", "next_observation"), seed=seed,
                prioritized=self.prioritized, alpha=self.alpha, priority_eps=self.eps,
            )
        except ValueError as err:
            if "compute_reward" not in str(err):
                raise
            hint = ("; goal_func gives goals of another shape than the state's? then give goal_shape too"
                    if goal_func is not None and goal_shape is None else "")
            raise ValueError(
                f"reward_func must be batched: reward_func(next_state, action, goal) with arrays shaped (batch, ...) "
                f"returns one reward per row ({err}){hint}"
            ) from err
        # the running episode, as cpprb stages it, until on_episode_end gives its goal
        self._episode = {name: np.zeros((self.max_episode_len, *shape), dtype) for name, (shape, dtype) in self.fields.items()}
        self._episode_len = 0
        self._field_names = self._episode.keys()
        self._field_sizes = {name: int(np.prod(shape)) for name, (shape, _) in self.fields.items()}
        self._field_shapes = {name: shape for name, (shape, _) in self.fields.items()}
        self._not_ended, self._ended = np.zeros(1, bool), np.ones(1, bool)

    def _compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: dict[str, np.ndarray]):
        # checked here, so that a wrong result names the user's argument, reward_func, not the engine's compute_reward
        try:
            rewards = self.reward_func(info["next_observation"], info["action"], desired_goal)
        except Exception as err:
            err.add_note("raised by reward_func(next_state, action, goal), called with the relabeled goals")
            raise
        return goal_function_values(rewards, len(desired_goal), "reward_func")

    def _goals(self, states: np.ndarray) -> np.ndarray:
        goals = states if self.goal_func is None else self.goal_func(states)
        goals = np.asarray(goals, dtype=self.goal_dtype)
        expected = (len(states), *self.goal_shape)
        if goals.shape != expected:
            if goals.size != np.prod(expected):
                raise ValueError(
                    f"goal_func returned shape {goals.shape} for {len(states)} states, expected {expected}: goal_func "
                    "must be batched, and goal_shape must be the shape of one goal"
                )
            goals = goals.reshape(expected)
        return goals

    # ------------------------------------------------------------------ adding
    def add(self, **kwargs: Any) -> None:
        """Stage one transition, or a batch of them along a leading axis, of the running episode."""
        if kwargs.keys() != self._field_names:
            missing = [name for name in self.fields if name not in kwargs]
            unknown = [name for name in kwargs if name not in self.fields]
            raise ValueError(
                f"add() takes exactly the env_dict fields {list(self.fields)}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {unknown}" if unknown else "")
            )
        # cpprb reads every value as a flat run of numbers: the state's count of them over one state's gives the
        # number of transitions n, and each field is reshaped to (n, *shape). Lists, scalars and CPU torch tensors
        # are taken as numpy arrays first.
        state = kwargs[self.state]
        if type(state) is not np.ndarray:
            state = np.asarray(state)
        sizes, shapes = self._field_sizes, self._field_shapes
        n, partial = divmod(state.size, sizes[self.state])
        if partial or n == 0:
            raise ValueError(f"{self.state} has shape {state.shape}: expected {shapes[self.state]} for one "
                             f"transition or (n, *{shapes[self.state]}) for n")
        start = self._episode_len
        if start + n > self.max_episode_len:
            raise ValueError(
                f"the episode exceeds max_episode_len={self.max_episode_len}: call on_episode_end(goal) when an "
                "episode ends, or raise max_episode_len"
            )
        episode = self._episode
        for name, value in kwargs.items():
            if type(value) is not np.ndarray:
                value = np.asarray(value)
            if value.size != n * sizes[name]:  # assignment alone would broadcast a wrong-sized value silently
                # (rows written before this one lie past the episode's length: the next add overwrites them)
                raise ValueError(f"{name} has shape {value.shape}; expected {shapes[name]} for one transition or "
                                 f"({n}, *{shapes[name]}) for {n}, as {self.state} holds {n}")
            if n == 1:  # assignment casts as cpprb does (-1 into uint8 is 255)
                episode[name][start] = value if value.shape == shapes[name] else value.reshape(shapes[name])
            else:
                episode[name][start:start + n] = value.reshape((n, *shapes[name]))
        self._episode_len = start + n

    def on_episode_end(self, goal: Any) -> None:
        """End the running episode, whose desired goal was ``goal``: store it once as it happened and
        ``additional_goals`` times relabeled, so ``get_stored_size()`` grows by (k+1)·T."""
        length = self._episode_len
        if length == 0:
            return
        # Everything that can fail (the goal's shape, goal_func, reward_func) runs before the episode leaves the
        # staging area: an error leaves the buffer as it was, and a retry with the right goal stores the episode.
        episode = {name: values[:length] for name, values in self._episode.items()}
        states, next_states, actions = episode[self.state], episode[self.next_state], episode[self.action]
        desired = self._goal_rows(goal, length)
        obs = {"observation": states, "achieved_goal": self._goals(states), "desired_goal": desired}
        next_obs = {"observation": next_states, "achieved_goal": self._goals(next_states), "desired_goal": desired}
        for name in self.extras:
            obs[_extra_key(name)] = next_obs[_extra_key(name)] = episode[name]
        rewards = goal_function_values(self.reward_func(next_states, actions, desired), length, "reward_func")
        for name, values in [*obs.items(), *((f"next {k}", v) for k, v in next_obs.items()), ("action", actions)]:
            if values.dtype.kind == "f" and not np.isfinite(values).all():
                raise NonFiniteError(f"the episode's {name} holds NaN or infinity: nothing was stored (the episode "
                                     "stays staged; clear() drops it)")
        try:
            # the engine relabels at the episode's last step, calling reward_func again on the new goals; if that
            # raises, it puts its main store back as it was
            self._store_episode(obs, next_obs, actions, rewards, length)
        except BaseException as err:
            self._engine.storage.clear()  # the staging area holds only this episode: drop its partial copy
            if isinstance(err, Exception):
                err.add_note("on_episode_end stored nothing: the episode stays staged, so a call with a fixed "
                             "reward_func or goal stores it (clear() drops it)")
            raise
        self._episode_len = 0

    def _goal_rows(self, goal: Any, length: int) -> np.ndarray:
        try:
            goal = np.asarray(goal, dtype=self.goal_dtype)
            return np.broadcast_to(goal.reshape(-1, *self.goal_shape), (length, *self.goal_shape))
        except (TypeError, ValueError) as err:
            raise ValueError(f"on_episode_end(goal): goal has shape {np.shape(goal)}, expected {self.goal_shape} (one "
                             f"goal) or ({length}, *{self.goal_shape}) (one per transition) ({err}); nothing was "
                             "stored, the episode stays staged for a retry") from None

    def _store_episode(self, obs: dict[str, np.ndarray], next_obs: dict[str, np.ndarray], actions: np.ndarray,
                       rewards: np.ndarray, length: int) -> None:
        # The engine takes one transition per call (rows shaped (1, ...)); the last one ends the
        # episode, which relabels it into the main store (engine change wanted: add a whole episode
        # in one call). Iterating arrays with an added axis yields those rows as views, cheaply.
        keys = list(obs)
        rows = zip(
            zip(*[obs[k][:, None] for k in keys]), zip(*[next_obs[k][:, None] for k in keys]),
            actions[:, None], rewards[:, None],
        )
        add, not_ended, last = self._engine.add, self._not_ended, length - 1
        for t, (obs_row, next_row, action, reward) in enumerate(rows):
            add(dict(zip(keys, obs_row)), dict(zip(keys, next_row)), action, reward,
                terminated=not_ended, truncated=self._ended if t == last else not_ended)

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int, beta: float = 0.4) -> dict[str, np.ndarray]:
        """``batch_size`` stored transitions (with replacement) as a dict of arrays: the env_dict
        fields, ``rew`` and ``goal``, plus ``weights`` and ``indexes`` when prioritized. ``beta``
        (the importance-sampling exponent) only matters when prioritized."""
        if self.get_stored_size() == 0:
            raise ValueError("nothing is stored yet: transitions enter the buffer at on_episode_end(goal)")
        batch = self._engine.sample(batch_size, beta=beta) if self.prioritized else self._engine.sample(batch_size)
        numpy = {k: v.numpy() for k, v in batch.observations.items()}
        out = self._as_cpprb(numpy, batch.next_observations["observation"].numpy(), batch.actions.numpy(),
                             batch.rewards.numpy())
        if self.prioritized:
            out["weights"] = batch.weights.numpy().reshape(-1)
            out["indexes"] = batch.indexes.astype(np.uint64)
        return out

    def _as_cpprb(self, obs: dict[str, np.ndarray], next_states: np.ndarray, actions: np.ndarray,
                  rewards: np.ndarray) -> dict[str, np.ndarray]:
        """Engine rows as cpprb returns them: the env_dict fields, ``rew`` shaped (n, 1) and ``goal``."""
        out = {}
        for name in self.fields:
            if name == self.state:
                out[name] = obs["observation"]
            elif name == self.next_state:
                out[name] = next_states
            elif name == self.action:
                out[name] = actions
            else:
                out[name] = obs[_extra_key(name)]
        out["rew"] = rewards.reshape(-1, 1).astype(self.reward_dtype, copy=False)
        out["goal"] = obs["desired_goal"]
        return out

    def get_all_transitions(self, shuffle: bool = False) -> dict[str, np.ndarray]:
        """Every stored transition (relabeled copies included, the running episode not), in storage order as
        cpprb returns them, or shuffled: the same fields as :meth:`sample`, without ``weights``/``indexes``."""
        store = self._engine.relabeled
        rows = np.flatnonzero(store.is_transition[:, 0])
        if shuffle:
            rows = self._engine.rng.permutation(rows)
        obs, next_obs, transitions = GatheredRows(store, rows).fields()
        shapes = {name: self.fields[name][0] for name in self.fields}
        obs = {k: v.reshape(len(rows), *self._obs_shape(k, shapes)) for k, v in obs.items()}
        actions = transitions["action"].reshape(len(rows), *shapes[self.action])
        next_states = next_obs["observation"].reshape(len(rows), *shapes[self.next_state])
        return self._as_cpprb(obs, next_states, actions, transitions["reward"])

    def _obs_shape(self, key: str, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
        if key == "observation":
            return shapes[self.state]
        if key in ("achieved_goal", "desired_goal"):
            return self.goal_shape
        return shapes[key[len(_EXTRA_PREFIX):]]

    def get_max_priority(self) -> float:
        """The highest priority given so far (1.0 before any update), which newly stored transitions get."""
        if not self.prioritized:
            raise ValueError("get_max_priority needs prioritization: construct the buffer with prioritized=True")
        return self._engine.max_priority()

    def update_priorities(self, indexes: Any, priorities: Any) -> None:
        """Set the priorities of sampled transitions (usually |TD error|): p = (|priority| + eps)^alpha."""
        if not self.prioritized:
            raise ValueError("update_priorities needs prioritization: construct the buffer with prioritized=True")
        if indexes is None or priorities is None:
            raise TypeError("update_priorities needs indexes and priorities (from sample()'s 'indexes' and your TD errors)")
        if isinstance(priorities, torch.Tensor):
            priorities = priorities.detach().cpu().numpy()
        # the engine stores |p| + priority_eps, which is cpprb's |p| + eps
        self._engine.update_priorities(np.asarray(indexes, dtype=np.int64), priorities)

    # ------------------------------------------------------------------ sizes
    def get_stored_size(self) -> int:
        """Transitions in the main store (relabeled copies included); the running episode is not counted."""
        return len(self._engine)

    def get_buffer_size(self) -> int:
        return self.size

    def clear(self) -> None:
        """Forget everything, the running episode included."""
        self._engine.reset()
        self._episode_len = 0

    @property
    def engine(self) -> HerReplayBuffer:
        """The herl engine underneath (e.g. for ``save``)."""
        return self._engine
