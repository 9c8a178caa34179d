"""Torch's threads against the cores other work leaves free: learn warns once a process when they outnumber them
(a small network's update then took 25-37x as long on a 2-core machine with one core busy)."""

from __future__ import annotations

import warnings

import pytest
import torch

import herl.utils as utils
from herl import SAC


@pytest.fixture
def two_threads(monkeypatch: pytest.MonkeyPatch):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    monkeypatch.setattr(utils, "_threads_checked", False)
    monkeypatch.setattr(utils, "available_cpus", lambda: 2)
    yield
    torch.set_num_threads(before)


def _model() -> SAC:
    return SAC("MultiInputPolicy", "herl/PointReach-v0", learning_starts=10, batch_size=8, seed=0,
               policy_kwargs=dict(net_arch=[8]))


def test_learn_warns_once_when_threads_outnumber_the_free_cores(two_threads, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(utils, "busy_cores", lambda interval=0.25: 1.2)
    model = _model()
    with pytest.warns(RuntimeWarning, match=r"torch computes with 2 threads, and other work leaves 1 of this "
                                            r"machine's 2 cores free.*torch.set_num_threads\(1\)") as record:
        model.learn(20)
    assert record[0].filename == __file__  # points at the user's learn
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.learn(20)  # once a process


@pytest.mark.parametrize("threads, busy", [(2, 0.3), (1, 1.2)])
def test_no_warning_when_the_threads_fit(two_threads, monkeypatch: pytest.MonkeyPatch, threads: int, busy: float):
    torch.set_num_threads(threads)
    monkeypatch.setattr(utils, "busy_cores", lambda interval=0.25: busy)
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.learn(20)
