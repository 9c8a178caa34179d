"""Stable-Baselines3 VecEnvs, as SB3's docs, tests and zoo scripts build them, train and evaluate herl models.

herl recognizes them by their interface (it never imports SB3): ``make_vec_env``, ``DummyVecEnv``,
``SubprocVecEnv`` and ``VecNormalize`` (whose statistics are saved and loaded the SB3 way).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from herl import DQN, SAC, TD3, CheckpointCallback, EvalCallback, HerReplayBuffer, evaluate_policy
from herl.envs import BitFlippingEnv
from herl.training.envs import SB3VecEnvAdapter, as_env_adapter

vec_env = pytest.importorskip("stable_baselines3.common.vec_env")
env_util = pytest.importorskip("stable_baselines3.common.env_util")
DummyVecEnv, SubprocVecEnv, VecNormalize = vec_env.DummyVecEnv, vec_env.SubprocVecEnv, vec_env.VecNormalize
make_vec_env = env_util.make_vec_env

SMALL = dict(learning_starts=20, batch_size=16, policy_kwargs=dict(net_arch=[16]), seed=0)


def bit_env():
    return BitFlippingEnv(4, max_steps=4)


def point_env():
    return gym.make("herl/PointReach-v0", max_episode_steps=10)


def test_the_adapter_stores_true_final_states_and_splits_time_limits_from_terminations():
    venv = DummyVecEnv([lambda: point_env() for _ in range(2)])
    adapter = as_env_adapter(venv)
    assert isinstance(adapter, SB3VecEnvAdapter) and adapter.n_envs == 2
    obs = adapter.reset(seed=0)
    for t in range(10):
        next_obs, obs, rewards, terminated, truncated, infos = adapter.step(np.zeros((2, 2), np.float32))
    # a zero action never reaches the goal: both episodes end on the time limit at step 10
    assert truncated.all() and not terminated.any()
    # the stored next state is the final one, not the reset one SB3 puts in obs
    for i in range(2):
        np.testing.assert_array_equal(next_obs["observation"][i], infos[i]["terminal_observation"]["observation"])
    assert not np.array_equal(next_obs["desired_goal"], obs["desired_goal"])


@pytest.mark.parametrize("model_class", [DQN, SAC])
def test_make_vec_env_trains_a_her_model_and_evaluates(model_class):
    continuous = model_class is not DQN
    venv = make_vec_env(lambda: BitFlippingEnv(4, continuous=continuous, max_steps=4), n_envs=2, seed=0)
    model = model_class("MultiInputPolicy", venv, replay_buffer_class=HerReplayBuffer, **SMALL)
    assert model.n_envs == 2 and model.replay_buffer.n_envs == 2
    model.learn(120)
    assert model.num_timesteps == 120 and len(model.replay_buffer) == 120
    # every step belongs to an ended episode of ep_info_buffer or to a running one
    assert sum(e["l"] for e in model.ep_info_buffer) + model._ep_lengths.sum() == 120
    assert len(model.ep_info_buffer) >= 120 // 4 - 2
    mean, std = evaluate_policy(model, venv, n_eval_episodes=4)
    assert -4.0 <= mean <= 0.0
    assert model.get_env() is venv


def test_subproc_vec_env_trains_and_evaluates():
    venv = make_vec_env(point_env, n_envs=2, vec_env_cls=SubprocVecEnv)
    try:
        model = TD3("MultiInputPolicy", venv, replay_buffer_class=HerReplayBuffer, **SMALL)
        model.learn(60)
        rewards, lengths = evaluate_policy(model, venv, n_eval_episodes=2, return_episode_rewards=True)
        assert lengths == [10, 10] and model.num_timesteps == 60
    finally:
        venv.close()


def test_eval_callback_takes_a_vec_env_and_records_successes():
    callback = EvalCallback(make_vec_env(bit_env, n_envs=1), eval_freq=25, n_eval_episodes=3, verbose=0)
    model = DQN("MultiInputPolicy", make_vec_env(bit_env, n_envs=1), replay_buffer_class=HerReplayBuffer, **SMALL)
    model.learn(100, callback=callback)
    assert len(callback.evaluations_successes) == 4 and all(len(s) == 3 for s in callback.evaluations_successes)
    assert callback.best_mean_reward >= callback.last_mean_reward > -np.inf


def test_vec_normalize_stores_original_values_and_normalizes_batches_and_actions(tmp_path):
    venv = VecNormalize(make_vec_env(point_env, n_envs=2, seed=0), norm_obs=True, norm_reward=True, gamma=0.98)
    model = SAC("MultiInputPolicy", venv, replay_buffer_class=HerReplayBuffer, **SMALL)
    assert model.get_vec_normalize_env() is venv
    model.learn(100)
    buffer = model.replay_buffer
    # stored goals are the env's own (HER's compute_reward needs them), so stored rewards match compute_reward
    stored = buffer.storage
    rows = np.flatnonzero(stored.is_transition[:, 0])
    achieved = stored.next_states["achieved_goal"][rows, 0]
    desired = stored.states["desired_goal"][rows, 0]
    recomputed = venv.env_method("compute_reward", achieved, desired, {}, indices=[0])[0]
    np.testing.assert_allclose(stored.transitions["reward"][rows, 0], recomputed)
    assert np.abs(desired).max() <= 1.0  # PointReach's goals lie in [-1, 1]; normalized ones would not
    # batches go through VecNormalize as in SB3: normalized observations, normalized (scaled) rewards
    batch = buffer.sample(64, env=venv)
    raw = buffer.sample(64)
    assert batch.observations["observation"].abs().mean() != pytest.approx(raw.observations["observation"].abs().mean())
    # statistics saved and loaded as SB3 users do, for evaluation with frozen statistics
    venv.save(tmp_path / "vec_normalize.pkl")
    model.save(tmp_path / "sac")
    eval_env = VecNormalize.load(tmp_path / "vec_normalize.pkl", make_vec_env(point_env, n_envs=1))
    eval_env.training, eval_env.norm_reward = False, False
    loaded = SAC.load(tmp_path / "sac", env=eval_env)
    np.testing.assert_array_equal(eval_env.obs_rms["observation"].mean, venv.obs_rms["observation"].mean)
    obs = eval_env.reset()
    np.testing.assert_allclose(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0],
                               atol=1e-6)
    rewards, lengths = evaluate_policy(loaded, eval_env, n_eval_episodes=2, return_episode_rewards=True)
    assert lengths == [10, 10] and all(-10 <= r <= 0 for r in rewards)  # the env's own rewards, not normalized


def test_the_acting_policy_sees_vec_normalize_observations_as_predict_does():
    venv = VecNormalize(make_vec_env(point_env, n_envs=1, seed=0))
    adapter = as_env_adapter(venv)
    obs = adapter.reset(seed=0)
    np.testing.assert_allclose(adapter.policy_obs(obs)["observation"], venv.normalize_obs(obs)["observation"])
    assert adapter.policy_obs(obs)["observation"] is not obs["observation"]


def test_her_buffer_takes_vec_normalize_and_reaches_compute_reward_through_it():
    venv = VecNormalize(make_vec_env(point_env, n_envs=1))
    buffer = HerReplayBuffer(100, venv.observation_space, venv.action_space, env=venv, device="cpu", seed=0)
    ag, g = np.zeros((3, 2), np.float32), np.array([[0, 0], [1, 1], [0.01, 0]], np.float32)
    np.testing.assert_array_equal(buffer._compute_reward(ag, g, {}), [0.0, -1.0, 0.0])


def test_checkpoint_callback_saves_vec_normalize_statistics_as_sb3_does(tmp_path):
    venv = VecNormalize(make_vec_env(point_env, n_envs=1, seed=0))
    model = SAC("MultiInputPolicy", venv, replay_buffer_class=HerReplayBuffer, **SMALL)
    model.learn(40, callback=CheckpointCallback(20, tmp_path, save_vecnormalize=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rl_model_20_steps.zip", "rl_model_40_steps.zip",
        "rl_model_vecnormalize_20_steps.pkl", "rl_model_vecnormalize_40_steps.pkl"]
    loaded = VecNormalize.load(tmp_path / "rl_model_vecnormalize_40_steps.pkl", make_vec_env(point_env, n_envs=1))
    np.testing.assert_array_equal(loaded.obs_rms["observation"].mean, venv.obs_rms["observation"].mean)


class ResetFirstGoalEnv(gym.Env):
    """A goal env whose compute_reward reads state that reset sets (as SB3's image bit flipping env does), and that has
    no compute_terminated. SB3 first calls compute_reward when sampling, after the env was reset."""

    def __init__(self):
        box = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.observation_space = gym.spaces.Dict(observation=box, achieved_goal=box, desired_goal=box)
        self.action_space = box

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.threshold, self.t = 0.2, 0
        self.position, self.goal = np.zeros(2, np.float32), self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self._obs(), {}

    def _obs(self):
        return {"observation": self.position.copy(), "achieved_goal": self.position.copy(), "desired_goal": self.goal}

    def step(self, action):
        self.position = np.clip(self.position + 0.2 * action, -1, 1).astype(np.float32)
        self.t += 1
        reward = float(self.compute_reward(self.position, self.goal, {}))
        return self._obs(), reward, False, self.t >= 5, {}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return -(np.linalg.norm(achieved_goal - desired_goal, axis=-1) > self.threshold).astype(np.float32)


@pytest.mark.parametrize("vec_env_cls", [DummyVecEnv, SubprocVecEnv])
def test_an_env_whose_compute_reward_needs_a_reset_and_that_lacks_compute_terminated(vec_env_cls):
    venv = make_vec_env(ResetFirstGoalEnv, n_envs=2, vec_env_cls=vec_env_cls)
    try:
        model = TD3("MultiInputPolicy", venv, replay_buffer_class=HerReplayBuffer, **SMALL)
        assert model.replay_buffer._compute_terminated is None  # the env has none: stored flags are kept
        model.learn(40)  # the vectorization probe waits for the first use, once the env was reset
        assert model.replay_buffer._probe_done
    finally:
        venv.close()
