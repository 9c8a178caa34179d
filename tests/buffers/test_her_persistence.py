"""save -> load of HER and plain buffers: same arrays, same samples, book-keeping intact, clear errors."""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from her_world import IdWorld, assert_same_arrays, id_reward, id_spaces, samples_equal, snapshot
from herl.buffers import HerReplayBuffer, ReplayBuffer
from herl.envs import BitFlippingEnv
from herl.io import ArchiveError

STRATEGIES = ["future", "final", "episode", "random"]


def build(sc):
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(
        sc["rows"] * sc["n_envs"], obs_space, action_space, device="cpu", n_envs=sc["n_envs"],
        optimize_memory_usage=sc["share"], n_sampled_goal=sc["k"], goal_selection_strategy=sc["strategy"],
        copy_info_dict=sc.get("copy_info_dict", False), compute_reward=id_reward, online_sampling=sc["online"],
        max_episode_length=max(max(ls) for ls in sc["lengths"]), seed=sc["seed"],
    )
    return IdWorld(buffer, sc["lengths"], rows=sc["rows"], share=sc["share"], online=sc["online"])


@st.composite
def scenarios(draw):
    n_envs = draw(st.integers(1, 3))
    share = draw(st.booleans())
    rows = draw(st.integers(4, 12))
    return dict(
        n_envs=n_envs, share=share, online=draw(st.booleans()), rows=rows,
        lengths=[draw(st.lists(st.integers(1, rows - share), min_size=1, max_size=4)) for _ in range(n_envs)],
        strategy=draw(st.sampled_from(STRATEGIES)), k=draw(st.integers(0, 4)),
        n_before=draw(st.integers(1, 30)), n_after=draw(st.integers(0, 30)), seed=draw(st.integers(0, 1000)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios(), sample_seed=st.integers(0, 2**31))
def test_save_load_round_trip(sc, sample_seed):
    world = build(sc)
    world.run(sc["n_before"])  # usually with episodes still running
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "buffer.herl"
        world.buffer.save(path)
        loaded = HerReplayBuffer.load(path, compute_reward=id_reward, device="cpu")
        again = HerReplayBuffer.load(path, compute_reward=id_reward, device="cpu", seed=sample_seed)
    original = world.buffer
    assert_same_arrays(snapshot(original), snapshot(loaded))
    assert len(loaded) == len(original)
    assert (loaded.n_sampled_goal, loaded.goal_selection_strategy, loaded.online_sampling, loaded.n_envs,
            loaded.optimize_memory_usage, loaded.buffer_size) == (
        original.n_sampled_goal, original.goal_selection_strategy, original.online_sampling, original.n_envs,
        original.optimize_memory_usage, original.buffer_size)
    # the generator state was saved: sampling continues identically
    assert samples_equal(original.sample(64), loaded.sample(64))
    # seed= starts a fresh generator, as seeding the original does
    original.rng = np.random.default_rng(sample_seed)
    assert samples_equal(original.sample(64), again.sample(64))
    # adding continues where it stopped: the same adds give the same storage and samples as the original
    twin = world.clone_with(loaded)
    original.rng, loaded.rng = np.random.default_rng(2), np.random.default_rng(2)  # offline HER draws goals in add
    world.run(sc["n_after"])
    twin.run(sc["n_after"])
    assert_same_arrays(snapshot(original), snapshot(loaded))
    original.rng, loaded.rng = np.random.default_rng(1), np.random.default_rng(1)
    batch = loaded.sample(128)
    twin.check(batch, sc["strategy"])  # episodes still sampled correctly after reload
    assert samples_equal(original.sample(128), batch)


@pytest.mark.parametrize("online", [True, False])
def test_copy_info_dict_fields_survive_a_reload(tmp_path, online):
    def reward(achieved_goal, desired_goal, info):
        return id_reward(achieved_goal, desired_goal) + np.asarray(info["bonus"], np.float32)

    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(100, obs_space, action_space, device="cpu", copy_info_dict=True, compute_reward=reward,
                             online_sampling=online, max_episode_length=4, seed=0)
    for t in range(10):
        o = {k: np.array([[0, t // 4, t % 4]], np.float32) for k in ("observation", "achieved_goal")}
        n = {k: np.array([[0, t // 4, t % 4 + 1]], np.float32) for k in ("observation", "achieved_goal")}
        o["desired_goal"] = n["desired_goal"] = np.array([[0, t // 4, -1]], np.float32)
        buffer.add(o, n, np.zeros((1, 3), np.float32), np.zeros(1), np.array([t % 4 == 3]),
                   [{"bonus": 0.5 * t, "name": "x"}])
    buffer.save(tmp_path / "b")
    loaded = HerReplayBuffer.load(tmp_path / "b", compute_reward=reward, device="cpu")
    assert loaded.info_keys == ["bonus"]
    assert_same_arrays(snapshot(buffer), snapshot(loaded))
    assert samples_equal(buffer.sample(200), loaded.sample(200))


def test_load_takes_the_reward_from_an_env(tmp_path):
    env = BitFlippingEnv(n_bits=4, random_goal=True)
    buffer = HerReplayBuffer(100, env.observation_space, env.action_space, env=env, device="cpu", seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(30):
        nxt, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        batched = lambda o: {k: np.asarray(v)[None] for k, v in o.items()}  # noqa: E731
        buffer.add(batched(obs), batched(nxt), np.array([[0]]), np.array([reward]),
                   terminated=np.array([terminated]), truncated=np.array([truncated]))
        obs = env.reset()[0] if terminated or truncated else nxt
    buffer.save(tmp_path / "bits")
    loaded = HerReplayBuffer.load(tmp_path / "bits", env=env, device="cpu")
    assert samples_equal(buffer.sample(100), loaded.sample(100))
    with pytest.raises(ValueError, match="compute_reward"):
        HerReplayBuffer.load(tmp_path / "bits", device="cpu")  # code is not in the file: say what to pass


@pytest.mark.parametrize("discrete", [False, True])
def test_plain_replay_buffer_round_trip(tmp_path, discrete):
    obs_space = spaces.Box(-5, 5, (4,), np.float32)
    action_space = spaces.Discrete(3) if discrete else spaces.Box(-1, 1, (2,), np.float32)
    buffer = ReplayBuffer(40, obs_space, action_space, device="cpu", n_envs=2, seed=4)
    rng = np.random.default_rng(0)
    for t in range(30):
        action = rng.integers(0, 3, size=2) if discrete else rng.uniform(-1, 1, (2, 2)).astype(np.float32)
        buffer.add(rng.normal(size=(2, 4)).astype(np.float32), rng.normal(size=(2, 4)).astype(np.float32), action,
                   rng.normal(size=2), np.array([t % 7 == 6, t % 5 == 4]), [{}, {}])
    buffer.save(tmp_path / "plain")
    loaded = ReplayBuffer.load(tmp_path / "plain", device="cpu")
    assert loaded.observation_space == obs_space and loaded.action_space == action_space
    assert_same_arrays(snapshot(buffer), snapshot(loaded))
    assert samples_equal(buffer.sample(50), loaded.sample(50))


# ---------------------------------------------------------------------------------------------------- damaged and foreign files
@pytest.fixture
def saved(tmp_path) -> Path:
    world = build(dict(n_envs=1, share=False, online=True, rows=20, lengths=[[3]], strategy="future", k=4, seed=0))
    world.run(7)
    path = tmp_path / "buffer.herl"
    world.buffer.save(path)
    return path


def load(path):
    return HerReplayBuffer.load(path, compute_reward=id_reward, device="cpu")


def test_a_truncated_file_gives_a_clear_error(saved):
    data = saved.read_bytes()
    for cut in (len(data) // 3, len(data) - 30, 10):
        saved.write_bytes(data[:cut])
        with pytest.raises(ArchiveError, match="not a herl|damaged"):
            load(saved)


def test_a_damaged_array_member_gives_a_clear_error(saved, tmp_path):
    with zipfile.ZipFile(saved) as archive:
        meta, arrays = archive.read("meta.json"), archive.read("arrays.safetensors")
    damaged = tmp_path / "damaged.herl"
    with zipfile.ZipFile(damaged, "w") as archive:
        archive.writestr("meta.json", meta)
        archive.writestr("arrays.safetensors", arrays[: len(arrays) // 2])
    with pytest.raises(ArchiveError, match="damaged"):
        load(damaged)


def test_a_random_file_gives_a_clear_error(tmp_path):
    path = tmp_path / "noise.bin"
    path.write_bytes(np.random.default_rng(0).bytes(5000))
    with pytest.raises(ArchiveError, match="not a herl"):
        load(path)
    path.write_bytes(b"")
    with pytest.raises(ArchiveError, match="not a herl"):
        load(path)


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load(tmp_path / "nothing.herl")


def test_a_zip_without_our_members_gives_a_clear_error(tmp_path):
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data", "{}")
        archive.writestr("pytorch_variables.pth", b"\x00")
    with pytest.raises(ArchiveError, match="not a herl archive"):
        load(path)


def test_a_file_of_the_wrong_kind_names_the_right_class(tmp_path, saved):
    with pytest.raises(ArchiveError, match="her_replay_buffer"):
        ReplayBuffer.load(saved, device="cpu")
    plain = ReplayBuffer(10, spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(2), device="cpu")
    plain.save(tmp_path / "plain")
    with pytest.raises(ArchiveError, match="'replay_buffer'"):
        load(tmp_path / "plain")


def test_a_foreign_json_header_is_rejected(saved, tmp_path):
    with zipfile.ZipFile(saved) as archive:
        meta, arrays = json.loads(archive.read("meta.json")), archive.read("arrays.safetensors")
    cases = {
        "format": ({**meta, "format": "sb3"}, "not a herl archive"),
        "version": ({**meta, "format_version": 99}, "upgrade herl"),
        "not a dict": ([1, 2, 3], "not a herl archive"),
    }
    for name, (header, message) in cases.items():
        path = tmp_path / f"{name}.herl"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("meta.json", json.dumps(header))
            archive.writestr("arrays.safetensors", arrays)
        with pytest.raises(ArchiveError, match=message):
            load(path)


def test_a_configuration_that_does_not_match_the_arrays_is_rejected(saved, tmp_path):
    with zipfile.ZipFile(saved) as archive:
        meta, arrays = json.loads(archive.read("meta.json")), archive.read("arrays.safetensors")
    meta["config"]["buffer_size"] = 4  # fewer rows than the file holds (files hold the rows written so far)
    path = tmp_path / "edited.herl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("meta.json", json.dumps(meta))
        archive.writestr("arrays.safetensors", arrays)
    with pytest.raises(ArchiveError, match="but its config says at most"):
        load(path)


class _Payload:
    """Unpickling this creates a marker directory: the proof that a loader ran code from the file."""

    marker = ""

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_loading_never_unpickles(tmp_path, saved):
    marker = tmp_path / "pwned"
    _Payload.marker = str(marker)
    payload = pickle.dumps(_Payload())
    with zipfile.ZipFile(saved) as archive:
        meta, arrays = archive.read("meta.json"), archive.read("arrays.safetensors")
    variants = {
        "pickled meta": {"meta.json": payload, "arrays.safetensors": arrays},
        "pickled arrays": {"meta.json": meta, "arrays.safetensors": payload},
        "both": {"meta.json": payload, "arrays.safetensors": payload},
        "sb3 members": {"data": payload, "pytorch_variables.pth": payload},
    }
    for name, members in variants.items():
        path = tmp_path / f"{name}.zip"
        with zipfile.ZipFile(path, "w") as archive:
            for member, data in members.items():
                archive.writestr(member, data)
        with pytest.raises(ArchiveError):
            load(path)
        assert not marker.exists(), f"{name}: loading ran code from the file"
    path = tmp_path / "raw.pkl"
    path.write_bytes(payload)
    with pytest.raises(ArchiveError):
        load(path)
    assert not marker.exists()


def test_saved_file_holds_json_and_safetensors_only(saved):
    with zipfile.ZipFile(saved) as archive:
        assert sorted(archive.namelist()) == ["arrays.safetensors", "meta.json"]
        header = json.loads(archive.read("meta.json"))
        arrays = archive.read("arrays.safetensors")
    assert header["format"] == "herl" and header["kind"] == "her_replay_buffer"
    assert header["config"]["goal_selection_strategy"] == "future"
    from safetensors.numpy import load as load_tensors

    tensors = load_tensors(arrays)
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in tensors.values())
