"""Fixtures the command-line tests share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five PointReach demonstrations (an expert heading for the goal), as a dataset folder."""
    pytest.importorskip("minari")
    from herl.demos import generate_expert_traj
    from herl.envs import PointReachEnv

    def expert(obs: dict[str, np.ndarray]) -> np.ndarray:
        return np.clip(10.0 * (obs["desired_goal"] - obs["achieved_goal"]), -1.0, 1.0).astype(np.float32)

    path = tmp_path_factory.mktemp("demos") / "reach"
    generate_expert_traj(expert, path, PointReachEnv(), n_episodes=5, seed=0)
    return path
