"""n-step returns (``n_steps``, SB3's ``NStepReplayBuffer``) in the plain and the HER buffer.

Every sampled row is checked against a reference computed from the episodes as they were added: the observation
holds (episode, t), so each row says which stored transition it starts from.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from herl import HerReplayBuffer, ReplayBuffer

GAMMA = 0.9
FLAT = spaces.Box(-100, 100, (2,), np.float32)
OBS = spaces.Dict({k: spaces.Box(-100, 100, (2,), np.float32) for k in ("observation", "achieved_goal", "desired_goal")})
ACT = spaces.Box(-1, 1, (1,), np.float32)
LAYOUTS = [{}, {"optimize_memory_usage": True}, {"storage_device": "cpu"}]
# (length, how it ends): the last one is still running when sampled
EPISODES = [(6, "truncated"), (4, "terminated"), (1, "truncated"), (7, "truncated"), (3, "open")]


def as_numpy(x) -> np.ndarray:
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def step_reward(e: int, t: int) -> float:
    """The plain buffer's stored reward of episode e's step t: distinct, so a wrong sum shows."""
    return -(1.0 + 0.1 * t + 0.01 * e)


def fill_plain(buffer: ReplayBuffer) -> None:
    for e, (length, end) in enumerate(EPISODES):
        for t in range(length):
            last = t == length - 1 and end != "open"
            buffer.add(np.array([[e, t]], np.float32), np.array([[e, t + 1]], np.float32), np.zeros((1, 1)),
                       np.array([step_reward(e, t)]), np.array([last]),
                       [{"TimeLimit.truncated": last and end == "truncated"}])


def reference(e: int, t: int, n: int, reward_of) -> tuple[float, int, bool]:
    """(n-step reward, steps summed m, terminated) for episode e's transition t."""
    length, end = EPISODES[e]
    m = min(n, length - t)
    total = sum(GAMMA ** k * reward_of(e, t + k) for k in range(m))
    return total, m, end == "terminated" and t + m == length


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n_steps", [1, 2, 3, 5])
def test_plain_buffer_sums_n_rewards_within_the_episode(layout, n_steps):
    buffer = ReplayBuffer(100, FLAT, ACT, n_steps=n_steps, gamma=GAMMA, seed=0, **layout)
    fill_plain(buffer)
    samples = buffer.sample(400)
    obs, next_obs = as_numpy(samples.observations), as_numpy(samples.next_observations)
    rewards, dones = as_numpy(samples.rewards).ravel(), as_numpy(samples.dones).ravel()
    discounts = None if samples.discounts is None else as_numpy(samples.discounts).ravel()
    assert (discounts is None) == (n_steps == 1)
    seen = set()
    for i, (e, t) in enumerate(obs.astype(int)):
        total, m, terminated = reference(e, t, n_steps, step_reward)
        assert rewards[i] == pytest.approx(total, abs=1e-5)
        np.testing.assert_array_equal(next_obs[i], [e, t + m])
        assert dones[i] == terminated
        if discounts is not None:
            assert discounts[i] == pytest.approx(GAMMA ** m)
        seen.add((e, t))
    assert len(seen) == sum(length for length, _ in EPISODES)  # every stored transition was drawn


def test_plain_buffer_matches_sb3_nstep_replay_buffer():
    """SB3 2.9's NStepReplayBuffer on the same transitions (closed episodes: SB3 treats the newest row as a cut)."""
    from stable_baselines3.common.buffers import NStepReplayBuffer

    ours = ReplayBuffer(100, FLAT, ACT, n_steps=3, gamma=GAMMA, seed=0)
    peer = NStepReplayBuffer(100, FLAT, ACT, device="cpu", n_steps=3, gamma=GAMMA)
    index = {}
    for e, (length, end) in enumerate(EPISODES[:4]):
        for t in range(length):
            last = t == length - 1
            args = (np.array([[e, t]], np.float32), np.array([[e, t + 1]], np.float32), np.zeros((1, 1)),
                    np.array([step_reward(e, t)]), np.array([last]), [{"TimeLimit.truncated": last and end == "truncated"}])
            index[e, t] = peer.pos
            ours.add(*args)
            peer.add(*args)
    samples = ours.sample(300)
    rows = as_numpy(samples.observations).astype(int)
    expected = peer._get_samples(np.array([index[e, t] for e, t in rows]))
    np.testing.assert_allclose(as_numpy(samples.rewards), expected.rewards.numpy(), atol=1e-5)
    np.testing.assert_array_equal(as_numpy(samples.next_observations), expected.next_observations.numpy())
    np.testing.assert_array_equal(as_numpy(samples.dones), expected.dones.numpy())
    np.testing.assert_allclose(as_numpy(samples.discounts), expected.discounts.numpy(), atol=1e-6)


