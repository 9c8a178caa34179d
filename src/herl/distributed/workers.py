"""Many-worker collection (Ape-X style, Horgan et al. 2018): N Ray actors step their own env copies and ship whole
episodes to the learner, which stores them in its (HER) replay buffer and keeps updating while they collect.

- Each actor holds an acting copy of the model (the networks that act, with the learner's normalizer statistics)
  and its own env; :meth:`Collector.episode` plays one whole episode with the exploration the learner would use
  (random actions before ``learning_starts``, DQN's epsilon, action noise) and returns it.
- The learner keeps one episode request in flight per actor. Every ``broadcast_every`` updates it puts the acting
  weights into Ray's object store once (``ray.put``); each request carries the newest reference, so an actor acts
  with weights at most ``broadcast_every`` updates (and one episode) old.
- Env steps count what the actors collected and the learner stored: ``timesteps`` is the total over all actors.
  The update-to-data ratio is the single-process one (``gradient_steps`` per ``train_freq`` steps or episodes, one
  update per step for ``gradient_steps=-1``): the learner updates while the stored data allows more updates, and
  waits for episodes only when it has caught up. So the same settings give the same number of updates per env
  step as without workers; what changes is the policy lag, and the wall-clock time when collection was the cost.
- Evaluations can run on the actors too (``eval_hook``; ``eval.on_workers`` in a run): the episodes are split
  among them, each actor plays its share on an env of its own, seeded from the evaluation's seed and the actor's
  index, with the learner's newest weights.
- Episodes are added to the buffer step by step through its ``add`` (the path the single-process loop uses), one
  whole episode at a time, so HER's episode bookkeeping is the same as with one env.
- An actor whose process dies (a crash in the env, the OOM killer, a lost node) is restarted by Ray, up to
  :data:`ACTOR_RESTARTS` times each; the episode it was playing never arrives, so nothing of it is stored, and it is
  counted (``workers/lost_episodes``). Evaluation tasks are retried on the restarted actor (the same weights and seed
  play the same episodes). Past its restarts, :class:`~herl.run.errors.WorkersLost` stops the run.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from herl.distributed.cluster import ray_session
from herl.errors import NonFiniteError
from herl.run.errors import CLIError, WorkersLost
from herl.training import loop

# The networks an algorithm acts with (``_act``): the rest (critics, targets) never leaves the learner.
ACTING_NETS = ("encoder", "actor", "q_net")
ACTOR_RESTARTS = 3
"""Times Ray starts a worker's actor again after its process died, before the run stops (Ray's ``max_restarts``)."""
RESTART_WAIT = 300.0
"""Seconds an actor may take to come back after its death (a cluster with no CPU left for it would keep it waiting
forever) before the run stops."""


class Episode(NamedTuple):
    """One whole episode, as an actor ships it: arrays with a leading time axis."""

    obs: dict[str, np.ndarray] | np.ndarray
    next_obs: dict[str, np.ndarray] | np.ndarray
    actions: np.ndarray
    """In the policy's scale (what the buffer stores), shaped (T, *action shape)."""
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: list[dict[str, Any]]
    seconds: float
    """The actor's time to play it (acting and stepping), for the cost model of benchmarks/workers_throughput.py."""

    def __len__(self) -> int:
        return len(self.rewards)


def acting_spec(model: Any) -> dict[str, Any]:
    """What an actor needs to build an acting copy of ``model`` (plain data: spaces, settings, noise)."""
    from herl.io.spaces import space_to_json

    noise = model.action_noise
    return {"algorithm": type(model).__name__, "policy": model.policy_name, "config": model.config.to_json(),
            "policy_kwargs": model.policy_config.to_policy_kwargs(),
            "observation_space": space_to_json(model.observation_space),
            "action_space": space_to_json(model.action_space), "action_noise": None if noise is None else noise.to_json()}


