"""Cross-checks against Stable-Baselines3's HerReplayBuffer (skipped when SB3 is not installed).

The same constructor call and the same add() calls feed both buffers; the id-world checker, which encodes
the semantics herl promises, must accept SB3's samples too (so the checker itself agrees with the reference
implementation), and the goals both pick must have the same support.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from her_world import NO_GOAL, IdWorld, id_reward, id_spaces
from herl.buffers import HerReplayBuffer

sb3_her = pytest.importorskip("stable_baselines3.her.her_replay_buffer")
vec_env = pytest.importorskip("stable_baselines3.common.vec_env")


class IdGoalEnv(gym.Env):
    """Only spaces and compute_reward: the buffers never step it."""

    def __init__(self):
        self.observation_space, self.action_space = id_spaces()

    def compute_reward(self, achieved_goal, desired_goal, info):
        return id_reward(achieved_goal, desired_goal)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        raise NotImplementedError


def both(strategy, *, n_envs=1, rows=30, k=4):
    venv = vec_env.DummyVecEnv([IdGoalEnv for _ in range(n_envs)])
    obs_space, action_space = id_spaces()
    # the same positional arguments, in SB3's order
    args = (rows * n_envs, obs_space, action_space, venv, "cpu", n_envs, False, True, k, strategy, False)
    return sb3_her.HerReplayBuffer(*args), HerReplayBuffer(*args, seed=0)


def pairs(batch) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(transition id, goal) of the relabeled rows."""
    obs = batch.observations["observation"].numpy().astype(int)
    goals = batch.observations["desired_goal"].numpy().astype(int)
    relabeled = goals[:, 2] != NO_GOAL
    return set(zip(map(tuple, obs[relabeled].tolist()), map(tuple, goals[relabeled].tolist())))


@pytest.mark.parametrize("n_envs", [1, 2])
@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_same_constructor_same_adds_same_goal_support(strategy, n_envs):
    theirs, ours = both(strategy, n_envs=n_envs)
    assert ours.her_ratio == pytest.approx(theirs.her_ratio)
    lengths = [[4, 7, 2], [5, 3]][:n_envs]
    worlds = [IdWorld(buffer, lengths, rows=30, share=False) for buffer in (theirs, ours)]
    for world in worlds:
        world.run(40)  # wraps around each 30-row column
    np.random.seed(0)  # SB3 samples with the global generator
    sb3_batch, our_batch = theirs.sample(20_000), ours.sample(20_000)
    worlds[0].check(sb3_batch, strategy)  # the semantics we test are SB3's
    worlds[1].check(our_batch, strategy)
    # relabeled (transition, goal) pairs: the same support. SB3 never samples an unfinished episode, so compare
    # on the transitions of complete episodes only.
    complete = {(ep.env, ep.ep) for ep in worlds[1].episodes.values() if ep.ended}
    ours_pairs = {p for p in pairs(our_batch) if p[0][:2] in complete}
    sb3_pairs = pairs(sb3_batch)
    assert sb3_pairs == ours_pairs
    for name in ("observations", "next_observations"):
        for key, tensor in getattr(sb3_batch, name).items():
            assert getattr(our_batch, name)[key].shape == tensor.shape
            assert getattr(our_batch, name)[key].dtype == tensor.dtype
    for name in ("actions", "rewards", "dones"):
        assert getattr(our_batch, name).shape == getattr(sb3_batch, name).shape
        assert getattr(our_batch, name).dtype == getattr(sb3_batch, name).dtype


def test_sb3_raises_before_an_episode_ends_herl_does_not():
    theirs, ours = both("future")
    for buffer in (theirs, ours):
        IdWorld(buffer, [[10]], rows=30, share=False).run(3)
    with pytest.raises(RuntimeError):
        theirs.sample(8)
    assert ours.sample(8).rewards.shape == (8, 1)


def test_same_rewards_for_the_same_relabeled_transitions():
    """FINAL is deterministic: every transition gets the same goal and reward from both buffers."""
    theirs, ours = both("final", k=1_000_000)
    for buffer in (theirs, ours):
        IdWorld(buffer, [[3, 5, 6]], rows=40, share=False).run(30)
    np.random.seed(1)
    table = {}
    for batch in (theirs.sample(3000), ours.sample(3000)):
        obs = batch.observations["observation"].numpy().astype(int)
        goals = batch.observations["desired_goal"].numpy()
        for o, g, r, d in zip(map(tuple, obs.tolist()), goals.tolist(), batch.rewards[:, 0].tolist(),
                              batch.dones[:, 0].tolist()):
            if g[2] == NO_GOAL:
                continue
            assert table.setdefault(o, (g, r, d)) == (g, r, d), f"transition {o}: {table[o]} vs {(g, r, d)}"
    assert len(table) >= 20
