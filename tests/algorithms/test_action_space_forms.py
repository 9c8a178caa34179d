"""Box action spaces in the forms gymnasium allows beside the flat float32 one: float64 (custom envs often declare
it) and several dimensions, e.g. (2, 2). The networks read flat float32 actions; actions stored, predicted and sent to
the env keep the space's dtype and shape. SB3 takes both (its ``test_spaces.py``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from herl import DDPG, DQN, SAC, TD3, TQC, CrossQ

ALGORITHMS = [SAC, TD3, DDPG, TQC, CrossQ]


class RecordingEnv(gym.Env):
    """Uniform observations in a Box, drawn from the env's own generator (seeded by the first reset, so a run
    repeats); the reward is the mean action, so learning has something to follow; every action the env gets is
    kept."""

    def __init__(self, observation_space: spaces.Box, action_space: spaces.Box) -> None:
        self.observation_space, self.action_space = observation_space, action_space
        self.received: list[np.ndarray] = []

    def _observation(self) -> np.ndarray:
        space = self.observation_space
        return self.np_random.uniform(space.low, space.high).astype(space.dtype)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._observation(), {}

    def step(self, action):
        self.received.append(action)
        return self._observation(), float(np.mean(action)), False, False, {}


FLOAT32_OBS = spaces.Box(-1, 1, (3,), np.float32)
FORMS = {
    "float64": spaces.Box(-2, 2, (2,), np.float64),
    "2x2": spaces.Box(-1, 1, (2, 2), np.float32),
    "2x2 float64": spaces.Box(np.full((2, 2), -1.0), np.array([[1.0, 2.0], [3.0, 4.0]]), dtype=np.float64),
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("model_class", ALGORITHMS)
def test_box_actions_of_any_dtype_and_shape_train_predict_save_and_load(model_class, form, tmp_path):
    space = FORMS[form]
    env = gym.wrappers.TimeLimit(RecordingEnv(FLOAT32_OBS, space), max_episode_steps=20)
    model = model_class("MlpPolicy", env, learning_starts=20, batch_size=16, seed=0, policy_kwargs=dict(net_arch=[16]))
    model.learn(60)
    received = env.unwrapped.received
    assert len(received) == 60
    assert all(a.shape == space.shape and a.dtype == space.dtype and space.contains(a) for a in received)
    assert model._n_updates > 0 and model.replay_buffer.actions.shape[-len(space.shape):] == space.shape
    obs = np.stack([FLOAT32_OBS.sample() for _ in range(4)])
    for deterministic in (True, False):
        actions, _ = model.predict(obs, deterministic=deterministic)
        assert actions.shape == (4, *space.shape) and actions.dtype == space.dtype
        one, _ = model.predict(obs[0], deterministic=deterministic)
        assert one.shape == space.shape and one.dtype == space.dtype
    model.save(tmp_path / "model")
    model.save_replay_buffer(tmp_path / "buffer")
    loaded = model_class.load(tmp_path / "model.zip", env=env)
    loaded.load_replay_buffer(tmp_path / "buffer")
    assert loaded.action_space == space
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
    loaded.learn(30, reset_num_timesteps=False)
    assert all(torch.isfinite(p).all() for p in loaded.policy.parameters())


@pytest.mark.parametrize("model_class", [TD3, DDPG])
def test_exploration_noise_takes_the_box_shape_and_a_flat_one_is_refused_naming_it(model_class):
    from herl import NormalActionNoise, OrnsteinUhlenbeckActionNoise

    env = gym.wrappers.TimeLimit(RecordingEnv(FLOAT32_OBS, FORMS["2x2"]), max_episode_steps=20)
    for noise in (NormalActionNoise(np.zeros((2, 2)), 0.1 * np.ones((2, 2))),
                  OrnsteinUhlenbeckActionNoise(np.zeros((2, 2)), 0.1 * np.ones((2, 2))),
                  NormalActionNoise(0.0, 0.1)):
        model = model_class("MlpPolicy", env, action_noise=noise, learning_starts=10, batch_size=8, seed=0,
                            policy_kwargs=dict(net_arch=[8]))
        model.learn(30)
    with pytest.raises(ValueError, match=r"action_noise has shape \(4,\), the action space \(2, 2\): give mean and "
                                         r"sigma shaped \(2, 2\)"):
        model_class("MlpPolicy", env, action_noise=NormalActionNoise(np.zeros(4), np.ones(4)))


@pytest.mark.parametrize("model_class", ALGORITHMS)
def test_a_box_of_whole_numbers_is_refused_naming_the_fix(model_class):
    """Actions cast to an integer Box within (-1, 1) are all 0: the agent could never move, so it is refused."""
    from herl.errors import ActionSpaceError

    env = gym.wrappers.TimeLimit(RecordingEnv(FLOAT32_OBS, spaces.Box(-1, 1, (2,), np.int64)), max_episode_steps=20)
    with pytest.raises(ActionSpaceError, match="holds whole numbers: give the env a float32 Box"):
        model_class("MlpPolicy", env)


@pytest.mark.parametrize("algo", [DQN, SAC], ids=lambda a: a.__name__)
def test_multi_discrete_actions_are_refused_with_the_discrete_space_to_give(algo):
    from herl.errors import ActionSpaceError

    obs_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    with pytest.raises(ActionSpaceError, match=r"no herl algorithm takes MultiDiscrete\(\[3 3 3\]\) actions: give the env "
                                               r"a Discrete\(27\) action space"):
        algo("MlpPolicy", None, observation_space=obs_space, action_space=spaces.MultiDiscrete([3, 3, 3]))
