"""``desired_goal_share``: a share of the relabeled transitions gets the desired goal of another stored transition
(ProtoGE's "future + actual" relabeling) instead of the strategy's achieved goal.

In the id world (her_world.py) every episode's desired goal is ``[env, ep, -1]`` and every achieved goal has a
third coordinate >= 0, so a sampled goal says whether it is a stored desired goal, and of which episode.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from her_world import NO_GOAL, IdWorld, id_reward, id_spaces, samples_equal
from herl.buffers import HerReplayBuffer

LAYOUTS = [{}, {"optimize_memory_usage": True}, {"storage_device": "cpu"}]
LENGTHS = [[5, 3, 7], [4, 6]]  # two envs, episodes of different lengths
ROWS = 400


def as_numpy(x) -> np.ndarray:
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def make(share: float, *, k: int = 4, strategy: str = "future", seed: int = 0, adds: int = 40, **layout):
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(ROWS * len(LENGTHS), obs_space, action_space, device="cpu", n_envs=len(LENGTHS),
                             n_sampled_goal=k, goal_selection_strategy=strategy, desired_goal_share=share,
                             compute_reward=id_reward, seed=seed, max_episode_length=10, **layout)
    world = IdWorld(buffer, LENGTHS, rows=ROWS, share=layout.get("optimize_memory_usage", False))
    world.run(adds)
    return buffer, world


def kinds(samples, world: IdWorld) -> dict[str, np.ndarray]:
    """Masks of the batch's rows by where their goal came from, after checking every row's reward."""
    obs = {key: as_numpy(v) for key, v in samples.observations.items()}
    nxt = {key: as_numpy(v) for key, v in samples.next_observations.items()}
    g, ids = obs["desired_goal"], obs["observation"]
    np.testing.assert_array_equal(nxt["desired_goal"], g)
    np.testing.assert_array_equal(as_numpy(samples.rewards)[:, 0], id_reward(nxt["achieved_goal"], g))
    desired = g[:, 2] == NO_GOAL
    own = desired & (g[:, 0] == ids[:, 0]) & (g[:, 1] == ids[:, 1])
    stored = {(ep.env, ep.ep) for ep in world.episodes.values() if ep.added > 0}
    for e, k in {(int(a), int(b)) for a, b in g[desired, :2]}:
        assert (e, k) in stored, f"desired goal of episode {(e, k)}, which was never stored"
    future = ~desired
    same_episode = (g[future, 0] == ids[future, 0]) & (g[future, 1] == ids[future, 1])
    assert same_episode.all() and (g[future, 2] >= ids[future, 2] + 1).all(), "a future goal not from the row's future"
    return {"future": future, "own desired": own, "other desired": desired & ~own}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_half_of_the_relabeled_goals_are_other_episodes_desired_goals(layout):
    buffer, world = make(0.5, **layout)
    n = 20_000
    found = kinds(buffer.sample(n), world)
    # 4/5 relabeled; half of those future goals, half desired goals of a transition drawn from the whole buffer
    # (its own episode's now and then); the real fifth keeps its own desired goal
    assert abs(found["future"].mean() - 0.4) < 0.02
    assert abs((found["own desired"] | found["other desired"]).mean() - 0.6) < 0.02
    assert found["other desired"].mean() > 0.3
    assert len({tuple(r) for r in as_numpy(buffer.sample(n).observations["desired_goal"])[:, :2].tolist()}) > 10


@pytest.mark.parametrize("layout", LAYOUTS)
def test_share_one_relabels_with_desired_goals_only(layout):
    buffer, world = make(1.0, **layout)
    found = kinds(buffer.sample(5000), world)
    assert not found["future"].any()
    assert found["other desired"].mean() > 0.6


def test_desired_goals_are_drawn_uniformly_over_stored_transitions():
    """Each stored transition is equally likely to lend its goal: an episode's goal comes as often as it has steps."""
    buffer, world = make(1.0, adds=12)  # env 0: episodes of 5 and 3 and 4 steps of a 7; env 1: of 4 and 6, 2 of a 4
    samples = buffer.sample(60_000)
    found = kinds(samples, world)
    g = as_numpy(samples.observations["desired_goal"])
    relabeled = found["other desired"] | found["own desired"]
    # rows relabeled: the binomial 4/5; their goals' episodes by stored length (own-episode draws included)
    counts = {(ep.env, ep.ep): ep.added for ep in world.episodes.values() if ep.added}
    total = sum(counts.values())
    for (e, k), length in counts.items():
        mask = relabeled & (g[:, 0] == e) & (g[:, 1] == k)
        # real rows keep their own goal too: subtract nothing, compare only among the relabeled ones
        share = mask.sum() / relabeled.sum()
        assert abs(share - length / total) < 0.02, f"episode {(e, k)}: {share:.3f}, expected {length / total:.3f}"


