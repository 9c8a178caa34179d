"""SB3 1.x's HerReplayBuffer names, and the reward check that catches a goal env whose ``compute_reward``
disagrees with its ``step`` (the custom env of SB3's HER docs does: step gives 0/-1, compute_reward 1/0)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

from herl import SAC, HerReplayBuffer
from herl.envs import BitFlippingEnv, GoalEnvWarning

vec_env = pytest.importorskip("stable_baselines3.common.vec_env")


class SimpleGoalEnv(gym.Env):
    """The shape of the custom env in SB3's HER docs: a point moving towards a goal in a plane."""

    def __init__(self, success_reward=1.0, failure_reward=0.0):
        super().__init__()
        self.success_reward, self.failure_reward = success_reward, failure_reward
        self.action_space = gym.spaces.Box(-1, 1, (2,), dtype=np.float32)
        box = gym.spaces.Box(-5, 5, (2,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict(observation=box, achieved_goal=box, desired_goal=box)
        self.threshold, self.max_steps = 0.5, 10

    def _obs(self):
        return {"observation": self.position.copy(), "achieved_goal": self.position.copy(), "desired_goal": self.goal.copy()}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.goal = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.position = np.clip(self.position + 0.3 * np.asarray(action, np.float32), -5, 5)
        self.steps += 1
        success = np.linalg.norm(self.position - self.goal) < self.threshold
        reward = 0.0 if success else -1.0  # what step hands out in SB3's docs example
        return self._obs(), reward, bool(success), self.steps >= self.max_steps, {"is_success": success}

    def compute_reward(self, achieved_goal, desired_goal, info):
        success = np.linalg.norm(achieved_goal - desired_goal, axis=-1) < self.threshold
        return np.where(success, self.success_reward, self.failure_reward).astype(np.float32)


def test_a_model_on_the_sb3_docs_custom_env_warns_that_compute_reward_disagrees_with_step():
    model = SAC("MultiInputPolicy", vec_env.DummyVecEnv([SimpleGoalEnv]), replay_buffer_class=HerReplayBuffer,
                learning_starts=5, batch_size=8, seed=0)
    with pytest.warns(GoalEnvWarning, match=r"compute_reward disagrees with step on the first episode stored.*"
                                             r"step returned reward -1\.0 but .* returned 0\.0"):
        model.learn(30)


def test_a_consistent_env_gives_no_warning_and_the_check_runs_once():
    with warnings.catch_warnings():
        warnings.simplefilter("error", GoalEnvWarning)
        model = SAC("MultiInputPolicy", SimpleGoalEnv(success_reward=0.0, failure_reward=-1.0),
                    replay_buffer_class=HerReplayBuffer, learning_starts=5, batch_size=8, seed=0)
        model.learn(30)
        bits = BitFlippingEnv(4, max_steps=4)
        buffer = HerReplayBuffer(100, bits.observation_space, bits.action_space, env=bits, device="cpu",
                                 online_sampling=False, seed=0)
        obs, _ = bits.reset(seed=0)
        for _ in range(12):
            action = bits.action_space.sample()
            next_obs, reward, terminated, truncated, info = bits.step(action)
            buffer.add(obs, next_obs, np.array([action]), reward, terminated=terminated, truncated=truncated)
            obs = bits.reset()[0] if terminated or truncated else next_obs
        assert len(buffer) > 0  # offline relabeling still runs after the check


def test_a_buffer_fed_by_hand_warns_once_at_its_first_episode_end():
    env = SimpleGoalEnv()
    buffer = HerReplayBuffer(100, env.observation_space, env.action_space, env=env, device="cpu", seed=0)
    obs, _ = env.reset(seed=0)
    with pytest.warns(GoalEnvWarning) as record:
        for t in range(25):  # episodes of 10 steps: three ends, one warning
            next_obs, reward, terminated, truncated, info = env.step(np.zeros(2, np.float32))
            buffer.add(obs, next_obs, np.zeros(2), reward, np.array([float(terminated or truncated)]),
                       [{"TimeLimit.truncated": truncated and not terminated}])
            obs = env.reset()[0] if terminated or truncated else next_obs
    assert len([w for w in record if issubclass(w.category, GoalEnvWarning)]) == 1
    assert record[0].filename == __file__  # it points at the user's add call


def test_sb3_1x_wrapped_env_is_taken_as_env():
    venv = vec_env.DummyVecEnv([lambda: BitFlippingEnv(4)])
    buffer = HerReplayBuffer(100, venv.observation_space, venv.action_space, wrapped_env=venv, device="cpu",
                             online_sampling=True, max_episode_length=4)
    assert buffer.env is venv and buffer.max_episode_length == 4
    with pytest.raises(ValueError, match="env= .*wrapped_env"):
        HerReplayBuffer(100, venv.observation_space, venv.action_space, env=BitFlippingEnv(4), wrapped_env=venv)


def test_sb3_1x_call_shapes_say_what_changed_in_sb3_1_6():
    env = BitFlippingEnv(4)
    with pytest.raises(TypeError, match="env_info .*env=goal_env"):
        HerReplayBuffer(100, env.observation_space, env.action_space, env_info={"max_steps": 4})
    with pytest.raises(TypeError, match="env_info"):
        HerReplayBuffer(100, env.observation_space, env.action_space, {"max_steps": 4})
    with pytest.raises(TypeError, match=r"since SB3 1\.6 .*HerReplayBuffer\(buffer_size, observation_space"):
        HerReplayBuffer(env, 100, "cpu")  # SB3 1.x: HerReplayBuffer(env, buffer_size, device, ...)


def test_the_time_limit_of_a_vec_env_sets_max_episode_length_for_offline_relabeling():
    venv = vec_env.DummyVecEnv([lambda: gym.make("herl/PointReach-v0", max_episode_steps=7)])
    buffer = HerReplayBuffer(100, venv.observation_space, venv.action_space, env=venv, online_sampling=False)
    assert buffer.max_episode_length == 7
