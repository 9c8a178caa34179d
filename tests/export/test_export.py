"""ONNX and TorchScript export: the exported graph's actions equal predict(deterministic=True)'s."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import herl
from herl.cli import main
from herl.envs import BitFlippingEnv, PointReachEnv
from herl.export import check_onnx, export_torchscript, input_specs

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

ACTOR_ALGOS = [herl.SAC, herl.TD3, herl.DDPG, herl.TQC, herl.CrossQ]


def _with_statistics(model, seed: int = 0):
    """Normalizer statistics (and CrossQ's running statistics) away from their initial values, as after training,
    so that the test sees normalization and clipping at work."""
    rng = np.random.default_rng(seed)
    dim = model.encoder.dim
    model.encoder.update(torch.as_tensor(rng.normal(0.3, 0.2, size=(64, dim)), dtype=torch.float32))
    with torch.no_grad():
        for name, buffer in model.nets.named_buffers():
            if name.endswith("running_mean"):
                buffer.normal_(0.0, 0.3)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 2.0)
    return model


@pytest.mark.parametrize("algo", ACTOR_ALGOS, ids=lambda a: a.__name__)
def test_onnx_actions_equal_predict_on_point_reach(algo, tmp_path):
    # action bounds other than [-1, 1] check the scaling inside the graph
    env = PointReachEnv(dim=3)
    model = _with_statistics(algo("MultiInputPolicy", env, policy_kwargs=dict(net_arch=[32, 32]), seed=0))
    path = model.export_onnx(tmp_path / "policy.onnx")
    assert check_onnx(model, path, n_observations=1000) <= 1e-5


def test_onnx_argmax_equals_dqn_predict_on_bit_flipping(tmp_path):
    model = _with_statistics(herl.DQN("MultiInputPolicy", BitFlippingEnv(n_bits=6), seed=0))
    path = model.export_onnx(tmp_path / "dqn.onnx")
    assert check_onnx(model, path, n_observations=1000) == 0.0
    import onnxruntime

    inputs = onnxruntime.InferenceSession(str(path)).get_inputs()
    assert [(i.name, i.type) for i in inputs] == [(k, "tensor(int8)") for k in ("achieved_goal", "desired_goal", "observation")]
    chosen = herl.DQN("MultiInputPolicy", BitFlippingEnv(n_bits=6), policy_kwargs=dict(input_keys=["observation", "desired_goal"]))
    path = chosen.export_onnx(tmp_path / "chosen.onnx")  # the inputs are the entries the networks read
    inputs = onnxruntime.InferenceSession(str(path)).get_inputs()
    assert [i.name for i in inputs] == ["observation", "desired_goal"]


def test_torchscript_module_equals_predict(tmp_path):
    model = _with_statistics(herl.TD3("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[16]), seed=1))
    path = export_torchscript(model, tmp_path / "policy.pt")
    module = torch.jit.load(str(path))
    space = model.observation_space
    space.seed(0)
    obs = {k: np.stack([space[k].sample() for _ in range(50)]) for k in space.spaces}
    got = module(*(torch.as_tensor(obs[s.name]) for s in input_specs(model))).numpy()
    np.testing.assert_allclose(got, model.predict(obs, deterministic=True)[0], atol=1e-6)


@pytest.mark.parametrize("form", ["float64", "2x2", "2x2 float64"])
def test_exports_keep_a_box_of_float64_or_of_several_dimensions(form, tmp_path):
    """The graph's actions have the action space's shape and dtype, as predict's."""
    import gymnasium as gym

    from tests.algorithms.test_action_space_forms import FLOAT32_OBS, FORMS, RecordingEnv

    space = FORMS[form]
    env = gym.wrappers.TimeLimit(RecordingEnv(FLOAT32_OBS, space), max_episode_steps=20)
    model = _with_statistics(herl.SAC("MlpPolicy", env, policy_kwargs=dict(net_arch=[16]), seed=0))
    assert check_onnx(model, model.export_onnx(tmp_path / "policy.onnx"), n_observations=200) <= 1e-5
    module = torch.jit.load(str(export_torchscript(model, tmp_path / "policy.pt")))
    obs = np.stack([FLOAT32_OBS.sample() for _ in range(5)])
    got = module(torch.as_tensor(obs)).numpy()
    expected = model.predict(obs, deterministic=True)[0]
    assert got.shape == expected.shape == (5, *space.shape) and got.dtype == expected.dtype == space.dtype
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_check_onnx_catches_a_different_model(tmp_path):
    env = PointReachEnv()
    path = herl.TD3("MultiInputPolicy", env, policy_kwargs=dict(net_arch=[16]), seed=0).export_onnx(tmp_path / "a.onnx")
    other = herl.TD3("MultiInputPolicy", env, policy_kwargs=dict(net_arch=[16]), seed=1)
    with pytest.raises(AssertionError, match="differ from predict"):
        check_onnx(other, path, n_observations=100)


def test_herl_export_command(tmp_path, capsys):
    model = herl.SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[16]), seed=0)
    model.save(tmp_path / "model.zip")
    assert main(["export", str(tmp_path / "model.zip"), "-o", str(tmp_path / "p.onnx")]) == 0
    out = capsys.readouterr().out
    assert "inputs: achieved_goal float32[batch, 2], desired_goal float32[batch, 2], observation float32[batch, 4]" in out
    assert "checked" in out
    assert main(["export", str(tmp_path / "model.zip"), "-o", str(tmp_path / "p.pt")]) == 0
    assert "TorchScript" in capsys.readouterr().out


