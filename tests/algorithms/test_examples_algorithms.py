"""The algorithm examples run end to end on a tiny budget."""

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_main(name):
    return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=name)["main"]


@pytest.mark.parametrize("algo", ["DDPG", "TD3", "SAC"])
def test_continuous_bit_flipping_example(algo, capsys):
    success = example_main("her_continuous_bit_flipping")(["--algo", algo, "--n-bits", "3", "--steps", "300"])
    assert 0.0 <= success <= 1.0
    assert "success rate" in capsys.readouterr().out


def test_fetch_reach_example_on_point_reach(capsys):
    # FetchReach needs mujoco; herl's PointReach has the same goal-env interface and no dependency
    success = example_main("sac_her_fetch_reach")(["--env", "herl/PointReach-v0", "--steps", "500"])
    assert 0.0 <= success <= 1.0
