"""The example scripts run end to end on a tiny step budget."""

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("flags", [[], ["--no-prioritized"]])
def test_cpprb_bit_flipping_dqn_runs(flags, capsys):
    example = load_example("cpprb_bit_flipping_dqn")
    success = example.main(["--steps", "150", *flags])
    assert 0.0 <= success <= 1.0
    assert "success rate" in capsys.readouterr().out
