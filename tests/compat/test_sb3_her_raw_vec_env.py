"""HerReplayBuffer.add fed a Stable-Baselines3 VecEnv's raw output, where the observation ``step`` returns for an env
whose episode ended is the next episode's reset one and the final one is ``infos[i]["terminal_observation"]``: the
buffer stores the final one; and when the data holds a reset observation anyway, the first-episode check says so
rather than blaming the env's ``compute_reward``."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

from herl import HerReplayBuffer
from herl.envs import GoalEnvWarning

vec_env = pytest.importorskip("stable_baselines3.common.vec_env")


class LineEnv(gym.Env):
    """A point on a line that moves one step right per action towards a fixed goal at 3: it succeeds (reward 0,
    terminated) at its third step; every earlier step gives -1. Its desired goal never changes, so a reset
    observation shows only in the reward its achieved goal gives."""

    def __init__(self):
        box = gym.spaces.Box(-10, 10, (1,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict(observation=box, achieved_goal=box, desired_goal=box)
        self.action_space = gym.spaces.Box(-1, 1, (1,), dtype=np.float32)

    def _obs(self):
        p = np.array([self.position], np.float32)
        return {"observation": p, "achieved_goal": p.copy(), "desired_goal": np.array([3.0], np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0.0
        return self._obs(), {}

    def step(self, action):
        self.position += 1.0
        success = self.position >= 3.0
        return self._obs(), 0.0 if success else -1.0, success, False, {}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return np.where(np.abs(achieved_goal - desired_goal).sum(-1) < 0.5, 0.0, -1.0).astype(np.float32)

    def compute_terminated(self, achieved_goal, desired_goal, info):  # it ends on success
        return np.abs(achieved_goal - desired_goal).sum(-1) < 0.5


def point_env():
    return gym.make("herl/PointReach-v0", max_episode_steps=5)


def feed(buffer, venv, steps, *, drop_terminal=False):
    """The loop SB3's docs show for a VecEnv, passing its raw output to add(); returns the final observations."""
    obs, finals = venv.reset(), []
    for _ in range(steps):
        actions = np.stack([venv.action_space.sample() * 0 for _ in range(venv.num_envs)])
        new_obs, rewards, dones, infos = venv.step(actions)
        finals += [(i, infos[i]["terminal_observation"]) for i in np.flatnonzero(dones)]
        if drop_terminal:
            infos = [{k: v for k, v in info.items() if k != "terminal_observation"} for info in infos]
        sent = {k: v.copy() for k, v in new_obs.items()}
        buffer.add(obs, new_obs, actions, rewards, dones, infos)
        assert all(np.array_equal(sent[k], new_obs[k]) for k in sent)  # the caller's arrays are left as they were
        obs = new_obs
    return finals


def last_next_states(buffer, env_idx, key="achieved_goal"):
    """The stored next state of the last transition of each ended episode of env ``env_idx``."""
    storage = buffer.storage
    rows = [r for r in range(storage.rows) if storage.is_transition[r, env_idx]]
    flat = np.array([r * buffer.n_envs + env_idx for r in rows])
    ends = storage.transitions["terminated"][rows, env_idx].astype(bool) | \
        storage.transitions["truncated"][rows, env_idx].astype(bool)
    return storage.next_state(key, flat[ends])


@pytest.mark.parametrize("n_envs", [1, 3])
def test_raw_vec_env_output_stores_the_terminal_observation_without_a_warning(n_envs):
    venv = vec_env.DummyVecEnv([point_env for _ in range(n_envs)])
    venv.seed(0)
    buffer = HerReplayBuffer(200, venv.observation_space, venv.action_space, env=venv, n_envs=n_envs,
                             device="cpu", seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GoalEnvWarning)
        finals = feed(buffer, venv, 12)
    assert len(finals) == 2 * n_envs  # episodes of 5 steps: two ends per env
    for i in range(n_envs):
        expected = np.stack([f["achieved_goal"] for j, f in finals if j == i])
        np.testing.assert_array_equal(last_next_states(buffer, i), expected)
        np.testing.assert_array_equal(last_next_states(buffer, i, "desired_goal"),
                                      np.stack([f["desired_goal"] for j, f in finals if j == i]))


def test_a_model_of_the_same_env_learns_from_the_same_final_observations():
    """herl's own loop stores what the buffer now takes from raw output (its adapter swaps them, as SB3's loop)."""
    from herl import SAC

    venv = vec_env.DummyVecEnv([point_env])
    model = SAC("MultiInputPolicy", venv, replay_buffer_class=HerReplayBuffer, learning_starts=100, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GoalEnvWarning)
        model.learn(10)
    stored = last_next_states(model.replay_buffer, 0, "desired_goal")
    first = model.replay_buffer.storage.field("s", "desired_goal", np.array([0]))  # the first episode's goal
    assert len(stored) == 2 and np.array_equal(stored[0], first[0])


def test_a_reset_observation_that_changes_the_desired_goal_is_named_as_wrong_data():
    venv = vec_env.DummyVecEnv([point_env])
    venv.seed(0)
    buffer = HerReplayBuffer(200, venv.observation_space, venv.action_space, env=venv, device="cpu", seed=0)
    with pytest.warns(GoalEnvWarning) as record:
        feed(buffer, venv, 6, drop_terminal=True)
    message = str(record[0].message)
    assert "looks like the next episode's reset observation" in message
    assert "its desired goal changed at that step only" in message
    assert "infos[i]['terminal_observation']" in message and "compute_reward disagrees" not in message
    assert record[0].filename == __file__ or record[0].filename.endswith("test_sb3_her_raw_vec_env.py")


def test_a_reset_observation_that_changes_the_reward_is_named_as_wrong_data():
    venv = vec_env.DummyVecEnv([LineEnv])
    buffer = HerReplayBuffer(200, venv.observation_space, venv.action_space, env=venv, device="cpu", seed=0)
    with pytest.warns(GoalEnvWarning, match=r"reset observation \(step returned reward 0\.0 for that step, but its "
                                            r"achieved goal gives -1\.0\): the data passed to add\(\) is wrong, "
                                            r"not the env's compute_reward"):
        feed(buffer, venv, 4, drop_terminal=True)
    # with the infos as the VecEnv gave them, the final observation is stored and all is well
    buffer = HerReplayBuffer(200, venv.observation_space, venv.action_space, env=venv, device="cpu", seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GoalEnvWarning)
        feed(buffer, venv, 7)
    np.testing.assert_array_equal(last_next_states(buffer, 0), [[3.0], [3.0]])


def test_through_a_vec_normalize_the_callers_next_obs_is_stored_as_given():
    """Its terminal observations are normalized: the buffer cannot tell which form the caller stores."""
    venv = vec_env.VecNormalize(vec_env.DummyVecEnv([LineEnv]), norm_obs_keys=["observation"], norm_reward=False)
    buffer = HerReplayBuffer(200, venv.observation_space, venv.action_space, env=venv, device="cpu", seed=0)
    obs = venv.reset()
    for _ in range(3):
        new_obs, rewards, dones, infos = venv.step(np.ones((1, 1), np.float32))
        buffer.add(obs, new_obs, np.ones((1, 1)), rewards, dones, infos) if not dones[0] else None
        obs = new_obs
    final_sent = {k: v.copy() for k, v in new_obs.items()}
    with pytest.warns(GoalEnvWarning, match="reset observation"):  # the caller sent the reset one: the check says so
        buffer.add(obs, new_obs, np.ones((1, 1)), rewards, dones, infos)
    np.testing.assert_array_equal(last_next_states(buffer, 0), final_sent["achieved_goal"])
