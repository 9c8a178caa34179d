"""What herl's files hold and how they are written: buffers keep only the rows written, files get the
permissions of new files, and version-1 buffer files (every row) still load."""

from __future__ import annotations

import os

import numpy as np

import pytest

from herl import SAC, HerReplayBuffer, ReplayBuffer
from herl.envs import BitFlippingEnv
from herl.io import space_to_json, write_archive


def _filled(capacity: int, steps: int = 300) -> HerReplayBuffer:
    env = BitFlippingEnv(n_bits=8, continuous=True)
    buffer = HerReplayBuffer(capacity, env.observation_space, env.action_space, env=env, seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        next_obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        buffer.add(obs, next_obs, np.zeros(8, np.float32), reward, terminated=terminated, truncated=truncated)
        obs = env.reset()[0] if terminated or truncated else next_obs
    return buffer


def test_a_saved_buffer_holds_the_rows_written_not_its_capacity(tmp_path):
    buffer = _filled(1_000_000)
    buffer.save(tmp_path / "b.zip")
    assert (tmp_path / "b.zip").stat().st_size < 100_000  # was ~100 MB: a million rows of zeros
    loaded = HerReplayBuffer.load(tmp_path / "b.zip", env=BitFlippingEnv(n_bits=8, continuous=True))
    assert loaded.storage.rows == 1_000_000 and len(loaded) == len(buffer) == 300
    for name, array in buffer.storage.arrays().items():
        np.testing.assert_array_equal(loaded.storage.arrays()[name], array, err_msg=name)


def test_version_1_buffer_files_with_every_row_still_load(tmp_path):
    buffer = _filled(500, steps=60)
    arrays = {f"storage/{k}": v for k, v in buffer.storage.arrays().items()}  # every row, as version 1 wrote them
    meta = {"class": "HerReplayBuffer", "config": buffer._config(), "rng_state": buffer.rng.bit_generator.state,
            "observation_space": space_to_json(buffer.observation_space), "action_space": space_to_json(buffer.action_space)}
    write_archive(tmp_path / "v1.zip", kind=buffer.FILE_KIND, version=1, meta=meta, arrays=arrays)
    loaded = HerReplayBuffer.load(tmp_path / "v1.zip", env=BitFlippingEnv(n_bits=8, continuous=True))
    assert len(loaded) == 60
    loaded.sample(16)


def test_saved_files_get_the_permissions_of_new_files(tmp_path):
    mask = os.umask(0o022)
    try:
        buffer = ReplayBuffer(10, BitFlippingEnv().observation_space, BitFlippingEnv().action_space)
        buffer.save(tmp_path / "b.zip")
        assert (tmp_path / "b.zip").stat().st_mode & 0o777 == 0o644  # not tempfile's private 0600
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        os.chmod(tmp_path / "b.zip", 0o600)  # made private by its owner: saving over it keeps it private
        buffer.save(tmp_path / "b.zip")
        assert (tmp_path / "b.zip").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(mask)


def test_a_file_from_before_a_default_changed_keeps_its_behaviour(tmp_path):
    # squash_eps became a field with default 0 (the exact log-determinant), then took SB3's 1e-6: a model file or
    # run config without the field must go on computing what it computed when it was written
    import json
    import zipfile

    from herl import SAC, TQC
    from herl.envs import PointReachEnv
    from herl.run.config import NoiseSettings, TrainConfig
    from herl.run.train import read_config

    assert SAC("MultiInputPolicy", PointReachEnv()).config.squash_eps == 1e-6
    path = TQC("MultiInputPolicy", PointReachEnv(), seed=0).save(tmp_path / "m")
    path = tmp_path / "m.zip"
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    meta = json.loads(members["meta.json"])
    del meta["config"]["squash_eps"]
    members["meta.json"] = json.dumps(meta).encode()
    old = tmp_path / "old.zip"
    with zipfile.ZipFile(old, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    assert TQC.load(old).config.squash_eps == 0.0
    assert TQC.load(path).config.squash_eps == 1e-6  # a file that has the field keeps its value

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = TrainConfig(algo="sac", env="herl/PointReach-v0", hyperparameters={"learning_rate": 1e-3},
                         noise=NoiseSettings(type="none"))
    (run_dir / "config.json").write_text(json.dumps(config.to_json()))
    assert read_config(run_dir).hyperparameters == {"learning_rate": 1e-3, "squash_eps": 0.0}


def test_save_replay_buffer_writes_the_stored_rows_only(tmp_path):
    env = BitFlippingEnv(n_bits=8, continuous=True)
    model = SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, buffer_size=1_000_000, learning_starts=50,
                batch_size=8, policy_kwargs=dict(net_arch=[8]), seed=0)
    model.learn(60)
    model.save_replay_buffer(tmp_path / "b.zip")
    assert (tmp_path / "b.zip").stat().st_size < 100_000  # 60 rows, not a million
    model.load_replay_buffer(tmp_path / "b.zip")
    assert len(model.replay_buffer) == 60 and model.replay_buffer.storage.rows == 1_000_000


@pytest.mark.skipif(not hasattr(os, "fchmod"), reason="POSIX permissions")
def test_model_and_buffer_files_are_fsynced_before_the_rename_with_new_file_permissions(tmp_path, monkeypatch):
    """As checkpoints are: the bytes are on disk before the rename makes them the file, so a power cut leaves the old
    file or the new one, never an empty one; then the folder, so the rename itself lasts; and the file is readable as
    any new file is (not mkstemp's 0600)."""
    import stat

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        mode = os.fstat(fd).st_mode
        events.append(("fsync", "folder" if stat.S_ISDIR(mode) else mode & 0o777))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", lambda src, dst: (events.append(("replace", os.path.basename(dst))),
                                                         real_replace(src, dst))[1])
    mask = os.umask(0o022)
    try:
        env = BitFlippingEnv(n_bits=4, continuous=True)
        model = SAC("MultiInputPolicy", env, learning_starts=8, batch_size=8, policy_kwargs=dict(net_arch=[8]))
        model.learn(10)
        model.save(tmp_path / "m.zip")
        model.save_replay_buffer(tmp_path / "b.zip")
    finally:
        os.umask(mask)
    assert events == [("fsync", 0o644), ("replace", "m.zip"), ("fsync", "folder"),
                      ("fsync", 0o644), ("replace", "b.zip"), ("fsync", "folder")]
    assert all((tmp_path / name).stat().st_mode & 0o777 == 0o644 for name in ("m.zip", "b.zip"))


