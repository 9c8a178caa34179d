"""What the command line says about a user's own env: its module, its id, its goal functions and its own errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from herl.cli import main


def herl(*args: str | os.PathLike) -> int:
    return main([str(a) for a in args])


@pytest.fixture
def env_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a module of the given name and source into a folder on sys.path."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(source)
        return name
    return write


REACH = "import gymnasium as gym\nimport numpy as np\nfrom herl.envs import PointReachEnv\n\n"

TINY_SAC = ["--timesteps", "200", "--progress", "off", "--threads", "1", "--set", "learning_starts=100",
            "--set", "eval.freq=100", "--set", "eval.episodes=2", "--set", "policy.net_arch=[8]",
            "--set", "batch_size=16"]


def test_a_reward_that_reads_info_trains_with_the_flag_check_env_names(
        env_module, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env_module("herl_msg_info", REACH + (
        "class Scaled(PointReachEnv):\n"
        "    def compute_reward(self, achieved_goal, desired_goal, info):\n"
        "        distance = np.linalg.norm(np.asarray(achieved_goal) - desired_goal, axis=-1)\n"
        "        return -(distance > self.distance_threshold * info['scale']).astype(np.float32)\n\n"
        "    def step(self, action):\n"
        "        observation, _, terminated, truncated, info = super().step(action)\n"
        "        info = {**info, 'scale': 2.0}\n"
        "        reward = float(self.compute_reward(observation['achieved_goal'], observation['desired_goal'], info))\n"
        "        return observation, reward, terminated, truncated, info\n\n"
        "gym.register('HerlMsgScaled-v0', entry_point=Scaled, max_episode_steps=20)\n"))
    env_id = "herl_msg_info:HerlMsgScaled-v0"
    assert herl("check-env", env_id) == 0
    out = capsys.readouterr().out
    assert "warning: compute_reward reads info" in out and "--set her.copy_info_dict=true" in out
    assert herl("train", "--env", env_id, "--algo", "sac", *TINY_SAC, "--run-dir", tmp_path / "run",
                "--set", "her.copy_info_dict=true") == 0
    assert (tmp_path / "run").is_dir()
    capsys.readouterr()
    # a run without the flag: its pre-flight check names it, before any run folder is made
    assert herl("train", "--env", env_id, "--algo", "sac", *TINY_SAC, "--run-dir", tmp_path / "unflagged") == 2
    assert "compute_reward reads info: " in capsys.readouterr().err and not (tmp_path / "unflagged").exists()


def test_a_compute_reward_that_is_not_vectorized_is_not_told_to_become_a_goal_env(
        env_module, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env_module("herl_msg_unvectorized", REACH + (
        "class Unvectorized(PointReachEnv):\n"
        "    def compute_reward(self, achieved_goal, desired_goal, info):\n"
        "        distance = np.linalg.norm(np.asarray(achieved_goal) - desired_goal)\n"
        "        return np.float32(0.0 if distance <= self.distance_threshold else -1.0)\n\n"
        "gym.register('HerlMsgUnvectorized-v0', entry_point=Unvectorized, max_episode_steps=20)\n"))
    assert herl("train", "--env", "herl_msg_unvectorized:HerlMsgUnvectorized-v0", *TINY_SAC,
                "--run-dir", tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "it must be vectorized over the leading axis" in err
    assert "only as a last resort train it without HER (--no-her)" in err and "make it a goal env" not in err


def line_reach(env_id: str) -> str:
    """A module with the env class LineReachEnv, which it registers as ``env_id``."""
    return REACH + f"class LineReachEnv(PointReachEnv):\n    pass\n\n" \
        f"gym.register({env_id!r}, entry_point=LineReachEnv, max_episode_steps=20)\n"


def test_a_class_name_is_answered_with_the_id_the_module_registers(
        env_module, capsys: pytest.CaptureFixture[str]) -> None:
    env_module("herl_msg_line_class", line_reach("HerlMsgLineReach-v0"))
    assert herl("check-env", "herl_msg_line_class:LineReachEnv") == 2
    err = capsys.readouterr().err
    assert "registers it as HerlMsgLineReach-v0" in err and "use --env herl_msg_line_class:HerlMsgLineReach-v0" in err
    assert "gymnasium.register(" not in err


def test_a_wrong_id_after_a_module_is_answered_with_its_ids_to_paste(
        env_module, capsys: pytest.CaptureFixture[str]) -> None:
    env_module("herl_msg_line_id", line_reach("HerlMsgLineWalk-v0"))
    assert herl("check-env", "herl_msg_line_id:HerlMsgLineWalk-v1") == 2
    err = capsys.readouterr().err
    assert "did you mean herl_msg_line_id:HerlMsgLineWalk-v0?" in err
    assert "module:Id, e.g." not in err and "herl[" not in err


def test_a_package_missing_inside_the_module_is_not_blamed_on_pythonpath(
        env_module, capsys: pytest.CaptureFixture[str]) -> None:
    env_module("herl_msg_bad_import", "import herl_msg_not_installed_pkg\n")
    assert herl("check-env", "herl_msg_bad_import:X-v0") == 2
    err = capsys.readouterr().err
    assert "'herl_msg_bad_import' (for the env id 'herl_msg_bad_import:X-v0') was found, but it imports " \
           "'herl_msg_not_installed_pkg', which is not installed: pip install" in err
    assert "PYTHONPATH" not in err
    assert herl("check-env", "herl_msg_no_such_module:X-v0") == 2  # the module itself missing: where to put it
    assert "is it on PYTHONPATH?" in capsys.readouterr().err


def test_an_env_whose_step_raises_stops_train_with_one_line_saying_where(
        env_module, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env_module("herl_msg_raising", REACH + (
        "class Raising(PointReachEnv):\n"
        "    def step(self, action):\n"
        "        raise KeyError('velocity')\n\n"
        "gym.register('HerlMsgRaising-v0', entry_point=Raising, max_episode_steps=20)\n"))
    env_id = "herl_msg_raising:HerlMsgRaising-v0"
    assert herl("train", "--env", env_id, *TINY_SAC, "--run-dir", tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert f"{env_id}'s own code raised KeyError: 'velocity' ({tmp_path / 'herl_msg_raising.py'}, line 7, in step)" \
        in err
    assert f"`herl check-env {env_id}` shows the traceback" in err and "Traceback" not in err


def test_a_module_that_fails_to_import_or_an_env_that_cannot_be_made_says_where(
        env_module, capsys: pytest.CaptureFixture[str]) -> None:
    env_module("herl_msg_syntax", "import gymnasium as gym\ndef broken(:\n    pass\n")
    assert herl("train", "--env", "herl_msg_syntax:X-v0", *TINY_SAC) == 2
    err = capsys.readouterr().err
    assert "importing 'herl_msg_syntax' for the env id 'herl_msg_syntax:X-v0' raised SyntaxError" in err
    assert "herl_msg_syntax.py, line 2)" in err and "Traceback" not in err
    env_module("herl_msg_constructor", REACH + (
        "class NoConfig(PointReachEnv):\n"
        "    def __init__(self):\n"
        "        raise RuntimeError('no config file')\n\n"
        "gym.register('HerlMsgNoConfig-v0', entry_point=NoConfig, max_episode_steps=20)\n"))
    assert herl("check-env", "herl_msg_constructor:HerlMsgNoConfig-v0") == 2
    err = capsys.readouterr().err
    assert "herl_msg_constructor:HerlMsgNoConfig-v0 could not be made: RuntimeError: no config file (" in err
    assert "herl_msg_constructor.py, line 7, in __init__)" in err and "Traceback" not in err


def test_an_env_that_raises_later_in_training_keeps_its_traceback_and_says_where_the_run_continues(
        env_module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the pre-flight check, an env's own error is the env author's to read (its traceback stays); under it the
    note names the step and the checkpoint `--resume` continues from once the env is fixed."""
    env_module("herl_msg_later", REACH + (
        "import os\n\n"
        "class Flaky(PointReachEnv):\n"
        "    steps = 0\n\n"
        "    def step(self, action):\n"
        "        self.steps += 1\n"
        "        if self.steps == 150 and os.environ.get('HERL_TEST_FLAKY'):\n"
        "            raise RuntimeError('sensor lost')\n"
        "        return super().step(action)\n\n"
        "gym.register('HerlMsgFlaky-v0', entry_point=Flaky, max_episode_steps=20)\n"))
    monkeypatch.setenv("HERL_TEST_FLAKY", "1")
    run = tmp_path / "run"
    args = ["train", "--env", "herl_msg_later:HerlMsgFlaky-v0", "--algo", "sac", *TINY_SAC, "--set", "eval.freq=0",
            "--set", "checkpoint.freq=100", "--run-dir", run]
    with pytest.raises(RuntimeError, match="sensor lost") as raised:
        herl(*args)
    checkpoint = run / "seed_0" / "checkpoints" / "step_000000000100"
    assert raised.value.__notes__ == [
        f"herl train: the run stopped at step 149 on this error. The run's last checkpoint, {checkpoint} (step 100), "
        f"was taken before this: once the cause is fixed, `herl train --resume {run / 'seed_0'}` continues from it."]
    monkeypatch.delenv("HERL_TEST_FLAKY")
    assert herl("train", "--resume", run / "seed_0") == 0
    assert (run / "seed_0" / "model.zip").is_file()


