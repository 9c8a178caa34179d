"""SB3's ``policy_kwargs=dict(optimizer_class=..., optimizer_kwargs=...)``: the class trains the model, files name
it and never import it, and every wrong value is refused naming the fix."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch

from herl import DQN, SAC, TD3, CrossQ
from herl.envs import BitFlippingEnv

SMALL = dict(learning_starts=10, batch_size=8, seed=0)


def env_for(model_class):
    return BitFlippingEnv(4, continuous=model_class is not DQN, max_steps=4)


@pytest.mark.parametrize("model_class", [SAC, TD3, DQN, CrossQ])
def test_the_named_class_is_the_one_that_steps_with_the_given_arguments(model_class):
    model = model_class("MultiInputPolicy", env_for(model_class), **SMALL,
                        policy_kwargs=dict(net_arch=[8], optimizer_class=torch.optim.SGD,
                                           optimizer_kwargs=dict(momentum=0.5)))
    optimizer = model.policy.optimizer
    assert type(optimizer) is torch.optim.SGD and optimizer.defaults["momentum"] == 0.5
    assert all(group["lr"] == model.learning_rate for group in optimizer.param_groups)
    model.learn(30)
    assert optimizer.state and all("momentum_buffer" in s for s in optimizer.state.values())
    assert model.policy_config.to_policy_kwargs()["optimizer_class"] == "SGD"


def cpu_has_fused_adam() -> bool:  # torch 2.4 and later
    try:
        torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], fused=True)
    except RuntimeError:
        return False
    return True


def test_herls_adam_leaves_policy_kwargs_as_before_and_an_adam_like_class_keeps_the_algorithms_betas():
    fused = cpu_has_fused_adam()
    model = CrossQ("MultiInputPolicy", env_for(CrossQ), **SMALL)
    assert "optimizer_class" not in model.policy_config.to_policy_kwargs()
    assert model.policy.optimizer.defaults["betas"] == (0.5, 0.999) and bool(model.policy.optimizer.defaults["fused"]) is fused
    adamw = CrossQ("MultiInputPolicy", env_for(CrossQ), **SMALL, policy_kwargs=dict(optimizer_class="AdamW"))
    assert adamw.policy.optimizer.defaults["betas"] == (0.5, 0.999) and bool(adamw.policy.optimizer.defaults["fused"]) is fused
    own = CrossQ("MultiInputPolicy", env_for(CrossQ), **SMALL,
                 policy_kwargs=dict(optimizer_class="AdamW", optimizer_kwargs=dict(betas=[0.9, 0.99])))
    assert list(own.policy.optimizer.defaults["betas"]) == [0.9, 0.99]


def test_a_class_of_the_users_is_named_in_the_file_and_found_only_where_its_module_is_loaded(tmp_path):
    module = types.ModuleType("my_optimizers")

    class Halved(torch.optim.SGD):
        pass

    Halved.__module__, Halved.__qualname__ = "my_optimizers", "Halved"
    module.Halved = Halved
    sys.modules["my_optimizers"] = module
    try:
        model = SAC("MultiInputPolicy", env_for(SAC), **SMALL, policy_kwargs=dict(optimizer_class=Halved))
        model.learn(20)
        model.save(tmp_path / "model")
        assert type(SAC.load(tmp_path / "model.zip").policy.optimizer) is Halved
    finally:
        del sys.modules["my_optimizers"]
    from herl.training import optimizers

    optimizers.SEEN_OPTIMIZERS.clear()  # a fresh process: the class was never given to a model there
    from herl.errors import ArchiveError

    with pytest.raises(ArchiveError, match=r"my_optimizers:Halved' is not loaded: import its module \(my_optimizers\)"):
        SAC.load(tmp_path / "model.zip")
    loaded = SAC.load(tmp_path / "model.zip", policy_kwargs=dict(optimizer_class=Halved))
    assert type(loaded.policy.optimizer) is Halved


class _AdamWithoutFusedKernel(torch.optim.Adam):
    """Adam where the device has no fused kernel (torch < 2.4 on a CPU): ``fused=True`` is refused after the parameter
    groups took the defaults, as torch refuses it."""

    def __init__(self, params, fused=None, **kwargs):
        super().__init__(params, **kwargs)
        if fused:
            for group in self.param_groups:
                group["fused"] = True
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")


def test_adam_where_the_device_has_no_fused_kernel_steps_unfused_with_each_groups_step_size(monkeypatch):
    # a failed try with fused=True left it in the parameter groups the second try was given: TD3 with its own actor
    # and critic rates crashed at its first update where the CPU has no fused Adam
    from herl.training import optimizers

    monkeypatch.setattr(optimizers, "FUSED", (_AdamWithoutFusedKernel,))
    name = optimizers.optimizer_name(_AdamWithoutFusedKernel)
    actor, critic = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
    optimizer = optimizers.build_optimizer(name, {}, [{"params": actor.parameters(), "lr": 1e-4},
                                                      {"params": critic.parameters(), "lr": 1e-3}], 3e-4, (0.9, 0.999))
    assert [(group["lr"], group["fused"]) for group in optimizer.param_groups] == [(1e-4, None), (1e-3, None)]
    (actor(torch.ones(2)).sum() + critic(torch.ones(2)).sum()).backward()
    optimizer.step()


@pytest.mark.parametrize(("policy_kwargs", "error", "match"), [
    (dict(optimizer_class=dict), TypeError, "optimizer_class must be a torch.optim.Optimizer subclass"),
    (dict(optimizer_class="Adamm"), ValueError, r"torch.optim has no optimizer 'Adamm': use one of \[.*'AdamW'"),
    (dict(optimizer_kwargs=dict(lr=1e-3)), ValueError, "holds 'lr': give learning_rate= instead"),
    (dict(optimizer_kwargs=dict(betas=(0.9, object()))), TypeError, "optimizer_kwargs must be a dict of JSON values"),
    (dict(optimizer_class="SGD", optimizer_kwargs=dict(betas=[0.9, 0.9])), ValueError,
     r"optimizer_class='SGD' with optimizer_kwargs=\{'betas': \[0.9, 0.9\]\} cannot be built: .*betas"),
])
def test_wrong_optimizer_settings_are_refused_naming_the_fix(policy_kwargs, error, match):
    with pytest.raises(error, match=match):
        SAC("MultiInputPolicy", env_for(SAC), **SMALL, policy_kwargs=policy_kwargs)


def test_the_settings_are_json_in_the_file(tmp_path):
    import zipfile

    model = TD3("MultiInputPolicy", env_for(TD3), **SMALL,
                policy_kwargs=dict(optimizer_class=torch.optim.AdamW, optimizer_kwargs=dict(weight_decay=0.1)))
    model.save(tmp_path / "model")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        text = next(archive.read(n) for n in archive.namelist() if n.endswith(".json")).decode()
    meta = json.loads(text)
    fields = meta.get("meta", meta)
    assert fields["policy_kwargs"]["optimizer_class"] == "AdamW"
    assert fields["policy_kwargs"]["optimizer_kwargs"] == {"weight_decay": 0.1}
