"""Demonstrations: Minari round trip, bad datasets, scripted experts, behaviour cloning, herl record."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import herl
from herl.cli import main
from herl.demos import DatasetError, Demonstrations, generate_expert_traj, load_minari, pretrain
from herl.demos.dataset import from_episodes
from herl.envs import BitFlippingEnv, PointReachEnv

pytest.importorskip("minari")
pytest.importorskip("h5py")


def reach_expert(obs):
    """PointReach: head for the goal at full speed."""
    return np.clip(10.0 * (obs["desired_goal"] - obs["achieved_goal"]), -1.0, 1.0).astype(np.float32)


def flip_expert(obs):
    """Bit flipping: flip the first bit that differs from the goal."""
    return int(np.argmax(obs["observation"] != obs["desired_goal"]))


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory):
    path = tmp_path_factory.mktemp("demos") / "reach"
    return generate_expert_traj(reach_expert, path, PointReachEnv(), n_episodes=6, seed=3), path


def test_minari_round_trip_keeps_goal_keys(reach_demos):
    demos, path = reach_demos
    back = load_minari(path)
    assert back.n_episodes == 6 and len(back) == len(demos)
    assert set(back.observations) == {"observation", "achieved_goal", "desired_goal"}
    for key in demos.observations:
        np.testing.assert_array_equal(back.observations[key], demos.observations[key])
        np.testing.assert_array_equal(back.next_observations[key], demos.next_observations[key])
    np.testing.assert_array_equal(back.actions, demos.actions)
    np.testing.assert_array_equal(back.episode_starts, demos.episode_starts)
    np.testing.assert_array_equal(back.successes, demos.successes)
    assert back.observation_space == PointReachEnv().observation_space
    import minari

    assert minari.MinariDataset(path / "data").total_episodes == 6  # Minari itself reads it


def test_a_relative_dataset_folder_is_written_and_read(tmp_path, monkeypatch):
    # `herl record -o demos/` is the documented use: Minari once looked for demos/data/demos/data/main_data.hdf5
    monkeypatch.chdir(tmp_path)
    demos = generate_expert_traj(reach_expert, "demos/reach", PointReachEnv(), n_episodes=2, seed=0)
    assert load_minari("demos/reach").n_episodes == 2 == demos.n_episodes


def test_next_observation_is_the_following_observation(reach_demos):
    demos, _ = reach_demos
    starts = set(demos.episode_starts.tolist())
    for i in range(len(demos) - 1):
        if i + 1 not in starts:
            np.testing.assert_array_equal(demos.next_observations["observation"][i], demos.observations["observation"][i + 1])


def test_differing_spaces_name_the_key_and_shapes(reach_demos):
    demos, _ = reach_demos
    model = herl.TD3("MultiInputPolicy", PointReachEnv(dim=3), policy_kwargs=dict(net_arch=[8]))
    with pytest.raises(DatasetError, match=r"'achieved_goal' differs.*\(2,\).*\(3,\)"):
        model.pretrain(demos, n_epochs=1)


def test_demos_without_goal_keys_are_refused(reach_demos):
    demos, _ = reach_demos
    flat = Demonstrations(observations=demos.observations["observation"], next_observations=demos.observations["observation"],
                          actions=demos.actions, rewards=demos.rewards, terminations=demos.terminations,
                          truncations=demos.truncations, episode_starts=demos.episode_starts,
                          observation_space=PointReachEnv().observation_space["observation"],
                          action_space=demos.action_space)
    with pytest.raises(DatasetError, match="record the demonstrations on this env"):
        flat.check_spaces(PointReachEnv().observation_space, demos.action_space)
    partial = PointReachEnv().observation_space
    import gymnasium as gym

    no_goal = gym.spaces.Dict({"observation": partial["observation"]})
    with pytest.raises(DatasetError, match=r"lack the key\(s\) \['achieved_goal', 'desired_goal'\].*goal keys"):
        Demonstrations(**{**flat.__dict__, "observation_space": no_goal}).check_spaces(partial, demos.action_space)


def test_empty_truncated_and_spaceless_datasets(reach_demos, tmp_path):
    demos, path = reach_demos
    env = PointReachEnv()
    with pytest.raises(DatasetError, match="no episodes"):
        from_episodes([], env.observation_space, env.action_space)
    with pytest.raises(DatasetError, match="not a Minari dataset"):
        load_minari(tmp_path)
    with pytest.raises(DatasetError, match="no dataset at"):
        load_minari(tmp_path / "missing")
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(path, damaged)
    data = damaged / "data" / "main_data.hdf5"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with pytest.raises(DatasetError, match="truncated or damaged"):
        load_minari(damaged)
    spaceless = tmp_path / "spaceless"
    shutil.copytree(path, spaceless)
    meta_path = spaceless / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    del meta["observation_space"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="would run code"):
        load_minari(spaceless)


def test_pretrain_clones_a_continuous_expert(reach_demos):
    demos, path = reach_demos
    model = herl.SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[64, 64]), seed=0)
    losses = pretrain(model, path, n_epochs=30, learning_rate=3e-3)
    assert losses[-1] < 0.2 * losses[0]
    predicted, _ = model.predict(demos.observations, deterministic=True)
    assert np.abs(predicted - demos.actions).mean() < 0.15


def test_pretrain_dqn_with_cross_entropy():
    env = BitFlippingEnv(n_bits=4)
    demos = generate_expert_traj(flip_expert, env, n_episodes=40, seed=0)  # the (expert, env) order works too
    model = herl.DQN("MultiInputPolicy", env, seed=0)
    losses = pretrain(model, demos, n_epochs=60, learning_rate=3e-3)
    assert losses[-1] < 0.5 * losses[0]
    predicted, _ = model.predict(demos.observations, deterministic=True)
    assert (predicted == demos.actions.reshape(-1)).mean() > 0.9
    assert torch.equal(model.q_net_target.layers[0].weight, model.q_net.layers[0].weight)


def test_scripted_fetch_experts_succeed():
    gym = pytest.importorskip("gymnasium")
    gymnasium_robotics = pytest.importorskip("gymnasium_robotics")
    gym.register_envs(gymnasium_robotics)
    from herl.demos.experts import run_expert, scripted_expert

    for env_id in ("FetchReach-v4", "FetchPickAndPlace-v4"):
        env = gym.make(env_id)
        assert run_expert(scripted_expert(env_id), env, n_episodes=3, seed=0) >= 2 / 3, env_id
    with pytest.raises(ValueError, match="no scripted expert"):
        scripted_expert("FetchSlide-v4")


def test_herl_record_command(tmp_path, capsys):
    model = herl.TD3("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[8]), seed=0)
    model.save(tmp_path / "model.zip")
    out = tmp_path / "demos"
    assert main(["record", "--env", "herl/PointReach-v0", "--policy", str(tmp_path / "model.zip"),
                 "--episodes", "2", "-o", str(out)]) == 0
    assert "wrote 2 episodes" in capsys.readouterr().out
    assert load_minari(out).n_episodes == 2
    assert main(["record", "--env", "herl/PointReach-v0", "--episodes", "2", "-o", str(out)]) == 2
    assert "already holds a dataset" in capsys.readouterr().err
    assert main(["record", "--env", "herl/PointReach-v0", "--episodes", "2", "-o", str(tmp_path / "x")]) == 2
    assert "no scripted expert" in capsys.readouterr().err


def test_a_dataset_write_that_fails_midway_leaves_no_dataset_and_no_temporary_folder(reach_demos, tmp_path,
                                                                                      monkeypatch):
    from minari.dataset._storages.hdf5_storage import HDF5Storage

    from herl.demos.dataset import save_minari

    demos, _ = reach_demos
    real = HDF5Storage.update_episodes

    def full_disk(self, episodes):  # some episodes reach the disk, then it is full
        real(self, episodes[:2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(HDF5Storage, "update_episodes", full_disk)
    out = tmp_path / "demos"
    with pytest.raises(OSError, match="No space left on device"):
        save_minari(demos, out)
    assert list(out.iterdir()) == []  # no half-written dataset that would load, no temporary folder
    monkeypatch.undo()
    (out / "data").mkdir()
    (out / "data" / "notes.txt").write_text("mine")
    with pytest.raises(DatasetError, match="exists and is not a dataset .*does not overwrite it"):
        save_minari(demos, out)
    assert (out / "data" / "notes.txt").read_text() == "mine"
    (out / "data" / "notes.txt").unlink()  # an empty data folder is taken
    save_minari(demos, out)
    assert load_minari(out).n_episodes == demos.n_episodes
    assert [p.name for p in out.iterdir()] == ["data"]


class RegisteredByClass(PointReachEnv):
    """A user's env registered with the class itself as its entry point, as the guide shows."""