def test_an_action_space_no_algorithm_takes_fails_check_env_and_train_names_the_fix(
        env_module, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """check-env said 'can be trained with HER', then herl train refused with another algorithm's complaint."""
    env_module("herl_msg_multi", (
        "import gymnasium as gym\nimport numpy as np\nfrom herl.envs import BitFlippingEnv\n\n"
        "class MultiBits(BitFlippingEnv):\n"
        "    def __init__(self):\n"
        "        super().__init__(n_bits=3, max_steps=3)\n"
        "        self.action_space = gym.spaces.MultiBinary(3)\n\n"
        "    def step(self, action):\n"
        "        return super().step(int(np.flatnonzero(action)[0]) if np.any(action) else 0)\n\n"
        "gym.register('HerlMsgMulti-v0', entry_point=MultiBits)\n"))
    fix = ("no herl algorithm takes MultiBinary(3) actions: give the env a Discrete(8) action space (one action per "
           "combination) for DQN, or a Box one for SAC, TD3, DDPG, TQC or CrossQ")
    assert herl("check-env", "herl_msg_multi:HerlMsgMulti-v0") == 1
    assert f"FAIL: HER could relabel it, but {fix}" in capsys.readouterr().out
    assert herl("train", "--env", "herl_msg_multi:HerlMsgMulti-v0", *TINY_SAC, "--run-dir", tmp_path / "run") == 2
    assert f"herl train: error: herl_msg_multi:HerlMsgMulti-v0: {fix}" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_nested_dict_observation_is_named_without_suggesting_no_her(
        env_module, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env_module("herl_msg_nested", REACH + (
        "class Nested(PointReachEnv):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        inner = gym.spaces.Dict({'t': gym.spaces.Box(0.0, 1.0, (1,), np.float32)})\n"
        "        self.observation_space = gym.spaces.Dict({**self.observation_space.spaces, 'extra': inner})\n\n"
        "    def _get_obs(self):\n"
        "        return {**super()._get_obs(), 'extra': {'t': np.zeros(1, np.float32)}}\n\n"
        "gym.register('HerlMsgNested-v0', entry_point=Nested, max_episode_steps=20)\n"))
    assert herl("train", "--env", "herl_msg_nested:HerlMsgNested-v0", *TINY_SAC, "--run-dir", tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "observation_space's entry 'extra' is a Dict space" in err and "--no-her" not in err
