"""Stable-Baselines (SB2) HER interface: the model wrapper, the goal-env wrapper and the replay wrapper."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

from herl import DDPG, DQN, SAC, TD3, HerReplayBuffer, ReplayBuffer
from herl.compat.sb2 import HER, GoalSelectionStrategy, HERGoalEnvWrapper, HindsightExperienceReplayWrapper
from herl.envs import BitFlippingEnv

SMALL = dict(learning_starts=50, batch_size=32, policy_kwargs=dict(net_arch=[32, 32]), seed=0)


def test_her_doc_example_with_dqn_trains_saves_loads_and_predicts(tmp_path):
    env = BitFlippingEnv(6, max_steps=6)
    model = HER("MlpPolicy", env, DQN, n_sampled_goal=4, goal_selection_strategy="future", **SMALL)
    assert isinstance(model.replay_buffer, HerReplayBuffer)
    assert model.replay_buffer.n_sampled_goal == 4
    model.learn(300)
    assert model.num_timesteps == 300
    model.save(tmp_path / "her_bit_env.zip")

    loaded = HER.load(tmp_path / "her_bit_env.zip", env=env)
    assert loaded.model_class is DQN and loaded.n_sampled_goal == 4
    assert loaded.goal_selection_strategy is GoalSelectionStrategy.FUTURE
    obs, _ = env.reset(seed=1)
    for _ in range(12):
        action, _ = loaded.predict(obs)
        assert action == model.predict(obs)[0]
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()


def test_loaded_model_predicts_without_env_from_dict_or_flat_observations(tmp_path):
    env = BitFlippingEnv(5)
    model = HER("MlpPolicy", env, DQN, **SMALL)
    model.save(tmp_path / "m.zip")
    loaded = HER.load(tmp_path / "m.zip")  # no env: SB2 needed one, herl does not
    assert loaded.get_env() is None
    obs, _ = env.reset(seed=0)
    flat = HERGoalEnvWrapper(env).convert_dict_to_obs(obs)
    assert loaded.predict(obs)[0] == model.predict(obs)[0] == loaded.predict(flat)[0]


@pytest.mark.parametrize("model_class", [SAC, TD3, DDPG])
def test_continuous_bit_flipping_runs_with_each_continuous_model(model_class):
    env = BitFlippingEnv(4, continuous=True, max_steps=4)
    model = HER("MlpPolicy", env, model_class, n_sampled_goal=2, goal_selection_strategy="final", **SMALL)
    model.learn(120)
    action, _ = model.predict(env.reset(seed=0)[0])
    assert action.shape == (4,) and np.all(np.abs(action) <= 1)
    assert model.replay_buffer.goal_selection_strategy is GoalSelectionStrategy.FINAL


def test_action_probability_of_dqn_is_a_distribution_over_actions():
    env = BitFlippingEnv(5)
    model = HER("MlpPolicy", env, DQN, **SMALL)
    obs, _ = env.reset(seed=0)
    probs = model.action_probability(obs)
    assert probs.shape == (5,) and probs.sum() == pytest.approx(1.0, abs=1e-5)
    assert model.action_probability(obs, actions=[2]) == pytest.approx(probs[2], rel=1e-5)
    assert model.action_probability(obs, actions=[2], logp=True) == pytest.approx(np.log(probs[2]), rel=1e-5)
    batch = {k: np.stack([v, v]) for k, v in obs.items()}
    assert model.action_probability(batch).shape == (2, 5)


def test_action_probability_of_sac_is_mean_and_std_and_a_density():
    env = BitFlippingEnv(3, continuous=True)
    model = HER("MlpPolicy", env, SAC, **SMALL)
    obs, _ = env.reset(seed=0)
    mean, std = model.action_probability(obs)
    assert mean.shape == std.shape == (3,) and np.all(std > 0)
    # the density of given actions is that of the tanh-squashed Gaussian (independent oracle: torch.distributions)
    squashed = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(torch.as_tensor(mean), torch.as_tensor(std)), [torch.distributions.TanhTransform()])
    for action in (np.tanh(mean), np.array([0.5, -0.9, 0.1], np.float32)):
        expected = squashed.log_prob(torch.as_tensor(action)).sum().item()
        assert model.action_probability(obs, actions=action, logp=True) == pytest.approx(expected, rel=1e-4, abs=1e-4)
        assert model.action_probability(obs, actions=action) == pytest.approx(np.exp(expected), rel=1e-4)


def test_action_probability_of_a_deterministic_policy_refuses_a_density():
    env = BitFlippingEnv(3, continuous=True)
    model = HER("MlpPolicy", env, TD3, **SMALL)
    obs, _ = env.reset(seed=0)
    mean, std = model.action_probability(obs)
    assert np.allclose(mean, model.predict(obs)[0]) and np.all(std == 0)
    with pytest.raises(ValueError, match="deterministic"):
        model.action_probability(obs, actions=mean)


def test_her_rejects_other_model_classes_and_pickle():
    env = BitFlippingEnv(3)
    with pytest.raises(ValueError, match="model_class"):
        HER("MlpPolicy", env, object)
    model = HER("MlpPolicy", env, DQN, **SMALL)
    with pytest.raises(ValueError, match="pickle"):
        model.save("x.zip", cloudpickle=True)


def test_goal_env_wrapper_round_trips_observations_and_keeps_compute_reward():
    env = HERGoalEnvWrapper(BitFlippingEnv(4))
    flat, _ = env.reset(seed=0)
    assert env.observation_space.contains(flat) and flat.shape == (12,)
    back = env.convert_obs_to_dict(flat)
    assert list(back) == ["observation", "achieved_goal", "desired_goal"]
    np.testing.assert_array_equal(env.convert_dict_to_obs(back), flat)
    batch = np.stack([flat, flat])
    assert env.convert_obs_to_dict(batch)["desired_goal"].shape == (2, 4)
    assert env.compute_reward(back["achieved_goal"], back["desired_goal"], {}) == env.unwrapped.compute_reward(
        back["achieved_goal"], back["desired_goal"], {})
    flat, reward, terminated, truncated, info = env.step(0)  # gymnasium's five-tuple
    assert flat.shape == (12,)


def test_replay_wrapper_relabels_when_an_episode_ends():
    env = HERGoalEnvWrapper(BitFlippingEnv(4, max_steps=4))
    wrapper = HindsightExperienceReplayWrapper(ReplayBuffer(1000, env.observation_space, env.action_space, device="cpu"),
                                               n_sampled_goal=3, goal_selection_strategy="future", wrapped_env=env, seed=0)
    obs, _ = env.reset(seed=0)
    for t in range(4):
        action = t
        next_obs, reward, terminated, truncated, _ = env.step(action)
        wrapper.add(obs, action, reward, next_obs, terminated or truncated, truncated=truncated and not terminated)
        if terminated:
            break
        obs = next_obs
    steps = t + 1
    assert len(wrapper) == steps * (3 + 1)  # each transition once as it happened and 3 times relabeled
    assert wrapper.can_sample(len(wrapper)) and not wrapper.can_sample(len(wrapper) + 1)
    obs_t, actions, rewards, obs_tp1, dones = wrapper.sample(64)
    assert obs_t.shape == obs_tp1.shape == (64, 12)
    goals = env.convert_obs_to_dict(obs_tp1)
    expected = env.unwrapped.compute_reward(goals["achieved_goal"], goals["desired_goal"], {})
    np.testing.assert_array_equal(rewards, expected)
    assert np.mean(rewards == 0) > 0.3  # relabeled goals make many transitions successful


def test_replay_wrapper_needs_the_goal_env_wrapper():
    with pytest.raises(TypeError, match="HERGoalEnvWrapper"):
        HindsightExperienceReplayWrapper(100, 4, "future", BitFlippingEnv(3))


def test_replay_wrapper_samples_what_the_engine_samples_directly():
    """The adapter adds nothing of its own: same transitions and seed, same batches as the engine."""
    env = HERGoalEnvWrapper(BitFlippingEnv(5, max_steps=5, random_goal=True))
    wrapper = HindsightExperienceReplayWrapper(500, 4, "episode", env, seed=7)
    engine = HerReplayBuffer(500, env.env.observation_space, env.action_space, env=env.env, device="cpu", n_sampled_goal=4,
                             goal_selection_strategy="episode", online_sampling=False, max_episode_length=5, seed=7)
    obs, _ = env.reset(seed=3)
    for t in range(60):
        action = t % 5
        next_obs, reward, terminated, truncated, _ = env.step(action)
        wrapper.add(obs, action, reward, next_obs, terminated or truncated, truncated=truncated and not terminated)
        engine.add(env.convert_obs_to_dict(obs), env.convert_obs_to_dict(next_obs), np.array(action), reward,
                   terminated=terminated, truncated=truncated and not terminated)
        obs = env.reset()[0] if terminated or truncated else next_obs
    obs_t, actions, rewards, obs_tp1, dones = wrapper.sample(128)
    direct = engine.sample(128)
    np.testing.assert_array_equal(obs_t, env.convert_dict_to_obs({k: v.numpy() for k, v in direct.observations.items()}))
    np.testing.assert_array_equal(rewards, direct.rewards.numpy().ravel())
    np.testing.assert_array_equal(dones, direct.dones.numpy().ravel())


class OneGoalAtATime(BitFlippingEnv):
    """An SB2-era goal env: compute_reward takes one goal, as gym's GoalEnv documents it and SB2's HER called it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = 0

    def compute_reward(self, achieved_goal, desired_goal, info):
        self.calls += 1
        assert np.ndim(achieved_goal) == 1 and isinstance(info, dict)
        return 0.0 if np.array_equal(achieved_goal, desired_goal) else -1.0