def acting_weights(model: Any) -> dict[str, dict[str, np.ndarray]]:
    """The acting networks' weights as NumPy arrays (read without a copy from Ray's object store)."""
    return {name: {k: v.detach().cpu().numpy() for k, v in model.nets[name].state_dict().items()}
            for name in ACTING_NETS if name in model.nets}


class Collector:
    """A Ray actor: one env and an acting copy of the model; plays whole episodes on request."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], spec: dict[str, Any], seed: int) -> None:
        from herl.run.envs import make_env

        torch.set_num_threads(1)  # one core per actor: acting is a small forward pass
        self.env_id, self.env_kwargs, self.spec = env_id, env_kwargs, spec
        self.env = make_env(env_id, env_kwargs, training=True)
        self.eval_env: Any = None
        self.dict_obs = isinstance(self.env.observation_space, gym.spaces.Dict)
        self._seed(seed)

    def _seed(self, seed: int) -> None:
        """A fresh acting model whose exploration, and the env's next reset, follow ``seed``."""
        from herl.algorithms import ALGORITHMS
        from herl.io.spaces import space_from_json
        from herl.training.noise import noise_from_json

        spec = self.spec
        self.model = ALGORITHMS[spec["algorithm"]](
            spec["policy"], None, observation_space=space_from_json(spec["observation_space"]),
            action_space=space_from_json(spec["action_space"]), policy_kwargs=spec["policy_kwargs"],
            action_noise=noise_from_json(spec["action_noise"]), seed=seed, device="cpu", **spec["config"])
        self.reset_seed: int | None = seed
        self.version = -1

    def episode(self, weights: dict[str, dict[str, np.ndarray]], version: int, num_timesteps: int,
                total_timesteps: int, seed: int | None = None) -> Episode:
        """Play one episode with the given weights, exploring as the learner at ``num_timesteps`` would; with
        ``seed``, from a fresh seed (the learner sends one to an actor Ray restarted, which would otherwise replay
        the episodes of its first life)."""
        start = time.perf_counter()
        if seed is not None:
            self._seed(seed)
        model = self.model
        self._load(weights, version)
        model.num_timesteps, model._total_timesteps = num_timesteps, total_timesteps
        if model.action_noise is not None:
            model.action_noise.reset()
        obs, _ = self.env.reset(seed=self.reset_seed)  # seeded once; later resets continue the env's generator
        self.reset_seed = None
        steps: list[tuple[Any, ...]] = []
        done = False
        while not done:
            actions = model._collect_actions(self._batch(obs))
            next_obs, reward, terminated, truncated, info = self.env.step(model._unscale(actions)[0])
            steps.append((obs, next_obs, actions[0], reward, terminated, truncated, info))
            obs, done = next_obs, terminated or truncated
        observations, next_observations, actions, rewards, terminated, truncated, infos = zip(*steps)
        return Episode(self._stack(observations), self._stack(next_observations), np.stack(actions),
                       np.asarray(rewards, dtype=np.float32), np.asarray(terminated), np.asarray(truncated),
                       list(infos), time.perf_counter() - start)

    def ready(self) -> bool:
        """Answers once the actor is up (the learner's probe after Ray restarted it)."""
        return True

    def evaluate(self, weights: dict[str, dict[str, np.ndarray]], version: int, n_episodes: int, deterministic: bool,
                 seed: int) -> tuple[list[float], list[int], list[bool]]:
        """Play ``n_episodes`` evaluation episodes on an env of their own (the training env's episode is untouched);
        returns each episode's reward, length and success."""
        from herl.run.envs import endless_episode_guard, make_env
        from herl.training.evaluation import evaluate_policy

        self._load(weights, version)
        if self.eval_env is None:
            self.eval_env = make_env(self.env_id, self.env_kwargs)
        rewards, lengths, successes = evaluate_policy(
            self.model, self.eval_env, n_eval_episodes=n_episodes, deterministic=deterministic,
            return_episode_rewards=True, return_success_rate=True, seed=seed,
            callback=endless_episode_guard(self.eval_env, self.env_id))
        return [float(r) for r in rewards], [int(n) for n in lengths], [bool(x) for x in successes]

    def _load(self, weights: dict[str, dict[str, np.ndarray]], version: int) -> None:
        if version != self.version:
            for name, state in weights.items():
                self.model.nets[name].load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
            self.version = version

    def _batch(self, obs: Any) -> Any:
        return {k: np.asarray(v)[None] for k, v in obs.items()} if self.dict_obs else np.asarray(obs)[None]

    def _stack(self, observations: tuple[Any, ...]) -> Any:
        if self.dict_obs:
            return {k: np.stack([o[k] for o in observations]) for k in observations[0]}
        return np.stack(observations)