# ---------------------------------------------------------------- HER
def goal_reward(achieved_goal, desired_goal, info=None):
    return -(np.linalg.norm(achieved_goal - desired_goal, axis=-1) > 0.05).astype(np.float32)


def achieved(e: int, t: int) -> np.ndarray:
    return np.array([e, t], np.float32)


def fill_her(buffer: HerReplayBuffer) -> None:
    """Episode e's achieved goal after t steps is (e, t); its goal (e, 2) is reached by the step that ends at t = 2."""
    for e, (length, end) in enumerate(EPISODES):
        goal = achieved(e, 2)
        for t in range(length):
            last = t == length - 1 and end != "open"
            obs = {"observation": achieved(e, t), "achieved_goal": achieved(e, t), "desired_goal": goal}
            next_obs = {"observation": achieved(e, t + 1), "achieved_goal": achieved(e, t + 1), "desired_goal": goal}
            buffer.add(obs, next_obs, np.zeros(1), goal_reward(next_obs["achieved_goal"], goal).reshape(1),
                       terminated=np.array([last and end == "terminated"]),
                       truncated=np.array([last and end == "truncated"]))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n_steps", [2, 3])
def test_her_buffer_recomputes_every_summed_reward_for_the_rows_goal(layout, n_steps):
    buffer = HerReplayBuffer(100, OBS, ACT, compute_reward=goal_reward, n_sampled_goal=4, n_steps=n_steps,
                             gamma=GAMMA, seed=0, max_episode_length=10, **layout)
    fill_her(buffer)
    samples = buffer.sample(600)
    obs = as_numpy(samples.observations["observation"]).astype(int)
    goals = as_numpy(samples.observations["desired_goal"])
    next_obs = {k: as_numpy(v) for k, v in samples.next_observations.items()}
    rewards, dones = as_numpy(samples.rewards).ravel(), as_numpy(samples.dones).ravel()
    discounts = as_numpy(samples.discounts).ravel()
    relabeled = 0
    for i, (e, t) in enumerate(obs):
        def reward_of(e_, k, goal=goals[i]):  # the reward of step k for this row's goal
            return float(goal_reward(achieved(e_, k + 1), goal))
        total, m, terminated = reference(e, t, n_steps, reward_of)
        assert rewards[i] == pytest.approx(total, abs=1e-5), (e, t, goals[i])
        np.testing.assert_array_equal(next_obs["achieved_goal"][i], achieved(e, t + m))
        np.testing.assert_array_equal(next_obs["observation"][i], achieved(e, t + m))
        np.testing.assert_array_equal(next_obs["desired_goal"][i], goals[i])
        assert discounts[i] == pytest.approx(GAMMA ** m)
        assert dones[i] == terminated
        relabeled += not np.array_equal(goals[i], achieved(e, 2))
    assert relabeled > 300  # 4/5 of the rows, most with a goal other than the episode's own


def test_her_n_step_on_demonstration_rows():
    from herl.demos import generate_expert_traj
    from herl.envs import PointReachEnv

    def expert(obs):
        return np.clip(3.0 * (obs["desired_goal"] - obs["achieved_goal"]), -1.0, 1.0).astype(np.float32)

    length = 10
    env = PointReachEnv(max_episode_steps=length)
    demos = generate_expert_traj(expert, None, env, n_episodes=4, seed=3)
    buffer = HerReplayBuffer(200, env.observation_space, env.action_space, env=env, demonstrations=demos,
                             demo_batch_ratio=0.5, n_steps=3, gamma=GAMMA, seed=0, max_episode_length=length)
    obs, _ = env.reset(seed=0)
    for _ in range(length):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        buffer.add(obs, next_obs, action, reward, terminated=terminated, truncated=truncated)
        obs = next_obs
    samples = buffer.sample(200)
    mask = as_numpy(samples.demo_mask)
    stored = demos.observations["achieved_goal"]  # the states of each demo step, in order, episodes back to back
    demo_obs = as_numpy(samples.observations["achieved_goal"])[mask]
    demo_next = as_numpy(samples.next_observations["achieved_goal"])[mask]
    goals = as_numpy(samples.observations["desired_goal"])[mask]
    rewards = as_numpy(samples.rewards).ravel()[mask]
    discounts = as_numpy(samples.discounts).ravel()[mask]
    for i in range(mask.sum()):
        row = int(np.flatnonzero((stored == demo_obs[i]).all(axis=1))[0])
        t = row % length
        m = min(3, length - t)
        later = [demos.next_observations["achieved_goal"][row + k] for k in range(m)]
        expected = sum(GAMMA ** k * float(env.compute_reward(later[k], goals[i], {})) for k in range(m))
        np.testing.assert_allclose(demo_next[i], later[-1])
        assert rewards[i] == pytest.approx(expected, abs=1e-5)
        assert discounts[i] == pytest.approx(GAMMA ** m)


