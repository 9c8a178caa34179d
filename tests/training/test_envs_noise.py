"""Envs the loop accepts (vector envs in SAME_STEP mode store the true final observation) and exploration noise."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from herl import DQN, SAC, HerReplayBuffer, NormalActionNoise, OrnsteinUhlenbeckActionNoise, evaluate_policy
from herl.envs import BitFlippingEnv

SMALL = dict(learning_starts=16, batch_size=16, buffer_size=1000, policy_kwargs=dict(net_arch=[16, 16]), seed=0)


def vector_env(mode, n=2, **env_kwargs):
    return SyncVectorEnv([lambda: BitFlippingEnv(n_bits=3, **env_kwargs) for _ in range(n)], autoreset_mode=mode)


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_vector_env_stores_true_final_observations(mode):
    model = DQN("MultiInputPolicy", vector_env(mode), replay_buffer_class=HerReplayBuffer,
                replay_buffer_kwargs=dict(n_sampled_goal=2), **SMALL)
    model.learn(200)
    assert model.num_timesteps == 200
    storage = model.replay_buffer.storage
    n = storage.rows  # rows per env; check every stored transition of both envs
    for env_idx in range(2):
        written = int(storage.pos[env_idx])
        for row in range(written):
            terminated = storage.transitions["terminated"][row, env_idx]
            next_achieved = storage.next_states["achieved_goal"][row, env_idx]
            next_desired = storage.next_states["desired_goal"][row, env_idx]
            # a terminated transition ends in the goal state: its stored next state is the final one, not a reset
            assert not terminated or np.array_equal(next_achieved, next_desired)
    assert n >= written


def test_next_step_vector_env_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="SAME_STEP"):
        DQN("MultiInputPolicy", vector_env(AutoresetMode.NEXT_STEP), **SMALL)


def test_env_id_and_n_envs():
    with pytest.raises(ValueError, match="Box action space"):
        SAC("MultiInputPolicy", "herl/BitFlipping-v0", **SMALL)  # discrete actions: SAC says what it needs
    model = DQN("MultiInputPolicy", "herl/BitFlipping-v0", n_envs=2, **SMALL)
    model.learn(40)
    assert model.num_timesteps == 40


def test_evaluate_policy_on_a_vector_env():
    model = DQN("MultiInputPolicy", BitFlippingEnv(n_bits=3), **SMALL)
    rewards, lengths, successes = evaluate_policy(model, vector_env(AutoresetMode.SAME_STEP), n_eval_episodes=6,
                                                  return_episode_rewards=True, return_success_rate=True)
    assert len(rewards) == len(lengths) == len(successes) == 6
    assert all(1 <= n <= 3 for n in lengths)


def test_noise_classes():
    noise = NormalActionNoise(np.zeros(3), 0.5 * np.ones(3), seed=1)
    draws = np.stack([noise() for _ in range(2000)])
    assert draws.shape == (2000, 3)
    assert abs(draws.std() - 0.5) < 0.05
    ou = OrnsteinUhlenbeckActionNoise(np.zeros(2), np.ones(2), seed=1)
    first = ou()
    assert first.shape == (2,) and not np.array_equal(first, ou())
    ou.reset()
    assert np.array_equal(ou.noise_prev, np.zeros(2))
    with pytest.raises(ValueError, match="shape"):
        NormalActionNoise(np.zeros(2), np.ones(3))


def test_td3_with_noise_learns_continuous_bit_flipping_briefly():
    from herl import TD3

    env = BitFlippingEnv(n_bits=3, continuous=True)
    model = TD3("MultiInputPolicy", env, action_noise=OrnsteinUhlenbeckActionNoise(np.zeros(3), 0.2 * np.ones(3)),
                replay_buffer_class=HerReplayBuffer, **SMALL)
    model.learn(100)
    assert model.num_timesteps == 100
    assert isinstance(gym.make("herl/BitFlipping-v0").unwrapped, BitFlippingEnv)


def test_gradient_steps_minus_one_counts_every_envs_transitions():
    model = DQN("MultiInputPolicy", vector_env(AutoresetMode.SAME_STEP, n=3), train_freq=1, gradient_steps=-1,
                **{**SMALL, "learning_starts": 0})
    model.learn(30)  # 10 vector steps of 3 transitions, each followed by 3 updates (as SB3)
    assert model._n_updates == 30


def test_each_env_gets_its_own_noise():
    from herl import TD3

    normal = NormalActionNoise(np.zeros(3), np.ones(3), seed=0)
    rows = normal.sample(4)
    assert rows.shape == (4, 3) and len(np.unique(rows[:, 0])) == 4  # independent draws, not one broadcast
    ou = OrnsteinUhlenbeckActionNoise(np.zeros(2), np.ones(2), seed=0)
    ou.sample(3)
    ou.sample(3)
    ou.reset([1])  # env 1's episode ended: only its state restarts
    assert np.array_equal(ou.noise_prev[1], np.zeros(2))
    assert not np.any(ou.noise_prev[[0, 2]] == 0)

    env = vector_env(AutoresetMode.SAME_STEP, n=2, continuous=True)
    model = TD3("MultiInputPolicy", env, action_noise=NormalActionNoise(np.zeros(3), 0.3 * np.ones(3)),
                **{**SMALL, "learning_starts": 0})
    obs, _ = env.reset(seed=0)
    obs = {k: np.repeat(v[:1], 2, axis=0) for k, v in obs.items()}  # both envs see the same observation
    actions = model._collect_actions(obs)
    assert not np.array_equal(actions[0], actions[1])  # yet explore differently


class _CallOnlyNoise(NormalActionNoise):
    """An SB3-style noise: ``__call__`` and a ``reset()`` without arguments."""

    def sample(self, n):
        return super(NormalActionNoise, self).sample(n)  # the base class: n calls

    def reset(self):
        self.resets = getattr(self, "resets", 0) + 1


def test_sb3_style_noise_subclass_still_works():
    from herl import TD3

    noise = _CallOnlyNoise(np.zeros(3), 0.1 * np.ones(3))
    model = TD3("MultiInputPolicy", vector_env(AutoresetMode.SAME_STEP, n=2, continuous=True), action_noise=noise,
                **SMALL)
    model.learn(40)
    assert noise.resets >= 1
