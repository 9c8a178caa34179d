"""``compile=True``: the compiled update computes what the eager update does, for every algorithm that takes it and
every input form its eager update takes (goal and Box observations, HER, prioritized replay, demonstrations, images
through an extractor); the whole step is one compiled function (on CUDA in CUDA graphs), which reads step-size
schedules and groups and leaves an optimizer it cannot run to the compiled loss; training acts through a compiled
function with the eager actions; models of many shapes compile in one process; a model that cannot compile (no
compiler, or past Dynamo's limit of graphs) warns and trains on eagerly; a compiled model saves, loads and trains on
as one never interrupted; CrossQ refuses it with the reason.

Compiling takes seconds per model (inductor's C++ backend on the CPU), so these are slow tests.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from herl import DDPG, DQN, SAC, TD3, TQC, CrossQ, HerReplayBuffer, NormalActionNoise
from herl.demos import generate_expert_traj
from herl.envs import BitFlippingEnv, PointReachEnv
from herl.errors import ConfigError

pytestmark = pytest.mark.slow

ALGOS = {cls.__name__: cls for cls in (DQN, DDPG, TD3, SAC, TQC)}


def reach_expert(obs):
    return np.clip(3.0 * (obs["desired_goal"] - obs["achieved_goal"]), -1.0, 1.0).astype(np.float32)


def make(algo: str, form: str, compile: bool, seed: int = 0, **settings):
    cls = ALGOS[algo]
    kwargs = dict(seed=seed, learning_starts=20, batch_size=16, buffer_size=400, compile=compile,
                  policy_kwargs={"net_arch": [32, 32], **settings.pop("policy_kwargs", {})}, **settings)
    if algo in ("DDPG", "TD3"):
        kwargs["action_noise"] = NormalActionNoise(np.zeros(2), 0.2 * np.ones(2))
    if form == "her":
        env = BitFlippingEnv(n_bits=4) if algo == "DQN" else PointReachEnv(max_episode_steps=8)
        kwargs.update(replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=dict(n_sampled_goal=2))
        policy = "MultiInputPolicy"
    elif form == "demos":
        env = PointReachEnv(max_episode_steps=8)
        demos = generate_expert_traj(reach_expert, None, PointReachEnv(max_episode_steps=8), n_episodes=3, seed=5)
        kwargs.update(replay_buffer_class=HerReplayBuffer, bc_loss_weight=1.0, q_filter=True,
                      replay_buffer_kwargs=dict(demonstrations=demos, demo_batch_ratio=0.25))
        policy = "MultiInputPolicy"
    elif form == "prioritized":
        env = gym.make("CartPole-v1")
        kwargs.update(replay_buffer_kwargs=dict(prioritized=True), target_update_interval=10)
        policy = "MlpPolicy"
    elif form == "images":
        env = BitFlippingEnv(n_bits=4, continuous=algo != "DQN", image_obs_space=True, max_steps=6)
        kwargs.update(replay_buffer_class=HerReplayBuffer,
                      policy_kwargs=dict(net_arch=[16], features_extractor_kwargs=dict(cnn_output_dim=8)))
        if algo in ("DDPG", "TD3"):
            kwargs["action_noise"] = NormalActionNoise(np.zeros(4), 0.2 * np.ones(4))
        policy = "MultiInputPolicy"
    else:
        env = gym.make("CartPole-v1") if algo == "DQN" else gym.make("Pendulum-v1", max_episode_steps=30)
        if algo in ("DDPG", "TD3"):
            kwargs["action_noise"] = NormalActionNoise(np.zeros(1), 0.2 * np.ones(1))
        policy = "MlpPolicy"
    return cls(policy, env, **kwargs)


def assert_close_models(a, b) -> None:
    pa, pb = a.get_parameters(), b.get_parameters()
    for name in pa:
        if name.endswith(".optimizer"):
            continue
        for key in pa[name]:
            torch.testing.assert_close(pa[name][key].float(), pb[name][key].float(), rtol=1e-4, atol=1e-5,
                                       msg=f"{name}.{key}")
    for key, value in a.train_info().items():
        assert b.train_info()[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    assert (a.num_timesteps, a._n_updates) == (b.num_timesteps, b._n_updates)


CASES = [*[(algo, "box") for algo in ALGOS], *[(algo, "her") for algo in ALGOS], ("DQN", "prioritized"),
         ("SAC", "demos"), ("TD3", "demos"), ("SAC", "images"), ("DQN", "images")]


@pytest.mark.parametrize("algo, form", CASES, ids=lambda v: str(v))
def test_the_compiled_update_computes_what_the_eager_one_does(algo: str, form: str):
    eager, compiled = make(algo, form, False), make(algo, form, True)
    eager.learn(60)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "could not compile": it would compare eager with eager
        compiled.learn(60)
    assert compiled.compile_seconds is not None and compiled.compile_seconds > 0
    assert eager.compile_seconds is None
    assert compiled.__dict__["_fused"], "Adam's models compile the whole step"
    assert compiled._n_updates >= 10
    assert_close_models(eager, compiled)
    obs = compiled.observation_space.sample()
    np.testing.assert_allclose(compiled.predict(obs, deterministic=True)[0], eager.predict(obs, deterministic=True)[0],
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("algo", ["SAC", "TD3", "DQN"])
def test_training_acts_through_one_compiled_function_with_the_eager_actions(algo: str):
    """On a CPU, the actions of training's env steps come from a compiled function (normalizer and actor; the noise
    drawn eagerly from the model's generator): the actions the eager networks give for the same draws."""
    model = make(algo, "her", True, normalize_observations=True)
    model.learn(40)
    assert model.__dict__["_acting"], "training acted through the compiled function"
    obs = {k: np.stack([model.observation_space[k].sample() for _ in range(3)]) for k in model.observation_space}
    torch_state = model.torch_rng.get_state()
    compiled = model._policy_actions(obs, deterministic=False, collecting=True)
    model.torch_rng.set_state(torch_state)
    model.__dict__["_acting"] = False  # the eager networks from here on
    eager = model._policy_actions(obs, deterministic=False, collecting=True)
    assert compiled.shape == eager.shape == ((3, 1) if algo == "DQN" else (3, 2))
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-6)
    assert model.__dict__["_acting"] is False and make(algo, "her", False).__dict__.get("_acting") is None