def test_share_zero_samples_what_a_buffer_without_the_option_samples():
    """0 draws no random number for it: a run saved before the option existed samples the same batches."""
    obs_space, action_space = id_spaces()
    buffers = []
    for kwargs in ({}, {"desired_goal_share": 0.0}):
        buffer = HerReplayBuffer(400, obs_space, action_space, device="cpu", compute_reward=id_reward, seed=3,
                                 max_episode_length=10, **kwargs)
        IdWorld(buffer, [[5, 3, 7]], rows=400, share=False).run(30)
        buffers.append(buffer)
    for _ in range(3):
        assert samples_equal(buffers[0].sample(256), buffers[1].sample(256))


def test_with_n_step_returns_every_step_is_rewarded_for_the_desired_goal():
    gamma = 0.9
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(400, obs_space, action_space, device="cpu", compute_reward=id_reward, seed=0,
                             max_episode_length=10, desired_goal_share=1.0, n_steps=3, gamma=gamma)
    world = IdWorld(buffer, [[6, 4]], rows=400, share=False)
    world.run(20)
    samples = buffer.sample(2000)
    obs = {key: as_numpy(v) for key, v in samples.observations.items()}
    nxt = {key: as_numpy(v) for key, v in samples.next_observations.items()}
    g, ids = obs["desired_goal"], obs["observation"]
    other = (g[:, 2] == NO_GOAL) & (g[:, 1] != ids[:, 1])
    assert other.sum() > 500
    np.testing.assert_array_equal(nxt["desired_goal"], g)
    for i in np.flatnonzero(other)[:200]:
        e, k, t = ids[i].astype(int)
        m = int(nxt["observation"][i, 2]) - t  # steps summed
        expected = sum(gamma ** j * float(id_reward(np.array([e, k, t + j + 1], np.float32), g[i])) for j in range(m))
        assert as_numpy(samples.rewards)[i, 0] == pytest.approx(expected, rel=1e-5)


def test_saved_and_loaded_with_the_buffer(tmp_path):
    buffer, world = make(0.25)
    buffer.save(tmp_path / "buffer.zip")
    loaded = HerReplayBuffer.load(tmp_path / "buffer.zip", compute_reward=id_reward)
    assert loaded.desired_goal_share == 0.25
    kinds(loaded.sample(1000), world)


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan"), "half"])
def test_a_share_outside_zero_to_one_is_refused(share):
    obs_space, action_space = id_spaces()
    with pytest.raises(ValueError, match="desired_goal_share"):
        HerReplayBuffer(100, obs_space, action_space, compute_reward=id_reward, desired_goal_share=share)


def test_a_share_without_relabeling_is_refused_with_the_fix():
    obs_space, action_space = id_spaces()
    with pytest.raises(ValueError, match="n_sampled_goal >= 1"):
        HerReplayBuffer(100, obs_space, action_space, compute_reward=id_reward, n_sampled_goal=0,
                        desired_goal_share=0.5)


def test_offline_relabeling_is_refused_with_the_fix():
    """Offline, the store holds relabeled copies: their desired goals are achieved goals, not the env's."""
    obs_space, action_space = id_spaces()
    with pytest.raises(ValueError, match="online_sampling=True"):
        HerReplayBuffer(100, obs_space, action_space, compute_reward=id_reward, online_sampling=False,
                        desired_goal_share=0.5)
