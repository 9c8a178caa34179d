"""An id-stamped goal world for testing the HER engine (imported by the tests of this folder).

Every stored state says where it comes from: state ``t`` of episode ``ep`` of environment ``env``
has ``observation == achieved_goal == [env, ep, t]`` and the original ``desired_goal`` is
``[env, ep, -1]``, which no achieved goal ever equals. Transition ``t`` (state t -> t+1) carries the
action ``[env, ep, t]``. So for any sampled transition we can tell which stored transition it is,
whether it was relabeled, and from which episode and step its new goal came.

:class:`IdWorld` drives a buffer through episodes of given lengths in ``n_envs`` environments
(each env at its own pace) and keeps a model of what the buffer must hold: per environment, the
rows each episode occupies in its column (an unbounded row counter), so "this episode was partly
overwritten" is known without reading the buffer's book-keeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch
from gymnasium import spaces

LOW, HIGH = -1e6, 1e6
NO_GOAL = -1.0  # third coordinate of every original desired goal; achieved goals have t >= 0


def id_spaces(goal_dim: int = 3) -> tuple[spaces.Dict, spaces.Box]:
    box = lambda: spaces.Box(LOW, HIGH, (goal_dim,), np.float32)  # noqa: E731
    obs = spaces.Dict({"observation": box(), "achieved_goal": box(), "desired_goal": box()})
    return obs, spaces.Box(LOW, HIGH, (3,), np.float32)


def id_reward(achieved_goal, desired_goal, info=None) -> np.ndarray:
    """A vectorized reward that is asymmetric in its goals and detects goals from another episode.

    Exact in float32 for the small integers of the id world.
    """
    a = np.asarray(achieved_goal, np.float32)
    d = np.asarray(desired_goal, np.float32)
    return (
        2 * a[..., 2] - d[..., 2] + 1000 * (a[..., 1] != d[..., 1]) + 10000 * (a[..., 0] != d[..., 0])
    ).astype(np.float32)


def state(env: int, ep: int, t: int) -> np.ndarray:
    return np.array([env, ep, t], np.float32)


def goal(env: int, ep: int) -> np.ndarray:
    return np.array([env, ep, NO_GOAL], np.float32)


@dataclass
class Episode:
    env: int
    ep: int
    length: int  # planned number of transitions
    terminated: bool  # how it ends: terminated (True) or truncated by a time limit (False)
    start: int  # unbounded row of its first row in its env's column
    added: int = 0  # transitions stored so far
    ended: bool = False
    truncated_by_buffer: bool = False  # closed by truncate_last_trajectory()

    def stored_reward(self, t: int) -> float:
        return float(id_reward(state(self.env, self.ep, t + 1), goal(self.env, self.ep)))

    def stored_terminated(self, t: int) -> bool:
        return self.ended and not self.truncated_by_buffer and self.terminated and t == self.length - 1

    def stored_truncated(self, t: int) -> bool:
        return self.ended and (self.truncated_by_buffer or not self.terminated) and t == self.length - 1


@dataclass
class IdWorld:
    """Drive ``buffer`` through episodes and check its samples against the model.

    lengths[e] is the list of episode lengths env e plays, cycled; terminated_every: episodes whose
    index is a multiple of it end terminated, the others truncated (time limit).
    """

    buffer: object
    lengths: list[list[int]]
    rows: int  # rows per env column of the online storage
    share: bool  # optimize_memory_usage (the shared layout)
    online: bool = True
    keyword_form: bool = False
    terminated_every: int = 2
    episodes: dict[tuple[int, int], Episode] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.n_envs = len(self.lengths)
        self.frontier = [0] * self.n_envs  # rows written so far in each column (unbounded)
        self.current: list[Episode | None] = [None] * self.n_envs
        self.n_episodes = [0] * self.n_envs

    # ------------------------------------------------------------------ driving
    def _begin(self, env: int) -> Episode:
        k = self.n_episodes[env]
        self.n_episodes[env] += 1
        plan = self.lengths[env]
        episode = Episode(env, k, plan[k % len(plan)], terminated=k % self.terminated_every == 0,
                          start=self.frontier[env])
        self.episodes[(env, k)] = episode
        self.current[env] = episode
        return episode

    def step(self) -> None:
        """One add: one transition for every env."""
        obs = {key: np.zeros((self.n_envs, 3), np.float32) for key in ("observation", "achieved_goal", "desired_goal")}
        next_obs = {key: np.zeros((self.n_envs, 3), np.float32) for key in obs}
        action = np.zeros((self.n_envs, 3), np.float32)
        reward = np.zeros(self.n_envs, np.float32)
        terminated = np.zeros(self.n_envs, bool)
        truncated = np.zeros(self.n_envs, bool)
        for e in range(self.n_envs):
            episode = self.current[e] or self._begin(e)
            t = episode.added
            obs["observation"][e] = obs["achieved_goal"][e] = state(e, episode.ep, t)
            next_obs["observation"][e] = next_obs["achieved_goal"][e] = state(e, episode.ep, t + 1)
            obs["desired_goal"][e] = next_obs["desired_goal"][e] = goal(e, episode.ep)
            action[e] = state(e, episode.ep, t)
            reward[e] = episode.stored_reward(t)
            if t == episode.length - 1:
                terminated[e], truncated[e] = episode.terminated, not episode.terminated
            # the shared layout writes an episode's first state in a row of its own
            self.frontier[e] += 2 if (self.share and self.online and t == 0) else 1
        if self.keyword_form:
            self.buffer.add(obs, next_obs, action, reward, terminated=terminated, truncated=truncated)
        else:
            infos = [{"TimeLimit.truncated": bool(truncated[e])} for e in range(self.n_envs)]
            self.buffer.add(obs, next_obs, action, reward, terminated | truncated, infos)
        for e in range(self.n_envs):
            episode = self.current[e]
            episode.added += 1
            if episode.added == episode.length:
                episode.ended = True
                self.current[e] = None

    def clone_with(self, buffer) -> IdWorld:
        """The same model driving another buffer (e.g. a reloaded copy): the same adds follow."""
        twin = IdWorld(buffer, self.lengths, rows=self.rows, share=self.share, online=self.online,
                       keyword_form=self.keyword_form, terminated_every=self.terminated_every)
        twin.episodes = {key: replace(ep) for key, ep in self.episodes.items()}
        twin.current = [None if ep is None else twin.episodes[(ep.env, ep.ep)] for ep in self.current]
        twin.frontier = list(self.frontier)
        twin.n_episodes = list(self.n_episodes)
        return twin

    def run(self, n_adds: int) -> None:
        for _ in range(n_adds):
            self.step()

    def truncate_last_trajectory(self) -> None:
        self.buffer.truncate_last_trajectory()
        for e in range(self.n_envs):
            episode = self.current[e]
            if episode is not None and episode.added > 0:
                episode.length = episode.added
                episode.ended = True
                episode.truncated_by_buffer = True
                self.current[e] = None

    # ------------------------------------------------------------------ the model
    def intact(self, episode: Episode) -> bool:
        """Whether none of the episode's rows has been overwritten (online storage)."""
        return self.frontier[episode.env] <= episode.start + self.rows

    def stored_length(self, episode: Episode) -> int:
        return episode.length if episode.ended else episode.added

    def sampleable(self) -> list[Episode]:
        """Episodes whose transitions may be sampled now."""
        if self.online:
            return [ep for ep in self.episodes.values() if ep.added > 0 and self.intact(ep)]
        ended = [ep for ep in self.episodes.values() if ep.ended]
        return ended or [ep for ep in self.episodes.values() if ep.added > 0]

    # ------------------------------------------------------------------ checking a batch
    def check(self, samples, strategy: str, *, has_terminated_fn: bool = False) -> dict[str, int]:
        """Assert every invariant on ``samples``; returns counts (relabeled, total)."""
        obs = {k: v.numpy() for k, v in samples.observations.items()}
        nxt = {k: v.numpy() for k, v in samples.next_observations.items()}
        actions, rewards, dones = samples.actions.numpy(), samples.rewards.numpy(), samples.dones.numpy()
        batch = len(actions)
        assert rewards.shape == dones.shape == (batch, 1)
        ids = obs["observation"]
        step = np.array([0, 0, 1], np.float32)
        # every field of a sampled row comes from the same stored transition
        np.testing.assert_array_equal(obs["achieved_goal"], ids)
        np.testing.assert_array_equal(nxt["observation"], ids + step)
        np.testing.assert_array_equal(nxt["achieved_goal"], ids + step)
        np.testing.assert_array_equal(actions, ids)
        g = obs["desired_goal"]
        np.testing.assert_array_equal(nxt["desired_goal"], g, err_msg="obs and next_obs desired goals differ")
        # the reward always matches the returned batch
        np.testing.assert_array_equal(rewards[:, 0], id_reward(nxt["achieved_goal"], g))

        sampleable = {(ep.env, ep.ep) for ep in self.sampleable()}
        if self.online:
            complete = [ep for ep in self.episodes.values() if ep.ended and self.intact(ep)]
            # RANDOM draws from complete episodes when there is one, else from the stored part of open ones
            random_sources = complete or [ep for ep in self.episodes.values() if ep.added > 0 and self.intact(ep)]
        else:  # offline: from the staging area at relabeling time: ended episodes once there is one
            random_sources = self.sampleable()
        random_ok = {(ep.env, ep.ep): self.stored_length(ep) for ep in random_sources}

        pairs, inverse = np.unique(ids[:, :2].astype(np.int64), axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        lengths = np.zeros(len(pairs), np.int64)
        last_done = np.zeros(len(pairs), bool)
        for j, (e, k) in enumerate(pairs.tolist()):
            assert (e, k) in self.episodes, f"transition of unknown episode {(e, k)}"
            assert (e, k) in sampleable, f"sampled a transition of episode {(e, k)}, which must not be sampled (overwritten)"
            episode = self.episodes[(e, k)]
            lengths[j] = self.stored_length(episode)
            last_done[j] = episode.stored_terminated(episode.length - 1)
            if not getattr(self.buffer, "handle_timeout_termination", True):  # SB3's old way: a time limit is a done
                last_done[j] |= episode.stored_truncated(episode.length - 1)
        t = ids[:, 2].astype(np.int64)
        T = lengths[inverse]
        assert (t >= 0).all() and (t < T).all(), "sampled a transition that was not stored"
        stored_done = last_done[inverse] & (t == T - 1)

        relabeled = g[:, 2] != NO_GOAL
        original = ~relabeled
        np.testing.assert_array_equal(g[original, :2], ids[original, :2], err_msg="original goal of another episode")
        np.testing.assert_array_equal(dones[original, 0], stored_done[original], err_msg="done != stored termination")
        if not has_terminated_fn:
            np.testing.assert_array_equal(dones[relabeled, 0], stored_done[relabeled],
                                          err_msg="relabeled done != stored termination")
        gi = g.astype(np.int64)
        r, tr, Tr = gi[relabeled], t[relabeled], T[relabeled]
        if strategy == "random":
            for ge, gk, gt in map(tuple, r.tolist()):
                assert (ge, gk) in random_ok, f"random goal {(ge, gk, gt)} from an episode that is not a source"
                assert 1 <= gt <= random_ok[(ge, gk)], f"random goal {(ge, gk, gt)} is not a next state"
        else:
            same = (r[:, 0] == ids[relabeled, 0]) & (r[:, 1] == ids[relabeled, 1])
            assert same.all(), f"goals from another episode or env: {r[~same][:5]} for {ids[relabeled][~same][:5]}"
            gt = r[:, 2]
            if strategy == "future":
                ok = (tr + 1 <= gt) & (gt <= Tr)
            elif strategy == "final":
                ok = gt == Tr
            elif strategy == "episode":
                ok = (1 <= gt) & (gt <= Tr)
            else:
                raise AssertionError(strategy)
            assert ok.all(), f"{strategy} goals {r[~ok][:5]} for transitions {ids[relabeled][~ok][:5]} of lengths {Tr[~ok][:5]}"
        return {"relabeled": int(relabeled.sum()), "total": batch}


def snapshot(buffer) -> dict[str, np.ndarray]:
    """Copies of every array of the buffer's storages."""
    out = {}
    for name in ("storage", "relabeled"):
        storage = getattr(buffer, name, None)
        if storage is not None:
            out.update({f"{name}/{k}": np.array(v, copy=True) for k, v in storage.arrays().items()})
    return out


def assert_same_arrays(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> None:
    assert before.keys() == after.keys()
    for key in before:
        assert before[key].dtype == after[key].dtype and before[key].shape == after[key].shape, key
        assert before[key].tobytes() == after[key].tobytes(), f"{key} changed"


def samples_equal(a, b) -> bool:
    """Whether two sample batches hold identical tensors."""
    def same(x, y):
        if isinstance(x, dict):
            return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
        if x is None or y is None:
            return x is None and y is None
        if isinstance(x, torch.Tensor):
            return x.dtype == y.dtype and x.shape == y.shape and bool(torch.equal(x, y))
        return np.array_equal(x, y)

    return all(same(getattr(a, f), getattr(b, f)) for f in ("observations", "actions", "next_observations", "dones", "rewards"))
