"""MJXPush: Push on MuJoCo MJX keeps the batched goal env interface (exact resume included), its cube moves only when
pushed, and SAC trains on it through the batched trainer and resumes bit-identically."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mujoco.mjx")

import herl  # noqa: E402
from herl.batched import BatchedTrainer, check_batched_goal_env  # noqa: E402
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


@pytest.mark.slow
def test_sac_trains_and_resumes_bit_identically(tmp_path):
    def build(env):
        model = herl.SAC("MultiInputPolicy", observation_space=env.single_observation_space,
                         action_space=env.single_action_space, policy_kwargs=dict(net_arch=[32, 32]), batch_size=32,
                         learning_starts=64, buffer_size=5_000, seed=0, device="cpu")
        return BatchedTrainer(model, env, updates_per_step=1 / 4)

    straight = build(MJXPush(n_envs=8, max_episode_steps=10))
    straight.learn(320)
    first = build(MJXPush(n_envs=8, max_episode_steps=10))
    first.learn(160)
    first.save(tmp_path / "run")
    resumed = BatchedTrainer.load(tmp_path / "run", MJXPush(n_envs=8, max_episode_steps=10))
    resumed.learn(320)
    assert resumed.model.num_timesteps == straight.model.num_timesteps == 320
    for name, net in straight.model.nets.items():
        theirs = resumed.model.nets[name].state_dict()
        for key, value in net.state_dict().items():
            assert torch.equal(value, theirs[key]), f"{name}.{key}"
    assert straight.model._n_updates == resumed.model._n_updates > 0
    for key, value in straight.obs.items():
        assert torch.equal(value, resumed.obs[key])


@pytest.mark.slow
def test_herl_train_runs_it_with_its_preset(tmp_path):
    import json

    from herl.cli import main

    args = ["train", "--env", "herl/MJXPush-v0", "--n-envs", "8", "--timesteps", "800", "--progress", "off",
            "--set", "learning_starts=200", "--set", "batch_size=32", "--set", "policy.net_arch=[16,16]",
            "--set", "eval.freq=400", "--set", "eval.episodes=4", "--set", "env.max_episode_steps=20",
            "--run-dir", str(tmp_path / "run")]
    assert main(args) == 0
    config = json.loads((tmp_path / "run" / "seed_0" / "config.json").read_text())
    assert config["preset"] == "mjx_push" and config["batched"]["updates_per_step"] == 0.125
    assert (tmp_path / "run" / "seed_0" / "model.zip").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_keeps_the_interface_on_cuda_with_every_tensor_there():
    env = MJXPush(n_envs=8, max_episode_steps=12, device="cuda")
    check_batched_goal_env(env, steps=30)
    obs = env.reset(seed=1)
    step = env.step(torch.zeros(8, 2, device="cuda"))
    for tensor in (*obs.values(), *step.final_obs.values(), step.reward, step.truncated):
        assert tensor.device.type == "cuda"


@pytest.mark.parametrize("user_flags, expected", [
    (None, "--xla_gpu_enable_command_buffer="),
    ("--xla_dump_to=/tmp/x", "--xla_dump_to=/tmp/x --xla_gpu_enable_command_buffer="),
    ("--xla_gpu_enable_command_buffer=FUSION", "--xla_gpu_enable_command_buffer=FUSION"),
])
def test_jax_imported_by_herl_replays_no_cuda_command_buffers(user_flags, expected):
    """With them, MJX's compiled step fails on a GPU once its inputs are PyTorch's memory; a user's own choice of the
    flag is kept, and their other flags too."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if user_flags is not None:
        env["XLA_FLAGS"] = user_flags
    code = ("import os, sys; from herl.batched.mjx_push import import_mjx; assert 'jax' not in sys.modules; "
            "import_mjx(); print(os.environ['XLA_FLAGS'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == expected