def add_episode(buffer: Any, episode: Episode) -> None:
    """Store a whole episode through the buffer's ``add``, one step at a time (for one env, ``n_envs=1``)."""
    def at(obs: Any, t: int) -> Any:
        return {k: v[t:t + 1] for k, v in obs.items()} if isinstance(obs, dict) else obs[t:t + 1]

    for t in range(len(episode)):
        buffer.add(at(episode.obs, t), at(episode.next_obs, t), episode.actions[t:t + 1], episode.rewards[t:t + 1],
                   infos=[episode.infos[t]], terminated=episode.terminated[t:t + 1],
                   truncated=episode.truncated[t:t + 1])


@dataclass
class WorkerStats:
    """Where the time went, filled by :func:`learn` when given one (benchmarks/workers_throughput.py)."""

    episodes: int = 0
    steps: int = 0
    actor_seconds: float = 0.0
    """Actors' time playing the episodes stored (acting and stepping), summed over actors."""
    transfer_seconds: float = 0.0
    """The learner's time getting the episodes from the object store (``ray.get``: transfer and unpickling)."""
    store_seconds: float = 0.0
    """The learner's time adding them to the replay buffer."""
    updates: int = 0
    update_seconds: float = 0.0
    broadcasts: int = 0
    broadcast_seconds: float = 0.0
    """The learner's time putting the acting weights into the object store."""
    wait_seconds: float = 0.0
    """The learner's time waiting for an episode with no update due (collection was the bottleneck)."""
    actor_deaths: int = 0
    """Times an actor's process died (or could not be reached) and Ray restarted it."""
    lost_episodes: int = 0
    """Episodes that never arrived because their actor died while playing them (none of them was stored)."""


