"""What herl's two MJX envs share: training resumes bit-identically, `herl train` runs each with its preset, every
tensor stays on CUDA, and the settings herl gives JAX when it imports it. The MJXFetchPush cases compile its step for
about a minute on a CPU; they use the setting of test_mjx_fetch.py (2 envs, 4 simulation steps), compiled once."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

import pytest
import torch

pytest.importorskip("mujoco.mjx")

import herl  # noqa: E402
from herl.batched import BatchedTrainer, check_batched_goal_env  # noqa: E402
from herl.batched.registry import make_batched_env  # noqa: E402


@dataclass(frozen=True)
class Case:
    env_id: str
    preset: str
    preset_updates_per_step: float
    settings: dict = field(default_factory=dict)
    """Env settings that keep a CPU test short."""

    def make(self, n_envs: int, device: str = "cpu", **settings) -> herl.batched.BatchedGoalEnv:
        return make_batched_env(self.env_id, n_envs, device, **{**self.settings, **settings})


PUSH = Case("herl/MJXPush-v0", "mjx_push", 0.125)
FETCH = Case("herl/MJXFetchPush-v0", "mjx_fetch_push", 0.0625, {"n_substeps": 4})
CASES = [pytest.param(PUSH, id="MJXPush"),
         pytest.param(FETCH, id="MJXFetchPush", marks=pytest.mark.skipif(
             importlib.util.find_spec("gymnasium_robotics") is None, reason="needs gymnasium-robotics"))]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_training_resumes_bit_identically(case: Case, tmp_path):
    n_envs = 8 if case is PUSH else 2

    def build(env):
        model = herl.TQC("MultiInputPolicy", observation_space=env.single_observation_space,
                         action_space=env.single_action_space, policy_kwargs=dict(net_arch=[16, 16]), batch_size=16,
                         learning_starts=8 * n_envs, buffer_size=2_000, seed=0, device="cpu")
        return BatchedTrainer(model, env, updates_per_step=1 / 2)

    steps = 12 * n_envs
    straight = build(case.make(n_envs, max_episode_steps=5))
    straight.learn(steps)
    first = build(case.make(n_envs, max_episode_steps=5))
    first.learn(steps // 2)
    first.save(tmp_path / "run")
    resumed = BatchedTrainer.load(tmp_path / "run", case.make(n_envs, max_episode_steps=5))
    resumed.learn(steps)
    assert resumed.model.num_timesteps == straight.model.num_timesteps == steps
    for name, net in straight.model.nets.items():
        theirs = resumed.model.nets[name].state_dict()
        for key, value in net.state_dict().items():
            assert torch.equal(value, theirs[key]), f"{name}.{key}"
    assert straight.model._n_updates == resumed.model._n_updates > 0
    for key, value in straight.obs.items():
        assert torch.equal(value, resumed.obs[key])


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_herl_train_runs_it_with_its_preset(case: Case, tmp_path):
    from herl.cli import main

    n_envs = 8 if case is PUSH else 2
    settings = [f"--set=env.{name}={value}" for name, value in case.settings.items()]
    args = ["train", "--env", case.env_id, "--n-envs", str(n_envs), "--timesteps", str(8 * n_envs),
            "--progress", "off", "--set", f"learning_starts={4 * n_envs}", "--set", "batch_size=8",
            "--set", "policy.net_arch=[16,16]", "--set", f"eval.freq={4 * n_envs}", "--set", f"eval.episodes={n_envs}",
            "--set", "env.max_episode_steps=4", *settings, "--run-dir", str(tmp_path / "run")]
    assert main(args) == 0
    config = json.loads((tmp_path / "run" / "seed_0" / "config.json").read_text())
    assert config["preset"] == case.preset
    assert config["batched"]["updates_per_step"] == case.preset_updates_per_step
    assert (tmp_path / "run" / "seed_0" / "model.zip").exists()
    if case is FETCH:  # the model acts in gymnasium-robotics' FetchPush-v4 as it is (its gymnasium twin)
        assert main(["eval", str(tmp_path / "run"), "--env", "FetchPush-v4", "--episodes", "2"]) == 0
        assert main(["eval", str(tmp_path / "run"), "--video", str(tmp_path / "x.mp4")]) == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", CASES)
def test_keeps_the_interface_on_cuda_with_every_tensor_there(case: Case):
    env = case.make(8, "cuda", max_episode_steps=6)
    check_batched_goal_env(env, steps=14)
    obs = env.reset(seed=1)
    step = env.step(torch.zeros(8, *env.single_action_space.shape, device="cuda"))
    for tensor in (*obs.values(), *step.final_obs.values(), step.reward, step.truncated):
        assert tensor.device.type == "cuda"


@pytest.mark.parametrize("user_flags, expected", [
    (None, "--xla_gpu_enable_command_buffer="),
    ("--xla_dump_to=/tmp/x", "--xla_dump_to=/tmp/x --xla_gpu_enable_command_buffer="),
    ("--xla_gpu_enable_command_buffer=FUSION", "--xla_gpu_enable_command_buffer=FUSION"),
])
@pytest.mark.parametrize("before", ["", "from mujoco import mjx; assert 'jax' in sys.modules; "])
def test_jax_imported_by_herl_replays_no_cuda_command_buffers(user_flags, expected, before):
    """With them, MJX's compiled step fails on a GPU once its inputs are PyTorch's memory; a user's own choice of the
    flag is kept, and their other flags too. JAX imported first (as ``pytest.importorskip("mujoco.mjx")`` does) still
    takes the flag: it reads it when it first computes."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if user_flags is not None:
        env["XLA_FLAGS"] = user_flags
    code = (f"import os, sys; {before}from herl.batched.mjx import import_mjx; "
            "import_mjx(); print(os.environ['XLA_FLAGS'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == expected


def test_jax_that_has_computed_is_left_as_it_is():
    """Once JAX has made its backends it reads no flags: herl sets none then (the CUDA env warns instead)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    code = ("import os, jax.numpy as jnp; jnp.zeros(1); from herl.batched.mjx import import_mjx; import_mjx(); "
            "print(os.environ.get('XLA_FLAGS', 'unset'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "unset"
