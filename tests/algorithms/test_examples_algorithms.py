"""The algorithm examples run end to end on a tiny budget."""

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("algo", ["DDPG", "TD3", "SAC"])
def test_continuous_bit_flipping_example(algo, capsys):
    success = load_example("her_continuous_bit_flipping").main(["--algo", algo, "--n-bits", "3", "--steps", "300"])
    assert 0.0 <= success <= 1.0
    assert "success rate" in capsys.readouterr().out


def test_fetch_reach_example_on_point_reach(capsys):
    # FetchReach needs mujoco; herl's PointReach has the same goal-env interface and no dependency
    success = load_example("sac_her_fetch_reach").main(["--env", "herl/PointReach-v0", "--steps", "500"])
    assert 0.0 <= success <= 1.0