def test_an_env_registered_with_a_class_is_recorded_with_its_entry_point_by_name(tmp_path):
    # Minari writes the env's spec as JSON, which a class entry point is not: herl record failed in gymnasium's to_json
    import gymnasium as gym
    from minari.dataset.minari_storage import MinariStorage

    gym.register("herl-test/RegisteredByClass-v0", entry_point=RegisteredByClass, max_episode_steps=20)
    try:
        env = gym.make("herl-test/RegisteredByClass-v0")
        generate_expert_traj(reach_expert, tmp_path / "by_class", env, n_episodes=2, seed=0)
        spec = json.loads(MinariStorage.read(tmp_path / "by_class" / "data").metadata["env_spec"])
        assert spec["entry_point"] == f"{__name__}:RegisteredByClass" and spec["max_episode_steps"] == 20
        assert load_minari(tmp_path / "by_class").n_episodes == 2

        class InAFunction(PointReachEnv):  # not importable by name: the spec is left out, with a warning
            pass

        gym.register("herl-test/InAFunction-v0", entry_point=InAFunction, max_episode_steps=20)
        with pytest.warns(UserWarning, match="without its env's spec"):
            generate_expert_traj(reach_expert, tmp_path / "local", gym.make("herl-test/InAFunction-v0"), n_episodes=2,
                                 seed=0)
        assert load_minari(tmp_path / "local").n_episodes == 2
    finally:
        for env_id in ("herl-test/RegisteredByClass-v0", "herl-test/InAFunction-v0"):
            gym.envs.registry.pop(env_id, None)