def evaluation_shares(n_episodes: int, n_actors: int, seed: int) -> list[tuple[int, int]]:
    """``(episodes, seed)`` of each actor for an evaluation of ``n_episodes``: as even as possible (the first actors
    one more), each actor's env seeded from ``seed`` and its index; actors with no episode are left out."""
    seeds = np.random.SeedSequence([seed, n_actors]).generate_state(n_actors)
    shares = [(n_episodes + n_actors - 1 - i) // n_actors for i in range(n_actors)]
    return [(n, int(s)) for n, s in zip(shares, seeds) if n]


EvalHook = Callable[[Callable[[int, bool, int], tuple[list[float], list[int], list[bool]]] | None], None]
"""Called with ``evaluate(n_episodes, deterministic, seed) -> (rewards, lengths, successes)`` once the actors are up,
and with None when they are gone."""


class UpdateBudget:
    """Updates the stored data allows, at the single-process update-to-data ratio (see the module's docstring).

    Counted from the model's own counters, so a resumed run goes on at the same ratio."""

    def __init__(self, model: Any) -> None:
        config = model.config
        n_freq, unit = config.train_freq
        self.learning_starts = config.learning_starts
        self.ratio = 1.0 if config.gradient_steps < 0 else config.gradient_steps / n_freq
        self.per_episode = unit == "episode" and config.gradient_steps >= 0
        self.episodes = round(model._n_updates / self.ratio) if self.ratio else 0  # ended past learning_starts

    def episode_stored(self, num_timesteps: int) -> None:
        if num_timesteps > self.learning_starts:
            self.episodes += 1

    def due(self, model: Any) -> int:
        data = self.episodes if self.per_episode else max(model.num_timesteps - self.learning_starts, 0)
        return int(self.ratio * data) - model._n_updates


def learn(model: Any, total_timesteps: int, *, env_id: str, env_kwargs: dict[str, Any] | None = None,
          workers: int, broadcast_every: int = 50, callback: Any = None, log_interval: int | None = 4,
          reset_num_timesteps: bool = True, address: str | None = None, cpus: int | None = None,
          stats: WorkerStats | None = None, eval_hook: EvalHook | None = None) -> Any:
    """``model.learn(total_timesteps)`` with ``workers`` Ray actors collecting episodes of ``env_id`` (made with
    ``env_kwargs`` in each actor). Uses the Ray already initialized in this process, else connects to ``address``
    or starts a local Ray (``cpus``). Each actor takes one CPU. ``stats``, if given, is filled with where the time
    went. ``eval_hook``, if given, receives a function that plays evaluation episodes on the actors (see
    :data:`EvalHook`); a callback can evaluate with it. Returns the model."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1 here (0 is model.learn), got {workers}")
    if model.n_envs != 1:
        raise CLIError(f"with workers, each actor steps one env: set n_envs=1 (got {model.n_envs}) and raise workers")
    _check_actors_env(model, env_id, dict(env_kwargs or {}))
    with ray_session(address, cpus, what="training with workers", workers=workers) as ray:
        return _learn(ray, model, total_timesteps, env_id=env_id, env_kwargs=dict(env_kwargs or {}), workers=workers,
                      broadcast_every=broadcast_every, callback=callback, log_interval=log_interval,
                      reset_num_timesteps=reset_num_timesteps, stats=stats if stats is not None else WorkerStats(),
                      eval_hook=eval_hook)


def _check_actors_env(model: Any, env_id: str, env_kwargs: dict[str, Any]) -> None:
    """The env the actors will make (as they make it) has the model's spaces: a mismatch is said here, before Ray
    starts, naming the settings, rather than as a shape error from the buffer's first episode."""
    from herl.run.evaluate import check_spaces_fit
    from herl.run.envs import make_env

    env = make_env(env_id, env_kwargs, training=True)
    try:
        check_spaces_fit(model, env.observation_space, env.action_space, env_id, env_kwargs)
    except CLIError:
        raise CLIError(f"the actors' env, {env_id} made with env_kwargs={env_kwargs}, has other spaces than the model "
                       f"(observation {env.observation_space} vs the model's {model.observation_space}; action "
                       f"{env.action_space} vs {model.action_space}): give learn the env_id and env_kwargs the "
                       "model's env was made with") from None
    finally:
        env.close()


def _learn(ray: Any, model: Any, total_timesteps: int, *, env_id: str, env_kwargs: dict[str, Any], workers: int,
           broadcast_every: int, callback: Any, log_interval: int | None, reset_num_timesteps: bool,
           stats: WorkerStats, eval_hook: EvalHook | None) -> Any:
    # The learner's own env is reset once and never stepped: the HER buffer takes its compute_reward from it, and
    # a checkpoint records it like any other (its running episode is empty).
    callback, state, start = loop.begin(model, total_timesteps, callback=callback, log_interval=log_interval,
                                        tb_log_name=type(model).__name__, reset_num_timesteps=reset_num_timesteps)
    total = state["total_timesteps"]
    seeds = np.random.SeedSequence([model.seed or 0, model.num_timesteps]).generate_state(workers)
    # max_task_retries=0: an episode whose actor died is dropped, never played again from its start by Ray behind
    # the learner's back (it is counted instead); evaluations are retried per call (see evaluate below).
    remote = ray.remote(num_cpus=1, max_restarts=ACTOR_RESTARTS, max_task_retries=0)(Collector)
    spec = acting_spec(model)
    actors = [remote.remote(env_id, env_kwargs, spec, int(seed)) for seed in seeds]
    deaths = ActorDeaths(model, workers, stats)
    budget = UpdateBudget(model)
    version, weights = 0, ray.put(acting_weights(model))
    last_broadcast = model._n_updates

    def request(index: int, seed: int | None = None) -> Any:
        return actors[index].episode.remote(weights, version, model.num_timesteps, total, seed)

    pending = {request(index): (index, False) for index in range(workers)}  # ref -> (actor, whether a probe)

    def evaluate(n_episodes: int, deterministic: bool, seed: int) -> tuple[list[float], list[int], list[bool]]:
        nonlocal version, weights, last_broadcast
        if model._n_updates != last_broadcast:  # evaluate the newest weights
            version, weights = version + 1, ray.put(acting_weights(model))
            last_broadcast = model._n_updates
        shares = evaluation_shares(n_episodes, len(actors), seed)
        # Retried on an actor Ray restarted: the same weights and seed play the same episodes, so a retry is safe.
        tasks = [actor.evaluate.options(max_task_retries=ACTOR_RESTARTS).remote(weights, version, n, deterministic, s)
                 for actor, (n, s) in zip(actors, shares)]
        try:
            parts = ray.get(tasks)
        except ray.exceptions.RayActorError as err:
            raise WorkersLost(f"a worker (a Ray actor) died during an evaluation at env step {model.num_timesteps:,} "
                              f"and Ray could not start it again ({_cause(err)})") from None
        return tuple([x for part in parts for x in part[i]] for i in range(3))  # type: ignore[return-value]

    if eval_hook is not None:
        eval_hook(evaluate)
    try:
        while model.num_timesteps < total:
            callback.on_rollout_start()  # evaluations and checkpoints happen here, between whole episodes
            due = budget.due(model)
            # Take what has arrived; wait for an episode only when the data allows no update.
            tic = time.perf_counter()
            if due > 0:
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            else:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=10.0 if deaths.restarting else None)
                stats.wait_seconds += time.perf_counter() - tic
            deaths.check_restarts()
            go_on = True
            for ref in ready:
                index, probe = pending.pop(ref)
                tic = time.perf_counter()
                try:
                    episode = ray.get(ref)
                except ray.exceptions.RayActorError as err:
                    if probe:  # Ray gave up on it: its restarts are spent, or it cannot be started again
                        raise deaths.gone(index, err) from None
                    deaths.died(index, err)  # its process died: Ray starts it again (WorkersLost past its restarts)
                    # Ask when it is back: a request sent while Ray restarts it would fail too. The probe is retried
                    # through the restart, and fails only once Ray gives the actor up.
                    pending[actors[index].ready.options(max_task_retries=-1).remote()] = (index, True)
                    continue
                if probe:  # back: its next episode from a fresh seed
                    deaths.restarting.pop(index, None)
                    if model.num_timesteps < total:
                        pending[request(index, deaths.seed(index))] = (index, False)
                    continue
                stats.transfer_seconds += time.perf_counter() - tic
                if model.num_timesteps >= total:
                    continue
                _store(model, episode, budget, log_interval, start, stats)
                state.update(episode=episode)
                go_on = callback.on_step() and go_on
                if model.num_timesteps < total:
                    pending[request(index)] = (index, False)
            model._current_progress_remaining = 1.0 - model.num_timesteps / max(total, 1)
            callback.on_rollout_end()
            if not go_on:
                break
            due = budget.due(model)
            if due > 0:
                n = min(due, broadcast_every)  # in chunks, so that arriving episodes are stored between them
                tic = time.perf_counter()
                model.train(n)
                stats.updates, stats.update_seconds = stats.updates + n, stats.update_seconds + time.perf_counter() - tic
                if model._n_updates - last_broadcast >= broadcast_every:
                    tic = time.perf_counter()
                    version, weights = version + 1, ray.put(acting_weights(model))
                    last_broadcast = model._n_updates
                    stats.broadcasts += 1
                    stats.broadcast_seconds += time.perf_counter() - tic
    finally:
        if eval_hook is not None:
            eval_hook(None)
        for actor in actors:
            ray.kill(actor)
    callback.on_training_end()
    return model


