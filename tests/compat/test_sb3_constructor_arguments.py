"""SB3's off-policy constructor arguments that scripts and rl-zoo pass at their defaults, for every algorithm; the
non-defaults herl cannot honour are refused with what to do; and SB3's ``device="cuda"`` on a machine without CUDA."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from herl import DDPG, DQN, SAC, TD3, TQC, CrossQ, HerReplayBuffer
from herl.envs import BitFlippingEnv
from herl.errors import ConfigError
from herl.utils import get_device

SMALL = dict(learning_starts=10, batch_size=16, policy_kwargs=dict(net_arch=[16]), seed=0)
ALGORITHMS = [DQN, SAC, TD3, DDPG, TQC, CrossQ]
# what SB3's off-policy constructors default them to (SAC's signature, the widest)
SB3_DEFAULTS = dict(replay_buffer_class=None, replay_buffer_kwargs=None, optimize_memory_usage=False, n_steps=1,
                    use_sde=False, sde_sample_freq=-1, use_sde_at_warmup=False, stats_window_size=100,
                    tensorboard_log=None, policy_kwargs=None, verbose=0, seed=None, device="auto",
                    _init_setup_model=True)
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="the fallback is for machines without CUDA")


def env_for(model_class):
    return BitFlippingEnv(4, continuous=model_class is not DQN, max_steps=4)


@pytest.mark.parametrize("model_class", ALGORITHMS)
def test_sb3s_defaults_are_accepted_by_every_algorithm(model_class):
    model = model_class("MultiInputPolicy", env_for(model_class), **SB3_DEFAULTS)
    assert not model.replay_buffer.optimize_memory_usage and model.replay_buffer_kwargs == {}
    assert model.config.stats_window_size == 100


@pytest.mark.parametrize("model_class", [DQN, SAC])
def test_optimize_memory_usage_true_is_honoured_by_the_buffer_and_saved(model_class, tmp_path):
    env = env_for(model_class)
    for buffer in ({}, dict(replay_buffer_class=HerReplayBuffer)):
        model = model_class("MultiInputPolicy", env, optimize_memory_usage=True, **buffer, **SMALL)
        assert model.replay_buffer.optimize_memory_usage
        model.learn(30)
        model.save(tmp_path / "model.zip")
        assert model_class.load(tmp_path / "model.zip", env=env).replay_buffer.optimize_memory_usage


@pytest.mark.parametrize("model_class", [DQN, SAC])
def test_a_memory_saving_buffer_warns_at_each_learn_that_resets_and_says_what_it_cut(model_class):
    """SB3 warns at every ``learn(reset_num_timesteps=True)`` after another when the buffer saves memory, since that
    call pattern cuts the running episode; herl warns there too, and the warning says whether this call cut one.
    Nothing else warns: the first learn, a learn that goes on, or a buffer that does not save memory."""
    def learn(model, steps, reset=True):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            model.learn(steps, reset_num_timesteps=reset)
        notes = [w for w in record if "The last trajectory in the replay buffer will be truncated" in str(w.message)]
        assert all(w.filename == __file__ for w in notes)
        return [str(w.message) for w in notes]

    env = BitFlippingEnv(4, continuous=model_class is not DQN, max_steps=4)
    model = model_class("MultiInputPolicy", env, optimize_memory_usage=True, **SMALL)
    assert learn(model, 8) == [] and learn(model, 8, reset=False) == []
    seen = set()
    for steps in (5, 6, 7, 8, 9, 10, 11):
        running = bool(model._ep_lengths.item() > 0)  # did the last learn stop mid-episode?
        (note,) = learn(model, steps)
        if running:
            assert "each running episode is closed here as cut by a time limit" in note
        else:
            assert "this call found none: nothing was cut" in note and "reset_num_timesteps=False" in note
        seen.add(running)
    assert seen == {True, False}
    plain = model_class("MultiInputPolicy", env, **SMALL)
    assert learn(plain, 10) == [] and learn(plain, 10) == []


def test_non_defaults_herl_cannot_honour_are_refused_with_what_to_do():
    env = env_for(SAC)
    with pytest.raises(ValueError, match=r"_init_setup_model=False .* not supported; leave it True"):
        SAC("MultiInputPolicy", env, _init_setup_model=False)
    with pytest.raises(ValueError, match="use_sde=True .* not implemented"):
        SAC("MultiInputPolicy", env, use_sde=True)
    with pytest.raises(ConfigError, match="optimize_memory_usage must be true or false"):
        SAC("MultiInputPolicy", env, optimize_memory_usage="yes")
    with pytest.raises(ValueError, match="optimize_memory_usage=False and replay_buffer_kwargs .*=True: give it once"):
        SAC("MultiInputPolicy", env, optimize_memory_usage=False, replay_buffer_kwargs=dict(optimize_memory_usage=True))
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['not_an_argument'\]"):
        DQN("MultiInputPolicy", env_for(DQN), not_an_argument=1)
    with pytest.raises(TypeError, match=r"\['learnin_rate'\] \(did you mean 'learning_rate'\?\)"):
        SAC("MultiInputPolicy", env, learnin_rate=1e-3)


def test_a_misspelled_buffer_argument_is_named_with_the_closest_one():
    with pytest.raises(TypeError, match=r"replay_buffer_kwargs has 'n_sample_goal', 'strategy', which HerReplayBuffer "
                                        r"does not take \(did you mean 'n_sampled_goal'\?\); it takes: "):
        SAC("MultiInputPolicy", env_for(SAC), replay_buffer_class=HerReplayBuffer,
            replay_buffer_kwargs=dict(n_sample_goal=4, strategy="future"))


@NO_CUDA
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda")])
def test_cuda_without_cuda_falls_back_to_the_cpu_with_a_warning(device, tmp_path):
    with pytest.warns(UserWarning, match="CUDA is not available here: using the CPU") as record:
        model = SAC("MultiInputPolicy", env_for(SAC), device=device, **SMALL)
    assert model.device == torch.device("cpu") and model.replay_buffer.device == torch.device("cpu")
    assert record[0].filename == __file__  # the warning points at the user's line
    model.save(tmp_path / "model.zip")
    with pytest.warns(UserWarning, match="using the CPU"):
        assert SAC.load(tmp_path / "model.zip", device=device).device == torch.device("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert get_device("auto") == torch.device("cpu") and get_device("cpu") == torch.device("cpu")


@NO_CUDA
def test_assigning_cuda_to_model_device_falls_back_the_same_way(tmp_path):
    """SB3's tests set ``model.device`` by hand and then load a replay buffer, which must land on the model's
    device: the assignment resolves as the constructor's argument does."""
    model = SAC("MultiInputPolicy", env_for(SAC), **SMALL)
    model.learn(20)
    model.save_replay_buffer(tmp_path / "buffer")
    with pytest.warns(UserWarning, match="CUDA is not available here: using the CPU") as record:
        model.device = torch.device("cuda")
    assert record[0].filename == __file__
    assert model.device == torch.device("cpu")
    model.load_replay_buffer(tmp_path / "buffer")
    assert model.replay_buffer.device == model.device
    with pytest.warns(UserWarning, match="using the CPU") as record:
        model.replay_buffer.device = "cuda"
    assert record[0].filename == __file__ and model.replay_buffer.device == torch.device("cpu")
    with pytest.raises(ConfigError, match="device must be 'auto', 'cpu', 'cuda'"):
        model.device = "gpu"
    assert model.device == torch.device("cpu")
    model.learn(20, reset_num_timesteps=False)


