"""Demonstrations recorded through the env a run trains on: ``herl record`` builds it as ``herl train`` does (the
preset's action repeat and time feature, then --set), the dataset's metadata names those wrappers (``herl_env``), and
``herl train --demos`` refuses a dataset recorded through others, saying how to fix it either way. A dataset that does
not name them (another tool's) still loads, with the likely causes named when its spaces differ."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from herl.cli import main
from herl.demos import DatasetError, generate_expert_traj, load_minari
from herl.run.envs import make_env

pytest.importorskip("minari")
pytest.importorskip("h5py")

# A run that only shows it starts and learns from the demonstrations: a few updates of tiny networks.
TINY = ["--progress", "off", "--threads", "1", "--set", "learning_starts=10", "--set", "batch_size=16",
        "--set", "policy.net_arch=[16,16]", "--set", "eval.freq=0", "--set", "checkpoint.freq=0",
        "--set", "log_interval=1"]


def herl(*args: str | os.PathLike) -> int:
    return main([str(a) for a in args])


def reach_expert(obs: dict[str, np.ndarray]) -> np.ndarray:
    return np.clip(10.0 * (obs["desired_goal"] - obs["achieved_goal"]), -1.0, 1.0).astype(np.float32)


def metadata(path: Path) -> dict:
    return json.loads((path / "data" / "metadata.json").read_text())


# ---------------------------------------------------------------------------------------------------------------------
# The documented flow, on FetchPickAndPlace (MuJoCo)


@pytest.fixture(scope="module")
def pick_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`herl record --env FetchPickAndPlace-v4 --policy scripted` as docs/demonstrations.md says, 2 episodes."""
    pytest.importorskip("gymnasium_robotics")
    path = tmp_path_factory.mktemp("demos") / "pick"
    assert herl("record", "--env", "FetchPickAndPlace-v4", "--policy", "scripted", "--episodes", "2", "-o", path) == 0
    return path


