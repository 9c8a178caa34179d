"""Models and replay buffers saved to and loaded from open file objects (``io.BytesIO``, ``open(path, "rb")``), as
SB3 takes them, and ``load(..., print_system_info=True)``."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from herl import DQN, SAC, HerReplayBuffer, ReplayBuffer
from herl.envs import BitFlippingEnv
from herl.errors import ArchiveError
from herl.io.archive import read_archive, read_header, write_archive

SMALL = dict(learning_starts=10, batch_size=16, policy_kwargs=dict(net_arch=[16]), seed=0)


class OneWayStream(io.RawIOBase):
    """A stream that cannot seek (a pipe, a socket, a download)."""

    def __init__(self, data: bytes = b"") -> None:
        self._data, self.written = io.BytesIO(data), bytearray()

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        chunk = self._data.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)

    def write(self, data) -> int:
        self.written += bytes(data)
        return len(data)


@pytest.fixture(scope="module")
def trained() -> tuple[DQN, BitFlippingEnv]:
    env = BitFlippingEnv(4, max_steps=4)
    model = DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, **SMALL)
    model.learn(60)
    return model, env


def observations(env: BitFlippingEnv) -> list:
    return [env.reset(seed=s)[0] for s in range(5)]


def same_predictions(a, b, env) -> bool:
    return all(np.array_equal(a.predict(o, deterministic=True)[0], b.predict(o, deterministic=True)[0])
               for o in observations(env))


def test_a_model_saved_to_bytesio_loads_from_it_and_predicts_the_same(trained):
    model, env = trained
    stream = io.BytesIO()
    model.save(stream)
    assert stream.tell() > 0 and zipfile.is_zipfile(io.BytesIO(stream.getvalue()))
    stream.seek(0)
    loaded = DQN.load(stream)
    assert same_predictions(model, loaded, env) and loaded.num_timesteps == model.num_timesteps
    # the stream's position does not matter: the zip reader finds the archive from its end
    stream.seek(5)
    DQN.load(stream, env=env)
    # SB3's set_parameters takes a file object too
    fresh = DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, **{**SMALL, "seed": 1})
    fresh.set_parameters(io.BytesIO(stream.getvalue()))
    assert same_predictions(model, fresh, env)


def test_open_binary_files_work_and_write_the_same_bytes_as_a_path(trained, tmp_path):
    model, env = trained
    with open(tmp_path / "by_file.zip", "wb") as f:
        model.save(f)
    with open(tmp_path / "by_file.zip", "rb") as f:
        loaded = DQN.load(f, env=env)
    assert same_predictions(model, loaded, env)
    model.save(tmp_path / "by_path.zip")
    with zipfile.ZipFile(tmp_path / "by_file.zip") as a, zipfile.ZipFile(tmp_path / "by_path.zip") as b:
        assert a.read("arrays.safetensors") == b.read("arrays.safetensors")
    assert not list(tmp_path.glob(".*.tmp"))  # nothing left behind


def test_a_stream_that_cannot_seek_is_read_and_written(trained):
    model, env = trained
    out = OneWayStream()
    model.save(out)
    loaded = DQN.load(OneWayStream(bytes(out.written)))
    assert same_predictions(model, loaded, env)
    # print_system_info reads the file first: the one-way stream is read once, then loaded from memory
    assert same_predictions(model, DQN.load(OneWayStream(bytes(out.written)), print_system_info=True), env)


def test_text_mode_files_and_damaged_streams_are_refused_with_what_to_do(trained, tmp_path):
    model, _ = trained
    with open(tmp_path / "text.zip", "w") as f, pytest.raises(TypeError, match=r"text mode.*open\(path, 'wb'\)"):
        model.save(f)
    model.save(tmp_path / "model.zip")
    with open(tmp_path / "model.zip") as f, pytest.raises(TypeError, match=r"text mode.*open\(path, 'rb'\)"):
        DQN.load(f)
    with open(tmp_path / "model.zip", "rb") as f, pytest.raises(TypeError, match=r"cannot be written to.*'wb'"):
        model.save(f)
    with open(tmp_path / "other.zip", "wb") as f, pytest.raises(TypeError, match=r"cannot be read from.*'rb'"):
        DQN.load(f)
    with pytest.raises(ArchiveError, match="BytesIO file object is not a herl model file"):
        DQN.load(io.BytesIO(b"not a zip"))
    with pytest.raises(ArchiveError, match="holds a DQN model, not a SAC"):
        SAC.load(io.BytesIO((tmp_path / "model.zip").read_bytes()))


def test_an_error_while_building_the_archive_leaves_the_stream_untouched():
    stream = io.BytesIO(b"old")
    with pytest.raises(TypeError):
        write_archive(stream, kind="thing", version=1, meta={"x": object()}, arrays={})
    assert stream.getvalue() == b"old"
    stream.seek(0, io.SEEK_END)
    write_archive(stream, kind="thing", version=1, meta={"x": 1}, arrays={"a": np.arange(3)})
    meta, arrays = read_archive(stream, kind="thing", max_version=1)  # the archive after other bytes: found
    assert meta["x"] == 1 and arrays["a"].tolist() == [0, 1, 2]
    with pytest.raises(ArchiveError, match="BytesIO file object is not a herl thing file"):
        read_archive(io.BytesIO(stream.getvalue()[:-40]), kind="thing", max_version=1)  # cut short


@pytest.mark.parametrize("her", [False, True])
def test_replay_buffers_save_to_and_load_from_file_objects(her, tmp_path):
    env = BitFlippingEnv(4, max_steps=4)
    kwargs = dict(replay_buffer_class=HerReplayBuffer) if her else {}
    model = DQN("MultiInputPolicy", env, **kwargs, **SMALL)
    model.learn(30)
    stream = io.BytesIO()
    model.save_replay_buffer(stream)
    stream.seek(0)
    other = DQN("MultiInputPolicy", env, **kwargs, **SMALL)
    other.load_replay_buffer(stream, truncate_last_traj=False)  # as saved, running episodes too
    assert isinstance(other.replay_buffer, HerReplayBuffer if her else ReplayBuffer)
    assert len(other.replay_buffer) == len(model.replay_buffer) == 30
    a, b = model.replay_buffer.storage.arrays(written_only=True), other.replay_buffer.storage.arrays(written_only=True)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    with open(tmp_path / "buffer.zip", "wb") as f:
        model.replay_buffer.save(f)
    with open(tmp_path / "buffer.zip", "rb") as f:
        assert len(type(model.replay_buffer).load(f, **({"env": env} if her else {}))) == 30


def test_print_system_info_prints_this_system_and_the_saving_one(trained, tmp_path, capsys):
    model, env = trained
    model.save(tmp_path / "model.zip")
    loaded = DQN.load(tmp_path / "model", print_system_info=True)  # SB3's name without .zip works too
    out = capsys.readouterr().out
    current, _, saved = out.partition("== SAVED MODEL SYSTEM INFO ==")
    assert current.startswith("== CURRENT SYSTEM INFO ==")
    for text in (current, saved):
        for name in ("herl", "python", "numpy", "torch", "os"):
            assert f"- {name}: " in text
    assert same_predictions(model, loaded, env)
    DQN.load(tmp_path / "model.zip", print_system_info=False)
    assert capsys.readouterr().out == ""
    assert read_header(tmp_path / "model.zip")["system_info"]["herl"] == read_header(tmp_path / "model.zip")[
        "herl_version"]


def test_print_system_info_of_an_older_file_shows_its_herl_version_and_of_a_bad_file_says_why(
        trained, tmp_path, capsys):
    model, _ = trained
    model.save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:  # as written before files recorded system info
        meta = json.loads(archive.read("meta.json"))
        tensors = archive.read("arrays.safetensors")
    del meta["system_info"]
    with zipfile.ZipFile(tmp_path / "old.zip", "w") as archive:
        archive.writestr("meta.json", json.dumps(meta))
        archive.writestr("arrays.safetensors", tensors)
    DQN.load(tmp_path / "old.zip", print_system_info=True)
    saved = capsys.readouterr().out.partition("== SAVED MODEL SYSTEM INFO ==")[2]
    assert "recorded only its own version" in saved and f"- herl: {meta['herl_version']}" in saved
    (tmp_path / "bad.zip").write_bytes(b"garbage")
    with pytest.raises(ArchiveError, match="not a herl model file"):
        DQN.load(tmp_path / "bad.zip", print_system_info=True)
    assert "cannot read" in capsys.readouterr().out
