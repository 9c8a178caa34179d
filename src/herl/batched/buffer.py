"""HER replay on the device for batched goal envs: whole steps of every env stored at once, goals sampled by indexing.

Storage is time-major: row ``r`` holds step ``r`` of every env, so one ``add`` writes one row, and the ring wraps
over rows. Rows are also counted by an *absolute* row number that never wraps (a slot is ``absolute % rows``), which
is what the episode book-keeping is made of:

- every stored step knows the absolute row where its episode started;
- every episode's last row is written once, when it ends, at its *first* slot (one entry per env per ``add``, not a
  write into each of its rows): a stored step finds its episode's end through its start;
- each env knows the first row from which all its stored episodes are whole. Episodes are contiguous per env, so
  the transitions that may be sampled are, per env, one contiguous range of rows ending at the latest one, and a
  uniform draw among them all is a cumulative sum over envs and a binary search.

So ``add`` and ``sample`` cost a few tensor operations of size ``n_envs`` or ``batch_size``, whatever the number of
envs and the buffer's size: no scan of the buffer, no Python per env or per episode, and no value read back from the
device (each read waits for the device to finish its queue).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from gymnasium import spaces

from herl.buffers.samples import DictReplayBufferSamples
from herl.buffers.strategies import GoalSelectionStrategy, parse_strategy
from herl.errors import POSITIVE_INT, ConfigError, check, integer

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
STRATEGIES = (GoalSelectionStrategy.FUTURE, GoalSelectionStrategy.FINAL, GoalSelectionStrategy.EPISODE)
NEVER = 2**62
"""``valid_from`` of an env none of whose stored rows may be sampled (its running episode lost its first row to the
ring: only an env longer than its ``max_episode_steps`` does that); its next episode's first row replaces it."""
_OWNER = "BatchedHerBuffer"