@pytest.mark.parametrize("algo", [herl.SAC, herl.TD3], ids=lambda a: a.__name__)
def test_onnx_of_a_layer_normalized_actor_equals_predict(algo, tmp_path):
    model = _with_statistics(algo("MultiInputPolicy", PointReachEnv(dim=3), seed=0,
                                  policy_kwargs=dict(net_arch=[32, 32], layer_norm=True)))
    with torch.no_grad():  # scales and shifts away from 1 and 0, so a graph without them would differ
        for name, p in model.actor.named_parameters():
            if "norms" in name:
                p.uniform_(0.5, 1.5)
    path = model.export_onnx(tmp_path / "policy.onnx")
    assert check_onnx(model, path, n_observations=1000) <= 1e-5


def _previous_file(folder, name: str) -> tuple:
    """A file already at the export's output, and how to tell it is still there untouched with nothing beside it."""
    path = folder / name
    path.write_bytes(b"the previous export")
    return path, lambda: path.read_bytes() == b"the previous export" and [p.name for p in folder.iterdir()] == [name]


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_an_export_that_fails_midway_leaves_the_file_at_its_output(fmt, tmp_path, full_disk):
    model = herl.TD3("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[16]), seed=0)
    path, intact = _previous_file(tmp_path, f"policy.{'onnx' if fmt == 'onnx' else 'pt'}")
    full_disk(room=100)
    with pytest.raises(OSError, match="No space left on device"):
        (model.export_onnx if fmt == "onnx" else lambda p: export_torchscript(model, p))(path)
    assert intact()


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_torchscript_export_to_a_full_disk_raises_instead_of_aborting_the_process(tmp_path):
    """torch's own file writer aborts the process when a write fails (its error escapes a C++ destructor) and leaves
    the output cut short; the file-size limit makes every write past 4 KB fail, as a full disk does."""
    path, intact = _previous_file(tmp_path, "policy.pt")
    script = (
        "import resource, signal, sys\n"
        "import herl\n"
        "from herl.envs import PointReachEnv\n"
        "from herl.export import export_torchscript\n"
        "model = herl.TD3('MultiInputPolicy', PointReachEnv(), policy_kwargs=dict(net_arch=[16]), seed=0)\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
        "try:\n"
        "    export_torchscript(model, sys.argv[1])\n"
        "except OSError as err:\n"
        "    print('OSError', err.errno)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["OSError", str(errno.EFBIG)]
    assert intact()


def test_herl_export_refuses_to_write_over_the_model_it_reads(tmp_path, capsys):
    model = herl.SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[16]), seed=0)
    source = tmp_path / "model.zip"
    model.save(source)
    saved = source.read_bytes()
    os.link(source, tmp_path / "hardlink.zip")
    (tmp_path / "symlink.zip").symlink_to(source)
    for output in (source, tmp_path / "." / "model.zip", tmp_path / "hardlink.zip", tmp_path / "symlink.zip"):
        for fmt in ("onnx", "torchscript"):
            assert main(["export", str(source), "-o", str(output), "--format", fmt]) == 2
            err = capsys.readouterr().err
            assert f"-o {output} is the model being exported ({source})" in err and "write it to another file" in err
    assert source.read_bytes() == saved


