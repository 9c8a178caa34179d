"""The examples that go with the command line run end to end on a tiny budget."""

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_main(name):
    return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=name)["main"]


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("bit_flipping_dqn_her", ["--n-bits", "4", "--steps", "200"]),
        ("point_reach_sac_her", ["--steps", "200"]),
        ("custom_goal_env", ["--size", "3", "--steps", "300"]),
    ],
)
def test_example_runs(name, args, capsys):
    success = example_main(name)(args)
    assert 0.0 <= success <= 1.0
    assert "success rate" in capsys.readouterr().out


def test_custom_env_trains_from_the_command_line(tmp_path):
    """``module:EnvId`` imports the example's module, which registers the env, in every process."""
    command = [sys.executable, "-m", "herl", "train", "--algo", "dqn", "--env", "custom_goal_env:GridReach-v0",
               "--set", "env.size=3", "--timesteps", "150", "--set", "learning_starts=50", "--set", "eval.freq=0",
               "--progress", "off", "--run-dir", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(EXAMPLES)})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "seed_0" / "model.zip").exists()