class BatchedHerBuffer:
    """Hindsight Experience Replay (Andrychowicz et al. 2017) for :class:`~herl.batched.env.BatchedGoalEnv` rollouts,
    on the envs' device.

    ``add`` takes one step of every env (what :class:`~herl.batched.env.BatchedStep` holds); ``sample`` draws
    transitions uniformly among those whose episode is whole in storage and relabels a fraction k/(k+1) of them with
    an achieved goal of their own episode, chosen as ``HerReplayBuffer`` chooses it, so the two give batches of the
    same distribution.

    Args:
        capacity: Transitions held, all envs together: ``capacity // n_envs`` steps of every env. At least two
            episodes of every env (``2 * n_envs * max_episode_steps``): the ring overwrites an env's oldest episode
            a step at a time, and that episode stops being sampled at its first overwritten step, so a buffer of one
            episode per env would keep almost nothing to relabel.
        n_envs: Envs stepped together; each ``add`` stores one step of each.
        observation_space: The env's ``single_observation_space``: a ``Dict`` of ``Box`` es under exactly the keys
            ``observation``, ``achieved_goal`` and ``desired_goal`` (stored as float32).
        action_space: The env's ``single_action_space``: a ``Box`` (stored as float32) or a ``Discrete`` (stored
            as int64 and returned shaped ``(batch, 1)``, as herl's other buffers return it).
        compute_reward: The env's batched ``compute_reward``, called as ``compute_reward(achieved_goal=...,
            desired_goal=...)`` (by keyword, so that an implementation taking them in the other order still gets
            each right) on ``(batch, goal_dim)`` tensors; returns ``(batch,)`` rewards.
        compute_terminated: The env's batched ``compute_terminated``, called the same way, for envs that end on
            success: a relabeled transition is terminal when its new goal is reached. None: relabeled transitions
            keep their stored termination flag.
        max_episode_steps: The envs' time limit. No episode may be longer: the buffer's size is checked against it,
            and an episode that outlives the ring's ``capacity // n_envs`` rows is never sampled.
        n_sampled_goal: k, relabeled goals per real one: a fraction k/(k+1) of each batch is relabeled; 0 is plain
            replay.
        goal_selection_strategy: Which achieved goal a relabeled transition gets: ``"future"``, the next achieved
            goal of a step drawn uniformly from the transition's own to its episode's last, both included (the
            paper's "future"; the transition's own outcome counts, the episode's final state too); ``"final"``,
            the episode's last; ``"episode"``, any step of the episode. An episode still running counts up to its
            latest step.
        device: Where the storage lives and batches are made: the envs' device.
        seed: Seed of the buffer's own ``torch.Generator`` (on ``device``): the same seed and the same steps give
            the same batches. None: a random seed.
    """

    def __init__(self, *, capacity: int, n_envs: int, observation_space: spaces.Dict, action_space: spaces.Space,
                 compute_reward: Callable[..., torch.Tensor],
                 compute_terminated: Callable[..., torch.Tensor] | None = None, max_episode_steps: int,
                 n_sampled_goal: int = 4, goal_selection_strategy: GoalSelectionStrategy | str = "future",
                 device: torch.device | str = "cpu", seed: int | None = None) -> None:
        check(_OWNER, "capacity", capacity, POSITIVE_INT)
        check(_OWNER, "n_envs", n_envs, POSITIVE_INT)
        check(_OWNER, "max_episode_steps", max_episode_steps, POSITIVE_INT)
        check(_OWNER, "n_sampled_goal", n_sampled_goal, integer(0, note="0 turns relabeling off"))
        check(_OWNER, "seed", seed, integer(0, also=(None,)))
        try:
            strategy = parse_strategy(goal_selection_strategy)
        except ValueError:
            strategy = None
        if strategy not in STRATEGIES:
            raise ConfigError(_OWNER, "goal_selection_strategy", goal_selection_strategy,
                              "one of 'future', 'final', 'episode' (goals of the transition's own episode; 'random' "
                              "goals from other episodes are for HerReplayBuffer)")
        rows = int(capacity) // int(n_envs)
        if rows < 2 * max_episode_steps:
            raise ConfigError(_OWNER, "capacity", capacity,
                              f"at least 2 * n_envs * max_episode_steps = {2 * n_envs * max_episode_steps:,} (two "
                              f"whole episodes of each of the {n_envs} envs, {max_episode_steps} steps long), so that "
                              "the episode the ring is overwriting leaves whole episodes beside it: give a larger "
                              "capacity, or fewer envs")
        _check_goal_space(observation_space)
        if not callable(compute_reward):
            raise TypeError(f"{_OWNER}: compute_reward must be the env's batched compute_reward(achieved_goal, "
                            f"desired_goal), got {type(compute_reward).__name__}")
        if compute_terminated is not None and not callable(compute_terminated):
            raise TypeError(f"{_OWNER}: compute_terminated must be the env's batched compute_terminated(achieved_goal, "
                            f"desired_goal) or None, got {type(compute_terminated).__name__}")
        if isinstance(action_space, spaces.Discrete):
            self.discrete, self.action_shape, action_dtype = True, (1,), torch.int64
        elif isinstance(action_space, spaces.Box):
            self.discrete, self.action_shape, action_dtype = False, tuple(action_space.shape), torch.float32
        else:
            raise TypeError(f"{_OWNER} stores Box or Discrete actions, got {action_space}: batched envs act in one of "
                            "those")

        self.capacity, self.n_envs, self.rows = int(capacity), int(n_envs), rows
        self.max_episode_steps = int(max_episode_steps)
        self.n_sampled_goal = int(n_sampled_goal)
        self.goal_selection_strategy = strategy
        self.compute_reward, self.compute_terminated = compute_reward, compute_terminated
        # "cuda" names no index; the tensors made there say which device they are on, and add compares with that
        self.device = torch.empty(0, device=device).device
        self.generator = torch.Generator(device=self.device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))
        # offsets are floor(u * count) with u a float64 in [0, 1), as herl.buffers.strategies.uniform_integers; MPS
        # has no float64 (float32's rounding is caught by the clamp below each draw)
        self._uniform_dtype = torch.float32 if self.device.type == "mps" else torch.float64

        self.obs_shapes = {k: tuple(observation_space[k].shape) for k in GOAL_KEYS}
        empty = lambda shape, dtype=torch.float32: torch.zeros((rows, self.n_envs, *shape), dtype=dtype,
                                                                device=self.device)
        self.obs = {k: empty(s) for k, s in self.obs_shapes.items()}
        self.next_obs = {k: empty(s) for k, s in self.obs_shapes.items()}
        self.actions = empty(self.action_shape, action_dtype)
        self.rewards = empty(())
        self.terminated = empty((), torch.bool)
        self.episode_start = empty((), torch.int64)
        """Per stored step: the absolute row where its episode started."""
        self.episode_end = torch.full((rows, self.n_envs), -1, dtype=torch.int64, device=self.device)
        """At an episode's *first* slot: the absolute row of its last step, -1 while it runs (other slots: unused)."""
        self.running_start = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        """Per env: the absolute row where its running episode started."""
        self.valid_from = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        """Per env: the first absolute row of its oldest episode that is whole in storage; its rows from there to the
        latest are the ones sampled (:data:`NEVER`: none)."""
        self.written = 0
        """Absolute rows written: one per ``add``, on the host (no read from the device to know it)."""
        self._env_index = torch.arange(self.n_envs, device=self.device)
        self._her_ratio = torch.tensor(self.n_sampled_goal / (self.n_sampled_goal + 1), device=self.device)

    # ------------------------------------------------------------------ storing
    def add(self, obs: Mapping[str, torch.Tensor], actions: torch.Tensor, reward: torch.Tensor,
            terminated: torch.Tensor, truncated: torch.Tensor, final_obs: Mapping[str, torch.Tensor]) -> None:
        """Store one step of every env.

        ``obs`` is what the envs acted on and ``final_obs`` where their step led, before any reset (the step's
        ``final_obs``, not its ``obs``: relabeling needs the true next achieved goals). ``actions`` as the envs took
        them: ``(n_envs, *shape)`` floats for a Box, ``(n_envs,)`` or ``(n_envs, 1)`` integer indices for a Discrete.
        ``reward`` ``(n_envs,)`` floats, ``terminated`` and ``truncated`` ``(n_envs,)`` bools: an episode ends where
        either is set, and only ``terminated`` becomes a done (a time limit is bootstrapped through).
        """
        n = self.n_envs
        for name, given in (("obs", obs), ("final_obs", final_obs)):
            if not isinstance(given, Mapping):
                raise TypeError(f"{_OWNER}.add: {name} must be a dict of tensors with keys {list(GOAL_KEYS)}, got "
                                f"{type(given).__name__}")
            for key, shape in self.obs_shapes.items():
                self._check(f"{name}[{key!r}]", given.get(key), (n, *shape), "float")
        if self.discrete and isinstance(actions, torch.Tensor) and actions.dim() == 1:
            actions = actions[:, None]
        self._check("actions", actions, (n, *self.action_shape), "integer" if self.discrete else "float")
        self._check("reward", reward, (n,), "float")
        self._check("terminated", terminated, (n,), "bool")
        self._check("truncated", truncated, (n,), "bool")

        r = self.written
        slot = r % self.rows
        if r >= self.rows:
            # the ring overwrites row r - rows: an episode that started there loses its first step and stops being
            # sampled (its goals would come from a partial episode); its env's sampled rows then start after its end
            lost = self.valid_from == r - self.rows
            old_end = self.episode_end[slot]
            self.valid_from = torch.where(lost, torch.where(old_end >= 0, old_end + 1, NEVER), self.valid_from)
        # slot's entries belonged to episodes that started at the overwritten row; an episode starting here runs
        self.episode_end[slot] = -1
        for key in GOAL_KEYS:
            self.obs[key][slot] = obs[key]
            self.next_obs[key][slot] = final_obs[key]
        self.actions[slot] = actions
        self.rewards[slot] = reward
        self.terminated[slot] = terminated
        self.episode_start[slot] = self.running_start
        ended = terminated | truncated
        # an ended episode's last row, at its first slot: one entry per env, read through each step's start
        first = (self.running_start % self.rows, self._env_index)
        self.episode_end[first] = torch.where(ended, r, self.episode_end[first])
        self.valid_from = torch.where(ended & (self.valid_from == NEVER), r + 1, self.valid_from)
        self.running_start = torch.where(ended, r + 1, self.running_start)
        self.written = r + 1

    def _check(self, name: str, value: Any, shape: tuple[int, ...], kind: str) -> None:
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{_OWNER}.add: {name} must be a torch tensor of shape {shape} on {self.device}, got "
                            f"{type(value).__name__}")
        if tuple(value.shape) != shape:
            raise ValueError(f"{_OWNER}.add: {name} has shape {tuple(value.shape)}, expected {shape} (the env axis "
                             f"first, n_envs={self.n_envs})")
        if value.device != self.device:
            raise ValueError(f"{_OWNER}.add: {name} is on {value.device} but the buffer on {self.device}: keep the "
                             "envs and the buffer on one device")
        floating = value.is_floating_point()
        boolean = value.dtype == torch.bool
        if (kind == "float" and not floating) or (kind == "bool" and not boolean) or (
                kind == "integer" and (floating or boolean or value.is_complex())):
            expected = {"float": "floats (torch.float32)", "bool": "bools (torch.bool)",
                        "integer": "integer indices of a Discrete space (torch.int64)"}[kind]
            raise ValueError(f"{_OWNER}.add: {name} has dtype {value.dtype}, expected {expected}")

    # ------------------------------------------------------------------ sampling
    def __len__(self) -> int:
        """Transitions that ``sample`` may draw: those of episodes whole in storage (running ones included). Reads
        one number from the device: for reports, not for the training loop."""
        return int(self._sampleable().sum())

    def _sampleable(self) -> torch.Tensor:
        """Per env, how many of its stored rows may be sampled (NEVER gives a negative count: none)."""
        return (self.written - self.valid_from).clamp_(min=0)

    def _draw_slots(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(absolute rows, envs)`` of ``batch_size`` transitions drawn uniformly among those that may be sampled:
        each env's are the rows from its ``valid_from`` to the latest, so a uniform index into their concatenation,
        located by a binary search of the cumulative counts, is exact (no rejection, no read from the device)."""
        if self.written == 0:
            raise RuntimeError(f"{_OWNER}.sample: the buffer is empty: add steps of the envs before sampling")
        count = self._sampleable()
        cumulative = count.cumsum(0)
        total = cumulative[-1]
        # Only envs that all break their time limit get here. Checked on the CPU, where reading the count is free;
        # elsewhere the check would wait for the device at every batch, and such a batch holds rows of those
        # partial episodes.
        if self.device.type == "cpu" and int(total) == 0:
            raise RuntimeError(f"{_OWNER}.sample: no whole episode is stored: every env is running an episode longer "
                               f"than the buffer's {self.rows} steps per env, far beyond max_episode_steps="
                               f"{self.max_episode_steps}: the env must end its episodes at that limit")
        u = torch.rand(batch_size, generator=self.generator, device=self.device, dtype=self._uniform_dtype)
        index = torch.minimum((u * total).long(), total - 1)
        envs = torch.searchsorted(cumulative, index, right=True).clamp_(max=self.n_envs - 1)
        absolute = self.valid_from[envs] + index - (cumulative[envs] - count[envs])
        return absolute, envs

    def sample(self, batch_size: int) -> DictReplayBufferSamples:
        """``batch_size`` transitions on the buffer's device, the last rows of the batch relabeled.

        How many are relabeled is binomial with probability k/(k+1), and they are the batch's last rows, as in
        ``HerReplayBuffer`` (rows are drawn independently, so which rows is immaterial). A relabeled row's
        ``desired_goal`` (in ``observations`` and ``next_observations``) is the strategy's achieved goal, its reward
        ``compute_reward`` of its next achieved goal and that goal, and its done ``compute_terminated`` of them when
        given (else the stored termination). Other rows are as stored. ``dones`` are terminations only, and they and
        ``rewards`` come shaped ``(batch, 1)`` float32. Storage is never changed: every tensor is a copy.
        """
        check(f"{_OWNER}.sample", "batch_size", batch_size, POSITIVE_INT)
        absolute, envs = self._draw_slots(batch_size)
        # one flat index per transition (slot * n_envs + env) into the storage seen as one axis of slots and envs:
        # index_select with it gathers several times faster than indexing by (slot, env) pairs, field after field
        at = absolute % self.rows * self.n_envs + envs
        gather = lambda stored: stored.flatten(0, 1).index_select(0, at)
        obs = {k: gather(v) for k, v in self.obs.items()}
        next_obs = {k: gather(v) for k, v in self.next_obs.items()}
        actions, rewards, dones = gather(self.actions), gather(self.rewards), gather(self.terminated)
        if self.n_sampled_goal:
            g = self.generator
            relabeled = torch.binomial(torch.full((), float(batch_size), device=self.device), self._her_ratio,
                                       generator=g)
            her = torch.arange(batch_size, device=self.device) >= batch_size - relabeled
            goal_rows = self._goal_rows(absolute, at, envs)
            goal_at = goal_rows % self.rows * self.n_envs + envs
            goals = self.next_obs["achieved_goal"].flatten(0, 1).index_select(0, goal_at)
            obs["desired_goal"] = torch.where(her[:, None], goals, obs["desired_goal"])
            next_obs["desired_goal"] = torch.where(her[:, None], goals, next_obs["desired_goal"])
            achieved, desired = next_obs["achieved_goal"], obs["desired_goal"]
            # every row is scored (no boolean selection, whose size the host would wait for); the rows kept as
            # stored discard theirs
            new_rewards = self._goal_values("compute_reward", self.compute_reward, achieved, desired)
            rewards = torch.where(her, new_rewards.to(torch.float32), rewards)
            if self.compute_terminated is not None:
                new_dones = self._goal_values("compute_terminated", self.compute_terminated, achieved, desired)
                dones = torch.where(her, new_dones.to(torch.bool), dones)
        return DictReplayBufferSamples(observations=obs, actions=actions, next_observations=next_obs,
                                       dones=dones.to(torch.float32)[:, None], rewards=rewards[:, None])

    def _goal_rows(self, absolute: torch.Tensor, at: torch.Tensor, envs: torch.Tensor) -> torch.Tensor:
        """The absolute rows whose next achieved goal relabels each transition (stored at flat index ``at``), chosen
        by the strategy."""
        start = self.episode_start.flatten(0, 1).index_select(0, at)
        end = self.episode_end.flatten(0, 1).index_select(0, start % self.rows * self.n_envs + envs)
        end = torch.where(end < 0, self.written - 1, end)  # a running episode: its latest step
        if self.goal_selection_strategy is GoalSelectionStrategy.FINAL:
            return end
        first = absolute if self.goal_selection_strategy is GoalSelectionStrategy.FUTURE else start
        # an integer uniform in [first, end]: floor(u * count), never a rounded float (which halves the end points'
        # chances); the same draw as HerReplayBuffer's
        count = end - first + 1
        u = torch.rand(absolute.shape, generator=self.generator, device=self.device, dtype=self._uniform_dtype)
        return first + torch.minimum((u * count).long(), count - 1)

    def _goal_values(self, name: str, function: Callable[..., torch.Tensor], achieved: torch.Tensor,
                     desired: torch.Tensor) -> torch.Tensor:
        values = function(achieved_goal=achieved, desired_goal=desired)
        n = achieved.shape[0]
        if not isinstance(values, torch.Tensor) or tuple(values.shape) != (n,) or values.device != self.device:
            got = (f"shape {tuple(values.shape)} on {values.device}" if isinstance(values, torch.Tensor)
                   else type(values).__name__)
            raise ValueError(f"{_OWNER}.sample: {name}(achieved_goal, desired_goal) of {n} goals gave {got}, expected "
                             f"a tensor of shape ({n},) on {self.device}: one value per goal, batched over the "
                             "leading axis")
        return values

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Everything :meth:`load_state_dict` needs for a buffer that samples what this one would: the filled rows
        of storage, the book-keeping, the counters and the generator's state. The storage tensors are views of the
        buffer's own (as ``torch.nn.Module.state_dict``'s are): copy or write them out before adding more steps."""
        filled = min(self.written, self.rows)
        state = {f"obs/{k}": v[:filled] for k, v in self.obs.items()}
        state.update({f"next_obs/{k}": v[:filled] for k, v in self.next_obs.items()})
        state.update(actions=self.actions[:filled], rewards=self.rewards[:filled], terminated=self.terminated[:filled],
                     episode_start=self.episode_start[:filled], episode_end=self.episode_end[:filled],
                     running_start=self.running_start, valid_from=self.valid_from,
                     written=torch.tensor(self.written, dtype=torch.int64), rows=torch.tensor(self.rows),
                     generator=self.generator.get_state())
        return state

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Continue from :meth:`state_dict` of a buffer built with the same arguments (its tensors may be on any
        device; they are copied)."""
        for key in ("written", "rows", "generator"):
            if key not in state:
                raise ValueError(f"{_OWNER}.load_state_dict: the state lacks {key!r}: pass a {_OWNER}.state_dict()")
        if int(state["rows"]) != self.rows:
            raise ValueError(f"{_OWNER}.load_state_dict: the state holds {int(state['rows'])} steps per env, this "
                             f"buffer {self.rows} (capacity // n_envs): build it with the capacity and n_envs of the "
                             "buffer that was saved")
        written = int(state["written"])
        filled = min(written, self.rows)
        expected = {**{f"obs/{k}": (filled, self.n_envs, *s) for k, s in self.obs_shapes.items()},
                    **{f"next_obs/{k}": (filled, self.n_envs, *s) for k, s in self.obs_shapes.items()},
                    "actions": (filled, self.n_envs, *self.action_shape), "rewards": (filled, self.n_envs),
                    "terminated": (filled, self.n_envs), "episode_start": (filled, self.n_envs),
                    "episode_end": (filled, self.n_envs), "running_start": (self.n_envs,),
                    "valid_from": (self.n_envs,)}
        for key, shape in expected.items():
            if key not in state or tuple(state[key].shape) != shape:
                got = tuple(state[key].shape) if key in state else "missing"
                raise ValueError(f"{_OWNER}.load_state_dict: {key} is {got}, expected {shape}: pass the state_dict() "
                                 "of a buffer with the same n_envs and observation and action spaces")
        for key in GOAL_KEYS:
            self.obs[key][:filled] = state[f"obs/{key}"]
            self.next_obs[key][:filled] = state[f"next_obs/{key}"]
        for name in ("actions", "rewards", "terminated", "episode_start", "episode_end"):
            getattr(self, name)[:filled] = state[name]
        self.running_start = state["running_start"].to(self.device, torch.int64, copy=True)
        self.valid_from = state["valid_from"].to(self.device, torch.int64, copy=True)
        self.written = written
        self.generator.set_state(state["generator"].to("cpu", torch.uint8))


def _check_goal_space(observation_space: Any) -> None:
    """The buffer stores the three goal-env keys and nothing else; a key it dropped would be missing from batches."""
    if not isinstance(observation_space, spaces.Dict) or set(observation_space.spaces) != set(GOAL_KEYS):
        keys = list(observation_space.spaces) if isinstance(observation_space, spaces.Dict) else None
        raise ValueError(f"{_OWNER} needs a goal observation space: a Dict with exactly the keys {list(GOAL_KEYS)}, "
                         f"got {type(observation_space).__name__}" + (f" with keys {keys}" if keys is not None else "")
                         + ": pass the batched env's single_observation_space")
    for key in GOAL_KEYS:
        if not isinstance(observation_space[key], spaces.Box):
            raise ValueError(f"{_OWNER}: observation_space[{key!r}] is {observation_space[key]}, expected a Box")
    achieved, desired = observation_space["achieved_goal"].shape, observation_space["desired_goal"].shape
    if achieved != desired:
        raise ValueError(f"{_OWNER}: achieved_goal has shape {achieved} but desired_goal {desired}: they must match, "
                         "since an achieved goal becomes a desired goal when relabeling")
