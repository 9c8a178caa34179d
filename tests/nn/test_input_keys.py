"""Which observation entries the networks read: every entry of a Dict observation, as SB3's MultiInputPolicy, unless
``policy_kwargs`` ``input_keys`` chooses; the choice is saved, and files from before it read as they did."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from herl import DQN, SAC, TD3, HerReplayBuffer
from herl.envs import BitFlippingEnv, PointReachEnv


class ExtraEntry(PointReachEnv):
    """PointReach with a fourth entry the policy must see to act well."""

    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Dict({**self.observation_space.spaces,
                                              "extra": spaces.Box(-1.0, 1.0, (2,), np.float32)})

    def _with_extra(self, obs):
        return {**obs, "extra": np.zeros(2, np.float32)}

    def reset(self, **kwargs):
        obs, info = super().reset(**kwargs)
        return self._with_extra(obs), info

    def step(self, action):
        obs, *rest = super().step(action)
        return (self._with_extra(obs), *rest)


def test_every_entry_is_read_by_default_and_changes_the_action():
    model = SAC("MultiInputPolicy", ExtraEntry(), replay_buffer_class=HerReplayBuffer, seed=0)
    assert model.encoder.keys == ("achieved_goal", "desired_goal", "extra", "observation")
    assert model.policy_config.input_keys == model.encoder.keys  # saved as resolved
    obs, _ = ExtraEntry().reset(seed=0)
    for key in ("achieved_goal", "extra"):
        moved = {**obs, key: obs[key] + 0.5}
        assert not np.array_equal(model.predict(obs, deterministic=True)[0], model.predict(moved, deterministic=True)[0])


@pytest.mark.parametrize("model_class, env", [(SAC, PointReachEnv), (TD3, PointReachEnv),
                                              (DQN, lambda: BitFlippingEnv(4))])
def test_input_keys_chooses_the_entries_and_a_file_keeps_the_choice(model_class, env, tmp_path):
    chosen = ["observation", "desired_goal"]
    model = model_class("MultiInputPolicy", env(), policy_kwargs=dict(input_keys=chosen), seed=0)
    assert model.encoder.keys == tuple(chosen)
    obs, _ = env().reset(seed=0)
    ignored = {**obs, "achieved_goal": obs["achieved_goal"] + 1}
    assert np.array_equal(model.predict(obs, deterministic=True)[0], model.predict(ignored, deterministic=True)[0])
    model.save(tmp_path / "m")
    assert model_class.load(tmp_path / "m").encoder.keys == tuple(chosen)
    everything = model_class("MultiInputPolicy", env(), seed=0)
    everything.save(tmp_path / "all")
    assert model_class.load(tmp_path / "all").encoder.keys == ("achieved_goal", "desired_goal", "observation")


@pytest.mark.parametrize("keys, error, match", [
    (["observation", "nope"], ValueError, r"not \['nope'\]"),
    ([], ValueError, "give distinct keys of the observation"),
    (["observation", "observation"], ValueError, "distinct"),
    ("observation", TypeError, "must be a list of observation keys"),
])
def test_input_keys_that_do_not_fit_the_observation_are_refused(keys, error, match):
    with pytest.raises(error, match=match):
        SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(input_keys=keys))


def test_a_flat_observation_has_no_keys_to_choose():
    with pytest.raises(ValueError, match="leave input_keys out"):
        SAC("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(input_keys=["obs"]))
