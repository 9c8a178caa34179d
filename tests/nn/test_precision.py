"""Mixed precision (``policy_kwargs=dict(precision="bfloat16")``): hidden-to-hidden matmuls in bfloat16, everything
a user keeps (weights, gradients, optimizer state, saved files, exported graphs) in float32."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from herl import SAC, TQC, CrossQ, HerReplayBuffer, evaluate_policy
from herl.envs import PointReachEnv
from herl.errors import ConfigError
from herl.nn import MLP, EnsembleMLP
from herl.nn import mlp as mlp_module
from herl.nn.mlp import set_precision


def _pair(module_fn):
    """The same network twice: float32, and with bfloat16 hidden layers."""
    reference, mixed = module_fn(), module_fn()
    mixed.load_state_dict(reference.state_dict())
    set_precision(mixed, "bfloat16")
    return reference, mixed


@pytest.mark.parametrize("make", [
    lambda: MLP(7, 3, [64, 64, 64], generator=torch.Generator().manual_seed(0)),
    lambda: EnsembleMLP(7, 5, [64, 64, 64], n_members=2, generator=torch.Generator().manual_seed(0)),
], ids=["mlp", "ensemble"])
def test_bfloat16_hidden_layers_track_float32(make):
    reference, mixed = _pair(make)
    x = torch.randn(128, 7, generator=torch.Generator().manual_seed(1))
    x_mixed, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, ref = mixed(x_mixed), reference(x_ref)
    assert out.dtype == torch.float32  # callers never see bfloat16
    scale = ref.abs().mean()
    assert (out - ref).abs().max() < 0.05 * scale  # bfloat16 keeps 8 bits of mantissa
    assert not torch.equal(out, ref)  # the bfloat16 path did run
    out.square().sum().backward()
    ref.square().sum().backward()
    # what an actor's update follows: the gradient with respect to the inputs (the actions), row by row; a
    # pre-activation within rounding of 0 can switch its ReLU, so single rows may turn by some degrees
    cosine = torch.nn.functional.cosine_similarity(x_mixed.grad, x_ref.grad, dim=1)
    assert cosine.mean() > 0.995 and cosine.quantile(0.05) > 0.98
    for (name, p), q in zip(mixed.named_parameters(), reference.parameters()):
        assert p.dtype == torch.float32 and p.grad.dtype == torch.float32, name
        cosine = torch.nn.functional.cosine_similarity(p.grad.flatten(), q.grad.flatten(), dim=0)
        assert cosine > 0.99, name


def test_networks_without_two_hidden_layers_are_unchanged():
    # one hidden layer has no hidden-to-hidden matmul: nothing is cast, results are bitwise float32
    reference, mixed = _pair(lambda: EnsembleMLP(4, 2, [16], generator=torch.Generator().manual_seed(0)))
    x = torch.randn(8, 4)
    assert torch.equal(reference(x), mixed(x))
    reference, mixed = _pair(lambda: MLP(4, 2, [16], generator=torch.Generator().manual_seed(0)))
    assert torch.equal(reference(x), mixed(x))


@pytest.mark.slow
@pytest.mark.parametrize("algo", [SAC, TQC], ids=lambda a: a.__name__)
def test_bfloat16_models_learn_save_and_load(algo, tmp_path):
    env = PointReachEnv()
    model = algo("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, seed=0, learning_starts=200,
                 learning_rate=1e-3, gamma=0.95, tau=0.05, batch_size=128,
                 policy_kwargs=dict(net_arch=[64, 64, 64], precision="bfloat16"))
    model.learn(3000)
    assert model.policy_config.precision == "bfloat16"
    assert all(p.dtype == torch.float32 for p in model.nets.parameters())
    *_, success = evaluate_policy(model, PointReachEnv(), n_eval_episodes=20, return_success_rate=True, seed=1)
    assert success >= 0.9
    model.save(tmp_path / "m")
    loaded = algo.load(tmp_path / "m")
    assert loaded.policy_config.precision == "bfloat16"
    obs, _ = PointReachEnv().reset(seed=3)
    assert (loaded.predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]).all()


def test_bad_precision_is_refused():
    with pytest.raises(ConfigError, match="precision.*bfloat16.*'auto'"):
        SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(precision="float16"))
    with pytest.raises(ValueError, match="CrossQ.*float32"):
        CrossQ("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(precision="bfloat16"))


@pytest.mark.parametrize("fast", [True, False], ids=["bf16-hardware", "no-bf16-hardware"])
def test_auto_precision_picks_bfloat16_only_where_the_device_has_it_and_saves_the_choice(fast, monkeypatch, tmp_path):
    monkeypatch.setattr(mlp_module, "has_fast_bfloat16", lambda device: fast)
    model = TQC("MultiInputPolicy", PointReachEnv(), seed=0, device="cpu",
                policy_kwargs=dict(net_arch=[32, 32], precision="auto"))
    chosen = "bfloat16" if fast else "float32"
    assert model.policy_config.precision == chosen
    hidden = {m.hidden_dtype for m in model.nets.modules() if isinstance(m, (MLP, EnsembleMLP))}
    assert hidden == {torch.bfloat16 if fast else None}
    model.save(tmp_path / "m")
    monkeypatch.setattr(mlp_module, "has_fast_bfloat16", lambda device: not fast)  # another machine loads it
    assert TQC.load(tmp_path / "m").policy_config.precision == chosen  # what the model ran in, not re-chosen


def test_auto_precision_is_float32_for_crossq_and_float32_stays_float32(monkeypatch):
    monkeypatch.setattr(mlp_module, "has_fast_bfloat16", lambda device: True)
    crossq = CrossQ("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[32, 32], precision="auto"))
    assert crossq.policy_config.precision == "float32"
    sac = SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[32, 32]))
    assert sac.policy_config.precision == "float32"


def test_fast_bfloat16_check_answers_for_each_device_kind():
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():  # Linux says what the CPU has, independently of torch
        flags = set(cpuinfo.read_text().split())
        # torch.cpu's checks (torch 2.4 and later): where this torch lacks them, the answer is no
        checks = any(hasattr(torch.cpu, name) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
        assert mlp_module.has_fast_bfloat16(torch.device("cpu")) is (checks and bool({"avx512_bf16", "amx_tile"} & flags))
    assert mlp_module.has_fast_bfloat16(torch.device("meta")) is False
    if torch.cuda.is_available():
        assert mlp_module.has_fast_bfloat16(torch.device("cuda")) is (torch.cuda.get_device_capability() >= (8, 0))
    assert mlp_module.resolve_precision("float32", torch.device("cpu")) == "float32"
    assert mlp_module.resolve_precision("bfloat16", torch.device("meta")) == "bfloat16"  # only "auto" is resolved


@pytest.mark.parametrize(
    ("variable", "cap", "capped"),
    [("ONEDNN_MAX_CPU_ISA", "AVX2", True), ("DNNL_MAX_CPU_ISA", "avx512_core", True),
     ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16", False), ("ONEDNN_MAX_CPU_ISA", "ALL", False)],
)
def test_onednn_held_below_bfloat16_means_no_fast_bfloat16(monkeypatch, variable, cap, capped):
    """oneDNN runs the CPU's bfloat16 products: capped below AVX512-BF16 it emulates them, so "auto" is float32."""
    uncapped = mlp_module.has_fast_bfloat16(torch.device("cpu"))
    monkeypatch.setenv(variable, cap)
    assert mlp_module.has_fast_bfloat16(torch.device("cpu")) is (uncapped and not capped)
    if capped:
        assert mlp_module.resolve_precision("auto", torch.device("cpu")) == "float32"


@pytest.mark.parametrize("algo, fast, says", [
    ("sac", True, "chose bfloat16 (this machine multiplies in it natively)"),
    ("sac", False, "chose float32: no native bfloat16 matmuls here"),
    ("crossq", True, "chose float32 (CrossQ runs in float32 only)"),
])
def test_herl_train_says_what_auto_precision_chose(algo, fast, says, monkeypatch, tmp_path, capsys):
    """A run's speed differs ~2x between the two precisions, so herl train says which one 'auto' picked and why."""
    from herl.run.config import build_config
    from herl.run.train import start_run

    monkeypatch.setattr(mlp_module, "has_fast_bfloat16", lambda device: fast)
    config = build_config(algo=algo, env="herl/PointReach-v0", seed=0, goal_env=True, preset=None,
                          layers=[("--set", {"timesteps": 40, "learning_starts": 20, "batch_size": 8,
                                             "policy.net_arch": [8, 8], "policy.precision": "auto", "eval.freq": 0})])
    start_run(config, tmp_path / "run", progress="off")
    assert f"herl train: note: policy.precision=auto {says}" in capsys.readouterr().err
