"""A model file written under another torch version, or on a device with other optimizer kernels, loads here and
trains on as this torch and device step: Adam's settings that newer torches added or that choose the kernel (fused,
foreach) are this machine's, a newer torch's setting that is off is dropped, one that is on is refused by name."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch

from herl import TD3
from herl.envs import PointReachEnv
from herl.errors import ArchiveError
from herl.io.model import fit_param_groups


def model() -> TD3:
    # TD3 with its own actor rate: two parameter groups
    return TD3("MultiInputPolicy", PointReachEnv(max_episode_steps=8), learning_starts=10, batch_size=8, seed=0,
               actor_learning_rate=1e-4, policy_kwargs=dict(net_arch=[8]))


def settings(optimizer: torch.optim.Optimizer) -> list[dict]:
    return [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]


def as_another_torch_wrote_it(groups: list[dict], **extra) -> None:
    for group in groups:
        group.pop("decoupled_weight_decay", None)  # an older torch's Adam had no such setting
        group["fused"] = not group.get("fused")  # another device's kernel
        group["foreach"] = True
        group.update(extra)  # a newer torch's setting


def rewrite_meta(path, change) -> None:
    """``change(meta)`` applied to a model file's meta.json."""
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    meta = json.loads(entries["meta.json"])
    change(meta)
    entries["meta.json"] = json.dumps(meta).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)


def rewrite_optimizer_groups(path, **extra) -> None:
    rewrite_meta(path, lambda meta: as_another_torch_wrote_it(meta["optimizers"]["optimizer"], **extra))


def test_a_file_from_another_torch_loads_with_this_machines_settings_and_trains_on_as_this_torchs_own(tmp_path):
    trained = model()
    trained.learn(30)
    trained.save(tmp_path / "own.zip")
    trained.save(tmp_path / "other.zip")
    rewrite_optimizer_groups(tmp_path / "other.zip", a_newer_setting=False)
    own, other = (TD3.load(tmp_path / name, env=PointReachEnv(max_episode_steps=8)) for name in ("own.zip", "other.zip"))
    assert settings(other.policy.optimizer) == settings(own.policy.optimizer) == settings(model().policy.optimizer)
    assert [group["lr"] for group in other.policy.optimizer.param_groups] == [1e-3, 1e-4]
    own.learn(30, reset_num_timesteps=False)
    other.learn(30, reset_num_timesteps=False)
    for a, b in zip(own.nets.parameters(), other.nets.parameters()):
        assert torch.equal(a, b)


def test_a_newer_torchs_setting_that_is_on_is_refused_by_name(tmp_path):
    model().save(tmp_path / "m.zip")
    rewrite_optimizer_groups(tmp_path / "m.zip", a_newer_setting=True)
    with pytest.raises(ArchiveError, match=r"saved with settings this torch \(.*\) does not have: "
                                           r"\{'a_newer_setting': True\}; load it where torch has them"):
        TD3.load(tmp_path / "m.zip")


def test_set_parameters_takes_another_torchs_parameters_with_this_machines_settings():
    source, target, twin = model(), model(), model()
    source.learn(20)
    params = source.get_parameters()
    as_another_torch_wrote_it(params["optimizer.optimizer"]["param_groups"], a_newer_setting=None)
    target.set_parameters(params)
    assert settings(target.policy.optimizer) == settings(twin.policy.optimizer)


def test_groups_that_do_not_fit_are_left_to_the_checks():
    fresh = [{"params": [0], "lr": 1e-3}]
    for saved in ("damaged", [], [{"params": [0]}, {"params": [1]}], ["a group"]):
        assert fit_param_groups(saved, fresh) is saved


class CountingSGD(torch.optim.SGD):
    """Keeps a Python int in its state, as torch < 2.4's RMSprop keeps its step count."""

    def step(self, closure=None):
        for group in self.param_groups:
            for param in group["params"]:
                self.state[param]["count"] = self.state[param].get("count", 0) + 1
        return super().step(closure)


def test_a_number_the_optimizer_keeps_as_a_python_number_loads_as_one(tmp_path):
    kwargs = dict(learning_starts=10, batch_size=8, seed=0,
                  policy_kwargs=dict(net_arch=[8], optimizer_class=CountingSGD, optimizer_kwargs=dict(momentum=0.5)))
    trained = TD3("MultiInputPolicy", PointReachEnv(max_episode_steps=8), **kwargs)
    trained.learn(30)
    trained.save(tmp_path / "m.zip")
    loaded = TD3.load(tmp_path / "m.zip", policy_kwargs=kwargs["policy_kwargs"])
    saved, restored = (list(m.policy.optimizer.state.values()) for m in (trained, loaded))
    assert [s["count"] for s in restored] == [s["count"] for s in saved] and all(type(s["count"]) is int for s in restored)
    assert all(torch.is_tensor(s["momentum_buffer"]) for s in restored)

    rewrite_meta(tmp_path / "m.zip", lambda meta: meta.update(optimizer_numbers=["optimizer/0/nothing"]))
    with pytest.raises(ArchiveError, match="'optimizer_numbers' field names 'optimizer/0/nothing', which holds no"):
        TD3.load(tmp_path / "m.zip", policy_kwargs=kwargs["policy_kwargs"])