def test_a_compiled_model_saves_loads_and_trains_on_as_never_interrupted(tmp_path):
    model = make("TQC", "her", True)
    model.learn(40)
    model.save(tmp_path / "model")
    model.save_replay_buffer(tmp_path / "buffer")
    loaded = TQC.load(tmp_path / "model", env=PointReachEnv(max_episode_steps=8))
    loaded.load_replay_buffer(tmp_path / "buffer")
    assert loaded.config.compile and loaded.compile_seconds is None
    model.set_env(PointReachEnv(max_episode_steps=8))
    for m in (model, loaded):
        m.learn(30, reset_num_timesteps=False)
    assert loaded.compile_seconds is not None
    if model.device.type != "cpu":  # CUDA kernels may reduce in their own order: to float rounding there
        assert_close_models(model, loaded)
        return
    pa, pb = model.get_parameters(), loaded.get_parameters()
    for name in pa:
        if not name.endswith(".optimizer"):
            for key in pa[name]:
                assert torch.equal(pa[name][key], pb[name][key]), (name, key)


def test_a_model_that_cannot_compile_says_so_and_trains_on_eagerly(monkeypatch):
    def broken(fn, **kwargs):
        def run(*args):
            raise RuntimeError("no C++ compiler here")
        return run

    monkeypatch.setattr(torch, "compile", broken)
    eager, fallback = make("SAC", "her", False), make("SAC", "her", True)
    eager.learn(40)
    with pytest.warns(RuntimeWarning, match="could not compile the update .*no C\\+\\+ compiler here.*eager update"):
        fallback.learn(40)
    for key, value in eager.policy.state_dict().items():
        assert torch.equal(value, fallback.policy.state_dict()[key]), key


def test_models_of_many_shapes_compile_in_one_process_and_past_dynamos_limit_one_warns(monkeypatch):
    """Every model's step is one function to Dynamo, which stops compiling a function past its limit of graphs (8 by
    default): each model herl compiles adds room, and a model past the limit says so and trains eagerly, rather than
    silently (here the room is one graph a compiled function instead of 8, then none)."""
    import itertools

    from torch._dynamo.utils import counters

    from herl.training import fused_step

    torch._dynamo.reset()
    monkeypatch.setattr(fused_step, "_models", itertools.count(1))
    monkeypatch.setattr(fused_step, "GRAPHS_PER_MODEL", 1)
    config = torch._dynamo.config
    limit, accumulated = (next(n for n in names if hasattr(config, n)) for names in  # torch < 2.7 names them so
                          (("recompile_limit", "cache_size_limit"),
                           ("accumulated_recompile_limit", "accumulated_cache_size_limit")))
    with config.patch({limit: 1, accumulated: 1}):
        for width in (8, 12, 16):
            model = make("SAC", "box", True, policy_kwargs=dict(net_arch=[width]))
            graphs = counters["stats"]["unique_graphs"]
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                model.learn(30)
            assert counters["stats"]["unique_graphs"] >= graphs + 2, "acting and the step: graphs of their own"
        if not hasattr(config, "fail_on_recompile_limit_hit"):
            pytest.skip("before torch 2.6 Dynamo runs a function past its limit uncompiled without a word")
        monkeypatch.setattr(fused_step, "GRAPHS_PER_MODEL", 0)  # no room for the next model:
        setattr(config, limit, 3)  # the three graphs each function has (undone with the patch)
        model = make("SAC", "box", True, policy_kwargs=dict(net_arch=[20]))
        with pytest.warns(RuntimeWarning, match="could not compile the update .*recompile_limit.*eager update"):
            model.learn(30)
    assert model._n_updates >= 10 and model.__dict__["_fused"] is False


