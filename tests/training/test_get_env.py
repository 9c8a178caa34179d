"""``model.get_env()`` is a VecEnv with Stable-Baselines3's interface, and stepping it never corrupts training."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from herl import DQN, SAC, BaseCallback, HerReplayBuffer, evaluate_policy
from herl.envs import BitFlippingEnv
from herl.training import VecEnv

SMALL = dict(learning_starts=16, batch_size=16, buffer_size=1000, policy_kwargs=dict(net_arch=[16]), seed=0)


def dqn(env=None, **kwargs) -> DQN:
    env = BitFlippingEnv(n_bits=4) if env is None else env
    return DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, **{**SMALL, **kwargs})


def point_envs(n: int) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: gym.make("herl/PointReach-v0", max_episode_steps=5) for _ in range(n)],
                         autoreset_mode=AutoresetMode.SAME_STEP)


def test_get_env_is_one_vec_env_until_set_env():
    model = dqn()
    vec_env = model.get_env()
    assert isinstance(vec_env, VecEnv) and model.get_env() is vec_env
    assert vec_env.num_envs == 1
    assert vec_env.observation_space == model.observation_space and vec_env.action_space == model.action_space
    model.set_env(BitFlippingEnv(n_bits=4))
    assert model.get_env() is not vec_env and model.get_env() is model.get_env()


def test_sb3_readme_loop_runs_on_a_single_env():
    model = dqn()
    model.learn(32)
    vec_env = model.get_env()
    obs = vec_env.reset()
    assert obs["observation"].shape == (1, 4)
    episodes = 0
    for _ in range(1000):
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, done, info = vec_env.step(action)
        assert reward.shape == done.shape == (1,) and reward.dtype == np.float32 and done.dtype == bool
        assert isinstance(info, list) and "TimeLimit.truncated" in info[0]
        if done[0]:
            episodes += 1
            final = info[0]["terminal_observation"]
            assert set(final) == {"observation", "achieved_goal", "desired_goal"} and final["observation"].shape == (4,)
            assert info[0]["TimeLimit.truncated"] == (not info[0]["is_success"])
    assert episodes >= 1000 // 4  # episodes end at 4 steps at the latest, and the env was reset at once each time


def test_vec_env_over_a_gymnasium_vector_env_autoresets_with_the_final_observation():
    model = SAC("MultiInputPolicy", point_envs(2), **SMALL)
    vec_env = model.get_env()
    assert vec_env.num_envs == 2
    vec_env.seed(7)
    first = vec_env.reset()
    vec_env.seed(7)
    np.testing.assert_array_equal(vec_env.reset()["observation"], first["observation"])  # the seed applies per reset
    for t in range(5):
        vec_env.step_async(np.zeros((2, 2), np.float32))  # standing still never reaches the goal: time limit at 5
        obs, rewards, dones, infos = vec_env.step_wait()
    assert dones.all()
    for i in range(2):
        assert infos[i]["TimeLimit.truncated"] is True
        final = infos[i]["terminal_observation"]
        np.testing.assert_array_equal(final["observation"], first["observation"][i])  # it stood still: final == start
        assert not np.array_equal(obs["desired_goal"][i], final["desired_goal"])  # obs is the next episode's start
    # herl's own evaluate_policy takes it
    rewards, lengths = evaluate_policy(model, vec_env, n_eval_episodes=4, return_episode_rewards=True)
    assert lengths == [5, 5, 5, 5]


def test_env_method_get_attr_set_attr_and_wrappers():
    env = gym.wrappers.RecordEpisodeStatistics(BitFlippingEnv(n_bits=4))
    vec_env = dqn(env).get_env()
    assert vec_env.get_attr("n_bits") == [4] and vec_env.has_attr("n_bits") and not vec_env.has_attr("nope")
    vec_env.set_attr("max_steps", 2)
    assert env.unwrapped.max_steps == 2  # set where the attribute lives, under the wrapper
    reward = vec_env.env_method("compute_reward", np.ones(4), np.ones(4), {}, indices=[0])
    assert reward == [0.0]
    assert vec_env.env_is_wrapped(gym.wrappers.RecordEpisodeStatistics) == [True]
    assert vec_env.env_is_wrapped(gym.wrappers.TimeLimit) == [False]
    assert vec_env.envs == [env] and vec_env.unwrapped is vec_env
    vec_env.close()


def test_render_tiles_frames_and_warns_without_a_render_mode():
    model = SAC("MultiInputPolicy", SyncVectorEnv(
        [lambda: BitFlippingEnv(n_bits=3, continuous=True, render_mode="rgb_array") for _ in range(3)],
        autoreset_mode=AutoresetMode.SAME_STEP), **SMALL)
    vec_env = model.get_env()
    vec_env.reset()
    frame = vec_env.get_images()[0]
    image = vec_env.render()
    assert image.shape == (2 * frame.shape[0], 2 * frame.shape[1], 3)  # 3 frames in a 2 x 2 grid
    np.testing.assert_array_equal(image[: frame.shape[0], : frame.shape[1]], frame)
    with pytest.warns(UserWarning, match="without a render_mode"):
        assert dqn().get_env().render() is None


def test_learn_after_stepping_get_env_resets_instead_of_storing_a_stale_transition():
    model = dqn(BitFlippingEnv(n_bits=8))
    model.learn(2)
    storage = model.replay_buffer.storage
    assert int(storage.open_len.sum()) == 2  # an 8-bit episode, 2 steps in
    vec_env = model.get_env()
    vec_env.step(np.array([0]))  # the env moves on; the loop's last observation is stale now
    model.learn(1, reset_num_timesteps=False)
    # the running episode was closed and the env reset: the new step starts a new episode, not a jump
    assert int(storage.open_len.sum()) == 1 and model.num_timesteps == 3
    assert not model.env.stepped_outside


def test_learn_without_stepping_get_env_goes_on():
    model = dqn(BitFlippingEnv(n_bits=8))
    model.learn(2)
    model.get_env().get_attr("n_bits")  # reading is not stepping
    model.learn(1, reset_num_timesteps=False)
    assert int(model.replay_buffer.storage.open_len.sum()) == 3


class StepsTheTrainingEnv(BaseCallback):
    def _on_step(self) -> bool:
        if self.n_calls == 2:
            self.training_env.reset()
        return True


def test_a_callback_that_resets_the_training_env_restarts_the_episode():
    model = dqn(BitFlippingEnv(n_bits=8))
    model.learn(4, callback=StepsTheTrainingEnv())
    # steps 1-2 end as a truncated episode, steps 3-4 start from the new reset
    assert int(model.replay_buffer.storage.open_len.sum()) == 2


def test_an_env_class_given_for_an_env_says_to_pass_an_object():
    from herl.envs import PointReachEnv

    with pytest.raises(TypeError, match=r"got the env class PointReachEnv, not an env: pass an env object, "
                                        r"PointReachEnv\(\.\.\.\)"):
        SAC("MultiInputPolicy", PointReachEnv)
