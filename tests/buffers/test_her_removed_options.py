"""Options removed from HerReplayBuffer: ``episode_priority="goal_motion"`` with ``goal_motion_scale``,
``goal_motion_weight`` and ``goal_lift_weight``, and ``motion_bonus`` with ``motion_bonus_scale`` (experiments no
preset adopted; docs/research/fetch.md keeps what they found). The constructor no longer takes them; buffer and model
files written before still load, with a note that they are ignored."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from safetensors.numpy import load as load_arrays
from safetensors.numpy import save as save_arrays

from herl import DQN, HerReplayBuffer
from herl.buffers.her import REMOVED_OPTIONS
from herl.envs import BitFlippingEnv

OBS = spaces.Dict({k: spaces.Box(-100, 100, (2,), np.float32) for k in ("observation", "achieved_goal", "desired_goal")})
ACT = spaces.Box(-1, 1, (1,), np.float32)
# What a file written before the removal held: every option, at its value when off.
OFF = {"episode_priority": None, "goal_motion_scale": 0.05, "goal_motion_weight": 10.0, "goal_lift_weight": 0.0,
       "motion_bonus": 0.0, "motion_bonus_scale": 0.01}


def reward(achieved_goal, desired_goal, info=None):
    return -(np.linalg.norm(achieved_goal - desired_goal, axis=-1) > 0.05).astype(np.float32)


def filled(**kwargs) -> HerReplayBuffer:
    """A buffer of four 10-step episodes whose achieved goal moves 0, 1, 2 and 3 cm per step."""
    buffer = HerReplayBuffer(1000, OBS, ACT, compute_reward=reward, seed=0, max_episode_length=50, **kwargs)
    for episode in range(4):
        achieved = np.zeros(2, np.float32)
        for t in range(10):
            moved = achieved + np.float32(0.01 * episode)
            obs = {"observation": np.array([episode, t], np.float32), "achieved_goal": achieved,
                   "desired_goal": np.full(2, 50, np.float32)}
            buffer.add(obs, {**obs, "achieved_goal": moved}, np.zeros(1), np.array([-1.0]), np.array([t == 9]),
                       [{"TimeLimit.truncated": t == 9}])
            achieved = moved
    return buffer


def rewrite(path: Path, *, meta: dict | None = None, config: dict | None = None, arrays: dict | None = None) -> None:
    """Write into a herl archive what an older herl put there: entries of meta.json, of its config, arrays."""
    with zipfile.ZipFile(path) as archive:
        header = json.loads(archive.read("meta.json"))
        stored = load_arrays(archive.read("arrays.safetensors"))
    header.update(meta or {})
    if config:
        header["config"] = {**header["config"], **config}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("meta.json", json.dumps(header))
        archive.writestr("arrays.safetensors", save_arrays({**stored, **(arrays or {})}))


@pytest.mark.parametrize("name", REMOVED_OPTIONS)
def test_the_constructor_no_longer_takes_them(name):
    with pytest.raises(TypeError, match=name):
        HerReplayBuffer(1000, OBS, ACT, compute_reward=reward, **{name: OFF[name] or "goal_motion"})


def test_a_buffer_file_that_names_them_off_loads_with_a_note_and_samples_as_before(tmp_path):
    buffer = filled()
    buffer.save(tmp_path / "buffer.zip")
    rewrite(tmp_path / "buffer.zip", config=OFF)
    with pytest.warns(UserWarning, match=r"names episode_priority=None, .*motion_bonus_scale=0.01: options herl no "
                                         r"longer has .* ignored: they were off, so nothing changes"):
        loaded = HerReplayBuffer.load(tmp_path / "buffer.zip", compute_reward=reward)
    a, b = buffer.sample(256), loaded.sample(256)
    torch.testing.assert_close(a.observations, b.observations)
    torch.testing.assert_close(a.rewards, b.rewards)


def test_a_buffer_file_of_a_goal_motion_run_loads_with_a_note_and_samples_uniformly(tmp_path):
    """Such a file also holds the episode weights (the priority tree's leaves): they are left unread."""
    buffer = filled()
    buffer.save(tmp_path / "buffer.zip")
    leaves = np.zeros(1000)
    leaves[:40] = 1.0 + 10.0 * np.repeat([0.0, 1.0, 1.0, 1.0], 10)
    rewrite(tmp_path / "buffer.zip", config={**OFF, "episode_priority": "goal_motion", "goal_lift_weight": 30.0},
            arrays={"storage/priority/leaves": leaves, "storage/priority/max_priority": np.array([1.0])})
    with pytest.warns(UserWarning, match="episode_priority='goal_motion'.*goal_lift_weight=30.0.*they were on, so from "
                                         "here it trains as a run without them: episodes drawn uniformly"):
        loaded = HerReplayBuffer.load(tmp_path / "buffer.zip", compute_reward=reward)
    assert loaded.storage.priorities is None and not hasattr(loaded, "episode_priority")
    torch.testing.assert_close(buffer.sample(256).observations, loaded.sample(256).observations)


def test_a_buffer_file_with_a_motion_bonus_loads_with_the_envs_rewards(tmp_path):
    buffer = filled(n_sampled_goal=0)
    buffer.save(tmp_path / "buffer.zip")
    rewrite(tmp_path / "buffer.zip", config={**OFF, "motion_bonus": 0.5})
    with pytest.warns(UserWarning, match=r"motion_bonus=0.5.*the env's own rewards"):
        loaded = HerReplayBuffer.load(tmp_path / "buffer.zip", compute_reward=reward)
    np.testing.assert_array_equal(loaded.sample(64).rewards.numpy(), -1.0)  # no bonus added for the moving goals
    assert not any(name in loaded._config() for name in REMOVED_OPTIONS)  # saved again, the file names none


def test_a_model_file_that_names_them_loads_with_a_note(tmp_path):
    env = BitFlippingEnv(n_bits=4, continuous=False, max_steps=4)
    model = DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, learning_starts=20, seed=0,
                replay_buffer_kwargs={"n_sampled_goal": 2})
    model.learn(40)
    model.save(tmp_path / "model.zip")
    rewrite(tmp_path / "model.zip", meta={"replay_buffer_kwargs": {
        **model.replay_buffer_kwargs, "episode_priority": "goal_motion", "goal_motion_weight": 3.0}})
    with pytest.warns(UserWarning, match=r"the model file .*model.zip names episode_priority='goal_motion', "
                                         r"goal_motion_weight=3.0: options herl no longer has"):
        loaded = DQN.load(tmp_path / "model.zip", env=env)
    assert loaded.replay_buffer_kwargs == {"n_sampled_goal": 2}
    assert isinstance(loaded.replay_buffer, HerReplayBuffer) and loaded.replay_buffer.n_sampled_goal == 2
    obs, _ = env.reset(seed=1)
    assert model.predict(obs, deterministic=True)[0] == loaded.predict(obs, deterministic=True)[0]