def test_compile_can_be_switched_on_a_built_model_and_crossq_refuses_it():
    model = make("SAC", "box", False)
    model.compile = True
    model.learn(30)
    assert model.compile_seconds is not None
    with pytest.raises(ConfigError, match="CrossQ's batch renormalization counts its steps in Python"):
        CrossQ("MlpPolicy", "Pendulum-v1", compile=True)


def test_the_whole_step_is_one_function_and_leaves_adam_state_the_eager_step_reads():
    """No parameter keeps a ``.grad`` (the gradients live inside the compiled function), and the optimizer's state is
    torch's Adam's: switched to the eager update, the model trains on as one that was never compiled."""
    compiled, eager = make("TD3", "her", True), make("TD3", "her", False)
    for m in (compiled, eager):
        m.learn(41)  # TD3's actor updates every second step: the whole step leaves it out of the others
    assert all(p.grad is None for p in compiled.policy.parameters())
    assert any(p.grad is not None for p in eager.policy.parameters())
    assert_close_models(eager, compiled)
    compiled.compile = False
    for m in (compiled, eager):
        m.learn(20, reset_num_timesteps=False)
    assert any(p.grad is not None for p in compiled.policy.parameters())
    assert_close_models(eager, compiled)


@pytest.mark.parametrize("setting", ["lr_schedule", "actor_learning_rate", "AdamW"])
def test_the_whole_step_follows_schedules_and_groups_and_leaves_other_optimizers_to_the_compiled_loss(setting):
    algo = "TD3" if setting == "actor_learning_rate" else "SAC"
    settings = {"actor_learning_rate": dict(actor_learning_rate=3e-4),
                "AdamW": dict(policy_kwargs=dict(optimizer_class=torch.optim.AdamW))}.get(setting, {})
    eager, compiled = make(algo, "her", False, **settings), make(algo, "her", True, **settings)
    for m in (eager, compiled):
        if setting == "lr_schedule":
            m.lr_schedule = lambda progress: 3e-3 * progress
        m.learn(60)
    assert_close_models(eager, compiled)
    groups = compiled.optimizers["optimizer"].param_groups
    if setting == "lr_schedule":
        assert groups[0]["lr"] < 3e-3 * 0.5
    if setting == "actor_learning_rate":
        assert len(groups) == 2
    has_grads = any(p.grad is not None for p in compiled.policy.parameters())
    assert has_grads == (setting == "AdamW")  # AdamW: the compiled loss, then autograd and AdamW's own step


def _compiler_failure() -> Exception:
    """A ``BackendCompilerFailed`` as Dynamo raises it (its constructor's arguments differ between torch versions)."""
    from torch._dynamo.exc import BackendCompilerFailed

    err = BackendCompilerFailed.__new__(BackendCompilerFailed)
    Exception.__init__(err, "backend='inductor' raised: ImportError: kernel.so: file too short")
    return err


@pytest.mark.parametrize("whole_step", [True, False], ids=["whole step", "loss alone"])
def test_a_later_graph_the_compiler_fails_on_warns_and_trains_on_eagerly(whole_step: bool, monkeypatch):
    """A graph compiled after the first (a new branch or batch size) that the compiler cannot build: the model warns
    and trains on eagerly, as when the first one fails, rather than stop the run; any other error still stops it."""
    from herl.training import base

    if not whole_step:  # the loss alone is compiled where the whole step is not supported
        monkeypatch.setattr(base, "fused_step_unsupported", lambda model: "not here")
    model = make("SAC", "box", True)
    model.learn(40)
    assert model.compile_seconds is not None and model._n_updates > 0

    def failing(*args, **kwargs):
        raise _compiler_failure()

    if whole_step:
        model.__dict__["_fused"].compiled = failing
    else:
        model.__dict__["_compiled_losses"] = failing
    updates = model._n_updates
    with pytest.warns(RuntimeWarning, match="could not compile the update .*file too short.*eager update"):
        model.learn(20, reset_num_timesteps=False)
    assert model._n_updates == updates + 20 and model.__dict__["_compiled_losses"] == model._losses

    other = make("SAC", "box", True)
    other.learn(40)

    def broken(*args, **kwargs):
        raise ValueError("not the compiler's")

    if whole_step:
        other.__dict__["_fused"].compiled = broken
    else:
        other.__dict__["_compiled_losses"] = broken
    with pytest.raises(ValueError, match="not the compiler's"):
        other.learn(20, reset_num_timesteps=False)
