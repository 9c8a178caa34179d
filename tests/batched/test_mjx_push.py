"""MJXPush: Push on MuJoCo MJX keeps the batched goal env interface (exact resume included), its cube moves only when
pushed, and SAC trains on it through the batched trainer and resumes bit-identically."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mujoco.mjx")

from herl.batched import check_batched_goal_env  # noqa: E402
from herl.batched.mjx_push import MJXPush  # noqa: E402
from herl.batched.registry import make_batched_env  # noqa: E402


def test_keeps_the_batched_goal_env_interface():
    check_batched_goal_env(MJXPush(n_envs=4, max_episode_steps=15), steps=40)


def test_the_cube_moves_only_when_pushed():
    env = MJXPush(n_envs=4)
    obs = env.reset(seed=3)
    start = obs["achieved_goal"].clone()
    for _ in range(10):
        step = env.step(torch.zeros(4, 2))
    assert torch.allclose(step.final_obs["achieved_goal"], start, atol=1e-3)  # settled on the table, untouched
    for _ in range(30):  # drive each pusher at its cube
        toward = step.obs["observation"][:, 7:9]
        step = env.step(toward / toward.norm(dim=1, keepdim=True) * 0.5)
    moved = (step.final_obs["achieved_goal"][:, :2] - start[:, :2]).norm(dim=1)
    assert bool((moved > 0.02).all()), moved
    assert bool((step.obs["observation"][:, :2].abs() <= 0.3 + 1e-3).all())  # the pusher stays on its table
    assert bool((step.final_obs["achieved_goal"][:, 2] > 0.0).all())  # the cube stays above the table


def test_steps_through_the_registry_with_settings_and_refuses_bad_ones():
    env = make_batched_env("herl/MJXPush-v0", 3, "cpu", max_episode_steps=7, distance_threshold=0.1)
    env.reset(seed=0)
    truncated = [env.step(torch.zeros(3, 2)).truncated for _ in range(7)]
    assert [bool(t.all()) for t in truncated] == [False] * 6 + [True]
    with pytest.raises(TypeError, match="env.max_speed"):
        make_batched_env("herl/MJXPush-v0", 3, "cpu", speed=2.0)
    with pytest.raises(ValueError, match="substeps"):
        MJXPush(n_envs=2, substeps=0)
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        MJXPush(n_envs=2, device="meta")
    with pytest.raises(ValueError, match="expected \\(3, 2\\)"):
        env.step(torch.zeros(3, 3))
