"""The HER examples of Stable-Baselines3's docs, imports swapped to herl, bodies as users write them (only the step
counts shortened and the envs ours), on envs built with SB3's own ``make_vec_env`` and ``DummyVecEnv``."""

from __future__ import annotations

import gymnasium as gym
import pytest

from herl import DDPG, DQN, SAC, TD3, HerReplayBuffer, evaluate_policy
from herl.buffers import GoalSelectionStrategy
from herl.envs import BitFlippingEnv

vec_env = pytest.importorskip("stable_baselines3.common.vec_env")
env_util = pytest.importorskip("stable_baselines3.common.env_util")
DummyVecEnv, make_vec_env = vec_env.DummyVecEnv, env_util.make_vec_env


@pytest.mark.parametrize("model_class", [DQN, SAC, DDPG, TD3])
def test_sb3_her_example_on_make_vec_env(model_class, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    N_BITS = 5
    env = make_vec_env(lambda: BitFlippingEnv(n_bits=N_BITS, continuous=model_class in [DDPG, SAC, TD3],
                                              max_steps=N_BITS), n_envs=1)
    goal_selection_strategy = "future"  # equivalent to GoalSelectionStrategy.FUTURE
    model = model_class(
        "MultiInputPolicy",
        env,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs=dict(
            n_sampled_goal=4,
            goal_selection_strategy=goal_selection_strategy,
        ),
        learning_starts=50,
        verbose=1,
    )
    model.learn(200)
    model.save("./her_bit_env")
    # Because it needs access to `env.compute_reward()`, HER must be loaded with the env
    model = model_class.load("./her_bit_env", env=env)
    obs = env.reset()
    for _ in range(20):
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, done, _ = env.step(action)
    assert model.num_timesteps == 200


def test_the_basic_sac_setup_of_the_older_sb3_her_docs_runs():
    env = gym.make("herl/PointReach-v0")
    assert isinstance(env.observation_space, gym.spaces.Dict)
    env = DummyVecEnv([lambda: env])
    model = SAC(
        "MultiInputPolicy",
        env,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs=dict(
            n_sampled_goal=4,
            goal_selection_strategy="future",
            online_sampling=True,
            max_episode_length=50,
        ),
        learning_starts=60,
        verbose=1,
    )
    model.learn(total_timesteps=120)
    her_kwargs = dict(n_sampled_goal=8, goal_selection_strategy=GoalSelectionStrategy.FUTURE, online_sampling=True,
                      max_episode_length=100, handle_timeout_termination=True, optimize_memory_usage=False)
    model = TD3("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=her_kwargs,
                buffer_size=1000000, learning_starts=60, batch_size=256, verbose=1)
    model.learn(total_timesteps=120)
    mean_reward, std_reward = evaluate_policy(model, env, n_eval_episodes=2, deterministic=True)
    assert -50.0 <= mean_reward <= 0.0