def test_an_env_whose_compute_reward_takes_one_goal_learns_saves_and_loads(tmp_path):
    env = OneGoalAtATime(4, continuous=True, max_steps=4)
    model = HER("MlpPolicy", env, SAC, **{**SMALL, "learning_starts": 20})
    model.learn(60)
    assert env.calls > 0
    batch = model.replay_buffer.sample(256)
    goals = batch.next_observations
    expected = np.where((goals["achieved_goal"] == goals["desired_goal"]).all(axis=1), 0.0, -1.0)
    np.testing.assert_array_equal(batch.rewards.numpy().ravel(), expected)  # relabeled goal by goal, correctly
    model.save(tmp_path / "m.zip")
    again = OneGoalAtATime(4, continuous=True, max_steps=4)
    HER.load(tmp_path / "m.zip", env=again).learn(30)
    assert again.calls > 0


def test_the_replay_wrapper_relabels_with_a_one_goal_compute_reward():
    env = HERGoalEnvWrapper(OneGoalAtATime(4, max_steps=4))
    wrapper = HindsightExperienceReplayWrapper(1000, 3, "future", env, seed=0)
    obs, _ = env.reset(seed=0)
    for t in range(12):
        next_obs, reward, terminated, truncated, _ = env.step(t % 4)
        wrapper.add(obs, t % 4, reward, next_obs, terminated or truncated, truncated=truncated and not terminated)
        obs = env.reset()[0] if terminated or truncated else next_obs
    _, _, rewards, obs_tp1, _ = wrapper.sample(64)
    goals = env.convert_obs_to_dict(obs_tp1)
    expected = np.where((goals["achieved_goal"] == goals["desired_goal"]).all(axis=1), 0.0, -1.0)
    np.testing.assert_array_equal(rewards, expected)


