"""The NaN guard names the first cause: a diverged policy's action before the env's observation it made NaN, an
episode's first observation before the action chosen from it, a float64 value that overflows its float32 column as
such; ``predict`` refuses non-finite observations instead of answering NaN (or DQN's action 0) silently."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from herl import DQN, SAC, HerReplayBuffer, ReplayBuffer
from herl.envs import BitFlippingEnv, PointReachEnv
from herl.errors import NonFiniteError

SMALL = dict(learning_starts=8, batch_size=8, buffer_size=1000, policy_kwargs=dict(net_arch=[8]))


class CountSteps(gym.Wrapper):
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        return self.env.step(action)


def test_a_diverged_policy_is_named_before_the_observations_its_action_made_nan():
    env = CountSteps(PointReachEnv())  # a NaN action makes its next observation NaN
    model = SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, seed=0,
                **{**SMALL, "learning_rate": 1e30})
    with pytest.raises(NonFiniteError) as info:
        model.learn(200)
    message = str(info.value)
    assert "the policy's action of env 0 holds NaN or infinity" in message and "the policy diverged" in message
    assert "learning_rate (1e+30)" in message and "Lower learning_rate" in message
    assert "next_obs" not in message and "Find where the env" not in message
    assert env.steps == model.num_timesteps == len(model.replay_buffer)  # the env never got the NaN action


def test_the_buffer_checks_the_action_before_what_the_env_answered_to_it():
    env = PointReachEnv()
    buffer = HerReplayBuffer(1000, env.observation_space, env.action_space, env=env)
    obs, _ = env.reset(seed=0)
    nan_next = {**obs, "achieved_goal": np.full(2, np.nan, np.float32)}
    with pytest.raises(NonFiniteError) as info:
        buffer.add(obs, nan_next, np.full(2, np.nan, np.float32), np.nan, terminated=False, truncated=False)
    message = str(info.value)
    assert message.startswith("action of env 0 holds NaN or infinity, chosen from a finite observation")
    assert "policy diverged" in message and "lower learning_rate" in message
    nan_obs = {**obs, "observation": np.full(4, np.nan, np.float32)}  # the observation acted on comes first
    with pytest.raises(NonFiniteError, match=r"^obs\['observation'\] of env 0"):
        buffer.add(nan_obs, nan_next, np.full(2, np.nan, np.float32), 0.0, terminated=False, truncated=False)
    assert len(buffer) == 0


class NanAtSecondReset(gym.Wrapper):
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.resets = 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.resets += 1
        if self.resets == 2:
            obs = {**obs, "observation": np.full_like(obs["observation"], np.nan)}
        return obs, info


def test_a_nan_first_observation_is_blamed_not_the_action_the_policy_chose_from_it():
    model = SAC("MultiInputPolicy", NanAtSecondReset(PointReachEnv(max_episode_steps=10)),
                replay_buffer_class=HerReplayBuffer, seed=0, **SMALL)
    with pytest.raises(NonFiniteError) as info:
        model.learn(40)
    message = str(info.value)
    assert "training stopped at env step 10: obs['observation'] of env 0 holds NaN or infinity" in message
    assert "episode's first observation" in message and "policy diverged" not in message


class Float64Overflow(gym.ObservationWrapper):
    """PointReach's float32 observations, handed out as float64 and one of them 1e300 at step 5."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0

    def reset(self, **kwargs):
        self.steps = -1
        return super().reset(**kwargs)

    def observation(self, observation):
        self.steps += 1
        out = {k: np.asarray(v, np.float64) for k, v in observation.items()}
        if self.steps == 5:
            out["observation"][1] = 1e300
        return out


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # numpy's, as the value is stored
@pytest.mark.parametrize("storage_device", [None, "cpu"])
def test_a_float64_value_that_overflows_float32_is_named_as_such(storage_device):
    env = Float64Overflow(PointReachEnv())
    model = SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, seed=0,
                replay_buffer_kwargs=dict(storage_device=storage_device), **SMALL)
    with pytest.raises(NonFiniteError) as info:
        model.learn(20)
    message = str(info.value)
    assert "next_obs['observation'] of env 0 holds 1e+300, which overflows float32" in message
    assert "would be stored as infinity" in message and "info entry" not in message
    assert len(model.replay_buffer) == 4
    stored = model.replay_buffer.storage.next_states["observation"][:4]  # the transitions stored (a NumPy storage
    assert bool(np.isfinite(stored.cpu().numpy() if torch.is_tensor(stored) else stored).all())  # rewrites row 5)