class ActorDeaths:
    """The deaths of the actors' processes. Each drops the episode its actor was playing (it never arrives, so none
    of it is stored) and is counted; the actor's next episode starts from a fresh seed; once Ray gives an actor up
    (after :data:`ACTOR_RESTARTS` restarts), :meth:`gone` says so."""

    def __init__(self, model: Any, workers: int, stats: WorkerStats) -> None:
        self.model, self.workers, self.stats = model, workers, stats
        self.counts = [0] * workers
        self.restarting: dict[int, float] = {}
        """The actors Ray is starting again, and since when."""

    def died(self, index: int, err: Exception) -> None:
        """Count the death of actor ``index`` (``err``: Ray's error for the episode it was playing); past its
        restarts, :class:`WorkersLost`."""
        self.counts[index] += 1
        if self.counts[index] > ACTOR_RESTARTS:
            raise self.gone(index, err)
        self.stats.actor_deaths += 1
        self.stats.lost_episodes += 1
        self.restarting[index] = time.monotonic()
        print(f"herl: note: worker {index}'s actor died at env step {self.model.num_timesteps:,} ({_cause(err)}); Ray "
              f"starts it again ({ACTOR_RESTARTS} times at most); the episode it was playing is dropped, none of it "
              f"stored ({self.stats.lost_episodes} so far)", file=sys.stderr, flush=True)

    def seed(self, index: int) -> int:
        """A fresh seed for actor ``index``, back after a restart (its constructor's would replay its first life)."""
        entropy = [self.model.seed or 0, self.model.num_timesteps, index, self.counts[index]]
        return int(np.random.SeedSequence(entropy).generate_state(1)[0])

    def check_restarts(self) -> None:
        """:class:`WorkersLost` if an actor has not come back within :data:`RESTART_WAIT` seconds."""
        for index, since in self.restarting.items():
            if time.monotonic() - since > RESTART_WAIT:
                raise WorkersLost(f"worker {index} of {self.workers} (a Ray actor) died and Ray has not started it "
                                  f"again within {RESTART_WAIT:.0f} s: its cluster may have no CPU left for it "
                                  "(`ray status` shows the resources)")

    def gone(self, index: int, err: Exception) -> WorkersLost:
        return WorkersLost(f"worker {index} of {self.workers} (a Ray actor) died {self.counts[index]} times, and Ray "
                           f"starts an actor again {ACTOR_RESTARTS} times at most (last: {_cause(err)})")


def _cause(err: Exception) -> str:
    """Ray's error in one line: its type and first sentence (the rest is Ray's advice on OOM killers and logs)."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "").split(". ")[0].rstrip(".")
    first = first if len(first) <= 200 else first[:197] + "..."
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _store(model: Any, episode: Episode, budget: UpdateBudget, log_interval: int | None,
           start: tuple[int, float], stats: WorkerStats) -> None:
    tic = time.perf_counter()
    try:
        add_episode(model.replay_buffer, episode)
    except NonFiniteError as err:
        raise NonFiniteError(f"training stopped at env step {model.num_timesteps}: {err}") from None
    model.num_timesteps += len(episode)
    budget.episode_stored(model.num_timesteps)
    if stats.lost_episodes:  # logged once there is something to say (a run without losses keeps its columns)
        model.logger.record("workers/lost_episodes", stats.lost_episodes)
    loop.end_episode(model, float(episode.rewards.sum()), len(episode), episode.infos[-1], log_interval, start)
    stats.episodes, stats.steps = stats.episodes + 1, stats.steps + len(episode)
    stats.actor_seconds += episode.seconds
    stats.store_seconds += time.perf_counter() - tic