def test_herl_export_refuses_to_write_over_the_files_of_the_run_it_reads(tmp_path, capsys):
    """A run folder's own files (settings, logs) and anything among its checkpoints, which herl prunes, are never an
    export's output; a new file beside them is."""
    assert main(["train", "--env", "herl/PointReach-v0", "--timesteps", "200", "--progress", "off", "--set",
                 "policy.net_arch=[16]", "--set", "checkpoint.freq=100", "--run-dir", str(tmp_path)]) == 0
    run = tmp_path / "seed_0"
    checkpoint = run / "checkpoints" / "step_000000000100"
    files = {path: path.read_bytes() for path in (run / "config.json", run / "progress.csv", checkpoint / "state.zip")}
    for source, output in ((run, run / "config.json"), (run, run / "progress.csv"),
                           (checkpoint, checkpoint / "state.zip"), (checkpoint, checkpoint / "new.onnx")):
        assert main(["export", str(source), "-o", str(output), "--format", "onnx"]) == 2
        assert f"-o {output} is a file of the run folder {run}" in capsys.readouterr().err
    assert all(path.read_bytes() == saved for path, saved in files.items()) and not (checkpoint / "new.onnx").exists()
    assert main(["export", str(run), "-o", str(run / "policy.pt")]) == 0


def test_herl_export_refuses_a_missing_folder_and_a_folder_as_its_output(tmp_path, capsys):
    model = herl.SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[16]), seed=0)
    model.save(tmp_path / "model.zip")
    assert main(["export", str(tmp_path / "model.zip"), "-o", str(tmp_path / "missing" / "p.pt")]) == 2
    assert f"the folder {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()
    assert main(["export", str(tmp_path / "model.zip"), "-o", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "model.zip"), "-o", str(tmp_path / "p.onnxx")]) == 2  # a typo: not guessed
    assert "name the file so, or say which with --format onnx or --format torchscript" in capsys.readouterr().err
    assert not (tmp_path / "p.onnxx").exists()
    assert main(["export", str(tmp_path / "model.zip"), "-o", str(tmp_path / "p.bin"), "--format", "onnx"]) == 0


def _nan_actor(model):
    with torch.no_grad():
        for p in model.actor.parameters():
            p.fill_(float("nan"))
    return model


def test_check_onnx_refuses_actions_that_are_nan(tmp_path, capsys):
    """NaN is not greater than any limit: a NaN difference once passed the check."""
    env = PointReachEnv()
    broken = _nan_actor(herl.TD3("MultiInputPolicy", env, policy_kwargs=dict(net_arch=[16]), seed=0))
    path = broken.export_onnx(tmp_path / "nan.onnx")
    with pytest.raises(AssertionError, match="hold NaN or infinity for 100 of 100 observations"):
        check_onnx(broken, path, n_observations=100)
    good = herl.TD3("MultiInputPolicy", env, policy_kwargs=dict(net_arch=[16]), seed=0)
    path = good.export_onnx(tmp_path / "good.onnx")
    with pytest.raises(AssertionError, match="differ from predict's by up to nan"):
        check_onnx(_nan_actor(good), path, n_observations=100)  # predict's actions NaN, the graph's finite
    broken.save(tmp_path / "nan.zip")
    (tmp_path / "out").mkdir()
    output, intact = _previous_file(tmp_path / "out", "policy.onnx")
    with pytest.warns(UserWarning, match="hold NaN"):
        assert main(["export", str(tmp_path / "nan.zip"), "-o", str(output)]) == 2
    assert "was not written" in capsys.readouterr().err and intact()


def test_herl_export_of_a_bfloat16_model_says_its_graph_computes_in_float32(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    model = herl.SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[16, 16], precision="bfloat16"),
                     seed=0)
    model.save(tmp_path / "model.zip")
    assert main(["export", str(tmp_path / "model.zip"), "-o", str(tmp_path / "p.onnx")]) == 0
    assert "computed in float32 as exported: this model's own predict runs its hidden layers in bfloat16" in \
        capsys.readouterr().out