def test_a_non_finite_info_entry_is_named():
    env = PointReachEnv()
    buffer = HerReplayBuffer(1000, env.observation_space, env.action_space, env=env, copy_info_dict=True,
                             info_keys=["distance"])
    obs, _ = env.reset(seed=0)
    buffer.add(obs, obs, np.zeros(2, np.float32), 0.0, infos=[{"distance": 0.5}], terminated=False, truncated=False)
    with pytest.raises(NonFiniteError, match="info entry 'distance' of env 0 holds NaN or infinity"):
        buffer.add(obs, obs, np.zeros(2, np.float32), 0.0, infos=[{"distance": np.nan}], terminated=False,
                   truncated=False)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_plain_replay_names_the_overflowing_observation_too():
    obs_space, act_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Box(-1, 1, (2,))
    buffer = ReplayBuffer(100, obs_space, act_space)
    big = np.array([0.0, -1e200, 0.0])
    with pytest.raises(NonFiniteError, match=r"^obs of env 0 holds -1e\+200, which overflows float32"):
        buffer.add(big, np.zeros(3), np.zeros(2), 0.0, terminated=False)


def test_predict_refuses_non_finite_observations_naming_key_and_index():
    env = PointReachEnv()
    model = SAC("MultiInputPolicy", env, seed=0, **SMALL)
    obs, _ = env.reset(seed=0)
    bad = {**obs, "desired_goal": np.array([0.1, np.nan], np.float32)}
    with pytest.raises(ValueError, match=r"observation\['desired_goal'\] holds nan at index \(1,\)"):
        model.predict(bad)
    batch = {k: np.stack([v, v, v]) for k, v in obs.items()}
    batch["observation"][2, 3] = np.inf
    with pytest.raises(ValueError, match=r"observation\['observation'\] holds inf at row 2 of the batch, index \(3,\)"):
        model.predict(batch)
    with pytest.raises(ValueError, match=r"row 2 of the batch"):
        model.predict({k: torch.as_tensor(v) for k, v in batch.items()})
    model.predict({k: np.stack([v, v]) for k, v in obs.items()})  # finite ones still work
    with pytest.raises(ValueError, match=r"observation\['achieved_goal'\] holds nan"):  # the networks read it
        model.predict({**obs, "achieved_goal": np.full(2, np.nan, np.float32)})
    chosen = SAC("MultiInputPolicy", env, seed=0, **{**SMALL, "policy_kwargs": {
        **SMALL.get("policy_kwargs", {}), "input_keys": ["observation", "desired_goal"]}})
    chosen.predict({**obs, "achieved_goal": np.full(2, np.nan, np.float32)})  # a key this policy does not read

    bits = BitFlippingEnv(n_bits=4, continuous=False)
    dqn = DQN("MultiInputPolicy", bits, seed=0, **SMALL)
    bits_obs, _ = bits.reset(seed=0)
    float_obs = {k: v.astype(np.float32) for k, v in bits_obs.items()}
    float_obs["observation"][0] = np.nan  # DQN answered action 0
    with pytest.raises(NonFiniteError, match=r"observation\['observation'\] holds nan at index \(0,\)"):
        dqn.predict(float_obs)

    flat = SAC("MlpPolicy", gym.make("Pendulum-v1"), seed=0, **SMALL)
    with pytest.raises(ValueError, match=r"^observation holds nan at index \(0,\)"):
        flat.predict(np.array([np.nan, 0.0, 0.0], np.float32))