def test_n_step_settings_are_saved_and_checked(tmp_path):
    buffer = HerReplayBuffer(100, OBS, ACT, compute_reward=goal_reward, n_steps=3, gamma=GAMMA, seed=0,
                             max_episode_length=10)
    fill_her(buffer)
    buffer.save(tmp_path / "buffer.zip")
    loaded = HerReplayBuffer.load(tmp_path / "buffer.zip", compute_reward=goal_reward)
    assert (loaded.n_steps, loaded.gamma) == (3, GAMMA)
    a, b = buffer.sample(64), loaded.sample(64)
    np.testing.assert_array_equal(as_numpy(a.rewards), as_numpy(b.rewards))
    np.testing.assert_array_equal(as_numpy(a.discounts), as_numpy(b.discounts))
    with pytest.raises(ValueError, match="online_sampling=True"):
        HerReplayBuffer(100, OBS, ACT, compute_reward=goal_reward, n_steps=3, online_sampling=False)
    with pytest.raises(ValueError, match="n_steps"):
        ReplayBuffer(100, FLAT, ACT, n_steps=0)
    with pytest.raises(ValueError, match="gamma"):
        ReplayBuffer(100, FLAT, ACT, n_steps=2, gamma=1.5)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_plain_buffer_n_step_with_two_envs_whose_episodes_end_apart(layout):
    """Two envs, episodes of different lengths (so the columns leave lockstep): sums stay within each env's episode."""
    lengths = {0: [3, 5, 2, 6], 1: [4, 4, 7, 1]}
    steps = 16
    schedule = {env: [(e, t) for e, n in enumerate(ls) for t in range(n)][:steps] for env, ls in lengths.items()}
    reward_of = {(env, e, t): -(1 + 0.1 * t + 0.01 * e + 0.001 * env)
                 for env, ls in lengths.items() for e, n in enumerate(ls) for t in range(n)}
    buffer = ReplayBuffer(200, FLAT, ACT, n_envs=2, n_steps=3, gamma=GAMMA, seed=0, **layout)
    for i in range(steps):
        pairs = [schedule[env][i] for env in (0, 1)]
        obs = np.array([[100 * env + e, t] for env, (e, t) in enumerate(pairs)], np.float32)
        last = np.array([t == lengths[env][e] - 1 for env, (e, t) in enumerate(pairs)])
        buffer.add(obs, obs + np.array([0, 1], np.float32), np.zeros((2, 1)),
                   np.array([reward_of[env, e, t] for env, (e, t) in enumerate(pairs)]), last,
                   [{"TimeLimit.truncated": bool(x)} for x in last])
    samples = buffer.sample(500)
    for o, r, n, d in zip(as_numpy(samples.observations).astype(int), as_numpy(samples.rewards).ravel(),
                          as_numpy(samples.next_observations).astype(int), as_numpy(samples.discounts).ravel()):
        env, e, t = o[0] // 100, o[0] % 100, o[1]
        done_steps = sum(1 for x in schedule[env] if x[0] == e)  # steps of episode e stored so far
        m = min(3, done_steps - t)
        assert r == pytest.approx(sum(GAMMA ** k * reward_of[env, e, t + k] for k in range(m)), abs=1e-5)
        np.testing.assert_array_equal(n, [100 * env + e, t + m])
        assert d == pytest.approx(GAMMA ** m)