def test_nonsense_devices_stay_errors():
    for device in ("nonsense", "gpu", 3.5):
        with pytest.raises(ConfigError, match="device must be 'auto', 'cpu', 'cuda'"):
            get_device(device)
    if torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA device"):
            get_device(f"cuda:{torch.cuda.device_count()}")


@NO_CUDA
def test_herl_train_with_device_cuda_trains_on_the_cpu_and_the_run_notes_it(tmp_path, capsys):
    from herl.cli import main

    code = main(["train", "--env", "herl/BitFlipping-v0", "--timesteps", "60", "--progress", "off", "--device",
                 "cuda", "--set", "learning_starts=20", "--set", "policy.net_arch=[8]", "--set", "batch_size=8",
                 "--run-dir", str(tmp_path / "run")])
    assert code == 0
    assert "device=cuda, but it is not available here: training on the CPU" in capsys.readouterr().err
    config = json.loads((tmp_path / "run" / "seed_0" / "config.json").read_text())
    assert config["device"] == "cuda"
    assert any("training on the CPU" in note for note in config["notes"])


def test_a_model_trains_after_the_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = DQN("MultiInputPolicy", env_for(DQN), device="cuda" if not torch.cuda.is_available() else "cpu",
                    **SMALL)
    model.learn(30)
    assert np.isfinite(model.train_info()["train/loss"])