def test_the_documented_record_then_train_flow_works(pick_demos: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The fetch_pick_and_place preset's TQC runs with action repeat 3 and a time feature: herl record records
    through them, names them in the metadata, and herl train --demos takes the dataset."""
    assert metadata(pick_demos)["herl_env"] == {"action_repeat": 3, "time_feature": True}
    demos = load_minari(pick_demos)
    assert demos.env_settings == {"action_repeat": 3, "time_feature": True}
    assert demos.observation_space["observation"].shape == (26,)  # the time feature
    assert len(demos) == 2 * 17  # 17 decisions of 3 env steps make Fetch's 50
    assert herl("train", "--env", "FetchPickAndPlace-v4", "--demos", pick_demos, "--timesteps", "30",
                "--run-dir", tmp_path, *TINY) == 0
    config = json.loads((tmp_path / "seed_0" / "config.json").read_text())
    assert config["demos"]["path"] == str(pick_demos.resolve())
    assert config["env_kwargs"]["action_repeat"] == 3 and config["env_kwargs"]["time_feature"] is True
    assert not any("demonstrations" in note for note in config["notes"])


@pytest.mark.parametrize(("setting", "recorded", "fix"), [
    ("env.time_feature=false", "env.time_feature=true", "--set env.time_feature=true"),
    ("env.action_repeat=2", "env.action_repeat=3", "--set env.action_repeat=3"),
])
def test_a_dataset_recorded_through_other_wrappers_is_refused_with_both_fixes(
        pick_demos: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, recorded: str,
        fix: str) -> None:
    assert herl("train", "--env", "FetchPickAndPlace-v4", "--demos", pick_demos, "--timesteps", "30",
                "--run-dir", tmp_path / "run", *TINY, "--set", setting) == 2
    err = capsys.readouterr().err
    assert f"recorded through {recorded}, but this run's env has {setting}" in err
    assert "preset fetch_pick_and_place" in err
    key, _, value = setting.partition("=")
    assert f"herl record --env FetchPickAndPlace-v4 " in err and f"--set {setting}" in err  # record again ...
    assert f"or train on the env they were recorded in with {fix}" in err  # ... or train on theirs
    assert not (tmp_path / "run").exists()  # refused before any run folder


# ---------------------------------------------------------------------------------------------------------------------
# The metadata, and datasets without it (PointReach: no MuJoCo)


def test_recording_through_herl_wrappers_names_them_in_the_metadata(tmp_path: Path) -> None:
    env = make_env("herl/PointReach-v0", {"action_repeat": 2, "time_feature": True})
    demos = generate_expert_traj(reach_expert, tmp_path / "wrapped", env, n_episodes=2, seed=0)
    assert demos.env_settings == {"action_repeat": 2, "time_feature": True}
    assert metadata(tmp_path / "wrapped")["herl_env"] == {"action_repeat": 2, "time_feature": True}
    assert load_minari(tmp_path / "wrapped").env_settings == demos.env_settings
    plain = generate_expert_traj(reach_expert, tmp_path / "plain", make_env("herl/PointReach-v0"), n_episodes=1)
    assert load_minari(tmp_path / "plain").env_settings == plain.env_settings == {"action_repeat": 1,
                                                                                  "time_feature": False}


def test_a_models_demonstrations_are_recorded_through_its_runs_env(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A model trained with a time feature records through one: herl record names the run's settings when the env
    it was asked for differs, and the dataset then trains a run with the same settings."""
    assert herl("train", "--algo", "sac", "--env", "herl/PointReach-v0", "--timesteps", "20", "--run-dir",
                tmp_path / "run", *TINY, "--set", "env.time_feature=true") == 0
    record = ["record", "--env", "herl/PointReach-v0", "--policy", tmp_path / "run" / "seed_0", "--episodes", "1"]
    assert herl(*record, "-o", tmp_path / "demos") == 2
    err = capsys.readouterr().err
    assert "'observation': (5,)" in err and "'observation': (4,)" in err
    assert "its run's: env herl/PointReach-v0, env.time_feature=true" in err
    assert herl(*record, "-o", tmp_path / "demos", "--set", "env.time_feature=true") == 0
    assert "recorded through env.action_repeat=1, env.time_feature=true" in capsys.readouterr().out
    assert load_minari(tmp_path / "demos").env_settings == {"action_repeat": 1, "time_feature": True}


@pytest.fixture
def foreign_demos(tmp_path: Path) -> Path:
    """PointReach demonstrations at every env step, whose metadata names no wrappers (as another tool's)."""
    path = tmp_path / "foreign"
    generate_expert_traj(reach_expert, path, make_env("herl/PointReach-v0"), n_episodes=3, seed=0)
    meta_path = path / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    del meta["herl_env"]
    meta_path.write_text(json.dumps(meta))
    assert load_minari(path).env_settings is None
    return path


def test_a_dataset_without_the_metadata_names_the_likely_causes(foreign_demos: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    args = ["train", "--algo", "sac", "--env", "herl/PointReach-v0", "--demos", foreign_demos, "--timesteps", "30",
            *TINY]
    assert herl(*args, "--run-dir", tmp_path / "tf", "--set", "env.time_feature=true") == 2
    err = capsys.readouterr().err
    assert "observation key 'observation' differs: the dataset's is Box of shape (4,) (float32), the env's Box of " \
           "shape (5,) (float32)" in err
    assert "the dataset does not say which env wrappers it was recorded through" in err
    assert "a time feature (one more entry in 'observation') or an action repeat on one side only" in err
    assert "--set env.time_feature=false" in err and "herl record --env herl/PointReach-v0" in err
    # Spaces that agree train as before; an action repeat, which no space shows, is noted.
    assert herl(*args, "--run-dir", tmp_path / "repeat", "--set", "env.action_repeat=2") == 0
    notes = json.loads((tmp_path / "repeat" / "seed_0" / "config.json").read_text())["notes"]
    assert any("do not say which env wrappers they were recorded through" in n and "env.action_repeat=2" in n
               and "--set env.action_repeat=1" in n for n in notes), notes
    assert herl(*args, "--run-dir", tmp_path / "plain") == 0


def test_the_space_check_of_the_python_api_names_the_time_feature(foreign_demos: Path) -> None:
    from herl import SAC

    model = SAC("MultiInputPolicy", make_env("herl/PointReach-v0", {"time_feature": True}),
                policy_kwargs=dict(net_arch=[8]))
    with pytest.raises(DatasetError, match=r"'observation' differs.*\(4,\).*\(5,\).*TimeFeature"):
        model.pretrain(foreign_demos, n_epochs=1)


@pytest.mark.parametrize("entry", [[3], {"action_repeat": 0, "time_feature": False}, {"action_repeat": 2},
                                   {"action_repeat": 2, "time_feature": "yes"}])
def test_a_malformed_herl_env_entry_is_named(foreign_demos: Path, entry: object) -> None:
    meta_path = foreign_demos / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "herl_env": entry}))
    with pytest.raises(DatasetError, match="herl_env is .*the dataset is damaged"):
        load_minari(foreign_demos)