def _writers(tmp_path):
    """Each kind of file herl writes, by a name, with the call that writes it to a path."""
    from herl.run.checkpoint import atomic_write_text
    from herl.run.runlog import ResumableCSV

    env = BitFlippingEnv(n_bits=4, continuous=True)
    model = SAC("MultiInputPolicy", env, learning_starts=8, batch_size=8, policy_kwargs=dict(net_arch=[8]), seed=0)
    model.learn(10)

    def progress(path):  # a resumed run's log: its rows so far are written again, then a new column rewrites it
        log = ResumableCSV(path, keep_until=10**9)
        log.write({"time/total_timesteps": 10, "a": 1}, 10)
        log.write({"time/total_timesteps": 20, "a": 2, "b": 3}, 20)  # a new column: the file is rewritten
        log.close()

    return {"model.zip": model.save, "buffer.zip": model.save_replay_buffer, "progress.csv": progress,
            "latest.json": lambda path: atomic_write_text(path, '{"step": 10, "path": "step_000000000010"}')}


@pytest.mark.parametrize("name", ["model.zip", "buffer.zip", "latest.json", "progress.csv"])
def test_a_write_that_fails_midway_leaves_the_previous_file_and_no_temporary_file(tmp_path, full_disk, name):
    folder = tmp_path / "out"
    folder.mkdir()
    write = _writers(tmp_path)[name]
    write(folder / name)
    before = (folder / name).read_bytes()
    full_disk(room=10)  # the disk fills 10 bytes into the next file
    with pytest.raises(OSError, match="No space left on device"):
        write(folder / name)
    assert (folder / name).read_bytes() == before
    assert [p.name for p in folder.iterdir()] == [name]


def test_atomic_path_replaces_the_file_only_when_its_writer_succeeds(tmp_path):
    """For writers that take a path (matplotlib, imageio): the temporary file can end like the target, so a writer
    that picks its format by the suffix picks the right one."""
    from herl.io.atomic import atomic_path, atomic_write

    target = atomic_write(tmp_path / "curves.png", b"previous")
    with pytest.raises(RuntimeError, match="the writer failed"), atomic_path(target, suffix=True) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".curves.png.") and tmp.suffix == ".png"
        tmp.write_bytes(b"half an im")
        raise RuntimeError("the writer failed")
    assert target.read_bytes() == b"previous" and [p.name for p in tmp_path.iterdir()] == ["curves.png"]
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["curves.png"]
    with pytest.raises(FileNotFoundError, match=f"cannot write .*: the folder {tmp_path / 'missing'} does not exist"):
        atomic_write(tmp_path / "missing" / "x.json", "{}")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        atomic_write(tmp_path, "{}")