def test_discrete_goal_spaces_flatten_to_multidiscrete_and_predict_from_flat_observations():
    env = BitFlippingEnv(4, discrete_obs_space=True, max_steps=4)
    wrapped = HERGoalEnvWrapper(env)
    n = env.observation_space["observation"].n
    assert wrapped.observation_space == spaces.MultiDiscrete([n, n, n])  # as SB2's wrapper
    obs, _ = env.reset(seed=0)
    flat = wrapped.convert_dict_to_obs(obs)
    assert flat.shape == (3,) and wrapped.observation_space.contains(flat)
    back = wrapped.convert_obs_to_dict(flat)
    assert all(back[k] == obs[k] for k in obs)
    model = HER("MlpPolicy", env, DQN, **SMALL)
    assert model.predict(flat)[0] == model.predict(obs)[0]
    with pytest.raises(ValueError, match=r"all Box, all MultiBinary or all Discrete; this env's are \['Box'"):
        HERGoalEnvWrapper(MixedSpaces())


class MixedSpaces(BitFlippingEnv):
    def __init__(self):
        super().__init__(3, continuous=True)
        self.observation_space = spaces.Dict({"observation": spaces.Box(0, 1, (3,)), "achieved_goal": spaces.MultiBinary(3),
                                              "desired_goal": spaces.MultiBinary(3)})


def test_get_env_returns_the_env_as_given_and_set_env_replaces_it():
    env = BitFlippingEnv(4, max_steps=4)
    wrapped = HERGoalEnvWrapper(env)
    model = HER("MlpPolicy", wrapped, DQN, **SMALL)
    assert model.get_env() is wrapped
    other = BitFlippingEnv(4, max_steps=4)
    model.set_env(other)
    assert model.get_env() is other
    made = HER("MlpPolicy", "herl/BitFlipping-v0", DQN, **SMALL).get_env()
    assert made.observation_space == BitFlippingEnv().observation_space  # an env id is made, as SB2 made it


def test_the_replay_wrappers_discrete_actions_are_numbers_as_in_sb2():
    env = HERGoalEnvWrapper(BitFlippingEnv(4, max_steps=4))
    wrapper = HindsightExperienceReplayWrapper(100, 2, "future", env, seed=0)
    obs, _ = env.reset(seed=0)
    for t in range(4):
        next_obs, reward, terminated, truncated, _ = env.step(t)
        wrapper.add(obs, t, reward, next_obs, terminated or truncated)
        obs = next_obs
        if terminated or truncated:
            break
    actions = wrapper.sample(16)[1]
    assert actions.shape == (16,) and np.isin(actions, np.arange(4)).all()
