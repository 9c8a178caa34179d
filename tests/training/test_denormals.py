"""Denormal floats are flushed to zero while herl trains (herl.utils.flush_denormals): Adam's moments decay into
them, and CPUs compute with denormals at a fraction of their speed (docs/benchmarks.md, FetchPush §13)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from herl import SAC, HerReplayBuffer
from herl.envs import PointReachEnv
from herl.run.config import build_config
from herl.run.train import resume_run, start_run
from herl.training.callbacks import BaseCallback
from herl.utils import denormals_flushed, flush_denormals

SMALL = dict(learning_starts=20, batch_size=16, buffer_size=1_000, policy_kwargs=dict(net_arch=[16]), seed=0)


class Watch(BaseCallback):
    """Records whether denormals were flushed at every env step; raises at ``fail_at`` steps if given."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.seen: list[bool] = []
        self.fail_at = fail_at

    def _on_step(self) -> bool:
        self.seen.append(denormals_flushed())
        if self.fail_at is not None and len(self.seen) >= self.fail_at:
            raise RuntimeError("callback failed")
        return True


@pytest.fixture
def flush_off():
    torch.set_flush_denormal(False)
    yield
    torch.set_flush_denormal(False)


def test_the_check_tells_the_setting(flush_off) -> None:
    assert not denormals_flushed()
    assert torch.tensor([1e-30]).mul(1e-10).item() != 0.0  # a denormal, computed
    torch.set_flush_denormal(True)
    assert denormals_flushed()
    assert torch.tensor([1e-30]).mul(1e-10).item() == 0.0


def test_the_context_flushes_and_puts_the_setting_back(flush_off) -> None:
    with flush_denormals():
        assert denormals_flushed()
    assert not denormals_flushed()
    torch.set_flush_denormal(True)
    with flush_denormals():
        assert denormals_flushed()
    assert denormals_flushed()  # on before: left on


def test_learn_flushes_while_it_trains_and_puts_the_setting_back(flush_off) -> None:
    model = SAC("MultiInputPolicy", PointReachEnv(), replay_buffer_class=HerReplayBuffer, **SMALL)
    watch = Watch()
    model.learn(60, callback=watch)
    assert len(watch.seen) == 60 and all(watch.seen)
    assert not denormals_flushed()


def test_learn_puts_the_setting_back_when_it_fails(flush_off) -> None:
    model = SAC("MultiInputPolicy", PointReachEnv(), replay_buffer_class=HerReplayBuffer, **SMALL)
    with pytest.raises(RuntimeError, match="callback failed"):
        model.learn(60, callback=Watch(fail_at=30))
    assert not denormals_flushed()


def test_a_run_flushes_while_it_trains_and_puts_the_callers_setting_back(flush_off, tmp_path: Path) -> None:
    """herl train sets it before the run's torch threads start (they copy it then); the thread that started the run
    gets its own setting back when the run ends or fails (a leak once broke hypothesis's float strategies in the
    test process: they refuse to run where subnormal floats flush to zero)."""
    config = build_config(algo="sac", env="herl/PointReach-v0", seed=0, goal_env=True, preset=None,
                          layers=[("--set", {"timesteps": 100, "learning_starts": 50, "batch_size": 16,
                                             "policy.net_arch": [16], "eval.freq": 50, "eval.episodes": 1})])
    seen: list[bool] = []
    start_run(config, tmp_path / "run", progress="off", on_eval=lambda metrics: seen.append(denormals_flushed()))
    assert seen and all(seen)
    assert not denormals_flushed()

    def fail(metrics: dict[str, float]) -> None:
        raise RuntimeError("on_eval failed")

    with pytest.raises(RuntimeError, match="on_eval failed"):
        start_run(config, tmp_path / "failed", progress="off", on_eval=fail)
    assert not denormals_flushed()
    resume_run(tmp_path / "run", timesteps=150, progress="off")
    assert not denormals_flushed()
