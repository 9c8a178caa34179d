"""MJXFetchPush: FetchPush with Fetch's arm on MuJoCo MJX. Compiling its step takes about a minute on a CPU, so every
test here is slow and the tests share one setting (2 envs, 4 simulation steps of 2 ms per env step)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco.mjx")
pytest.importorskip("gymnasium_robotics")

from herl.batched import MJXFetchPush, check_batched_goal_env  # noqa: E402
from herl.batched.mjx_fetch import fetch_setup  # noqa: E402
from herl.batched.registry import make_batched_env  # noqa: E402

pytestmark = pytest.mark.slow
SETTINGS = dict(n_envs=2, n_substeps=4)


def test_keeps_the_batched_goal_env_interface():
    check_batched_goal_env(MJXFetchPush(**SETTINGS, max_episode_steps=4), steps=10)


def test_steps_as_gymnasium_robotics_fetch_push_on_the_same_model():
    """The same start, the same actions: gymnasium-robotics' own FetchPush code, on the model MJX steps, gives the
    same observations and rewards. Where the gripper moves freely, every observation agrees to millimetres (MJX runs
    in float32); the fingers' velocities, which hold the fingers shut, to a few cm/s."""
    import gymnasium as gym
    import gymnasium_robotics
    import mujoco

    gym.register_envs(gymnasium_robotics)
    env = MJXFetchPush(**SETTINGS, max_episode_steps=50)
    obs = env.reset(seed=5)
    state = env.state_dict()
    reference = gym.make("FetchPush-v4").unwrapped
    reference.reset(seed=0)
    reference.model, reference.n_substeps = fetch_setup().model, 4
    reference.data = mujoco.MjData(reference.model)
    for name in ("qpos", "qvel", "mocap_pos", "mocap_quat"):
        getattr(reference.data, name)[:] = state[f"data.{name}"][0].double().numpy()
    mujoco.mj_forward(reference.model, reference.data)
    reference.goal = obs["desired_goal"][0].double().numpy()

    def close(theirs: np.ndarray, ours: torch.Tensor) -> None:
        ours = ours[0].double().numpy()
        np.testing.assert_allclose(ours[:23], theirs[:23], atol=3e-3)  # positions, angles, velocities x 8 ms
        np.testing.assert_allclose(ours[23:], theirs[23:], atol=0.05)  # the fingers' velocities x 8 ms

    close(reference._get_obs()["observation"], obs["observation"])
    generator = torch.Generator().manual_seed(0)
    for _ in range(10):  # away from the block (at x < 1.35 the block is >= 10 cm off): no contact
        action = torch.rand(2, 4, generator=generator) * 2.0 - 1.0
        action[:, 0] = 1.0
        step = env.step(action)
        theirs, reward, *_ = reference.step(action[0].numpy())
        close(theirs["observation"], step.obs["observation"])
        assert float(step.reward[0]) == reward
    gripper = step.obs["observation"][0, :3]
    assert gripper[0] > obs["observation"][0, 0] + 0.01  # it moved along +x
    np.testing.assert_allclose(step.obs["achieved_goal"][0].numpy(), obs["achieved_goal"][0].numpy(), atol=1e-4)


def test_starts_and_goals_are_drawn_as_fetch_push_draws_them():
    env = MJXFetchPush(**SETTINGS)
    env.reset(seed=0)
    centre = torch.tensor(fetch_setup().gripper_start, dtype=torch.float32)
    blocks, goals = zip(*(env._draw_starts() for _ in range(500)))
    offsets, goals = torch.cat(blocks) - centre[:2], torch.cat(goals)
    assert bool((offsets.abs() <= 0.15).all()) and bool((offsets.norm(dim=1) >= 0.1 - 1e-6).all())
    assert offsets.abs().max() > 0.14 and offsets.norm(dim=1).min() < 0.11  # the whole allowed region is reached
    assert bool(((goals[:, :2] - centre[:2]).abs() <= 0.15).all())
    assert bool((goals[:, 2] == goals[0, 2]).all())
    assert abs(float(goals[0, 2]) - fetch_setup().table_height) < 1e-6
    space = env.single_observation_space["desired_goal"]
    assert all(space.contains(goal) for goal in goals.numpy())


def test_steps_through_the_registry_and_refuses_bad_settings():
    env = make_batched_env("herl/MJXFetchPush-v0", 2, "cpu", n_substeps=4, max_episode_steps=3)
    env.reset(seed=0)
    truncated = [env.step(torch.zeros(2, 4)).truncated for _ in range(3)]
    assert [bool(t.all()) for t in truncated] == [False, False, True]
    with pytest.raises(TypeError, match="env.n_substeps"):
        make_batched_env("herl/MJXFetchPush-v0", 2, "cpu", substeps=4)
    with pytest.raises(ValueError, match="n_substeps"):
        MJXFetchPush(n_envs=2, n_substeps=0)
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        MJXFetchPush(n_envs=2, device="meta")
    with pytest.raises(ValueError, match="expected \\(2, 4\\)"):
        env.step(torch.zeros(2, 2))
