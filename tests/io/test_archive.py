"""herl.io: zip archives of JSON and safetensors (never pickle), and gymnasium spaces as JSON."""

from __future__ import annotations

import json
import os
import pickle
import zipfile

import numpy as np
import pytest
from gymnasium import spaces

from herl.io import ArchiveError, read_archive, space_from_json, space_to_json, write_archive


def arrays():
    return {
        "a/x": np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": np.array([True, False]),
        "c": np.array([[1, -2]], dtype=np.int64),
        "d": np.arange(6, dtype=np.uint8).reshape(2, 3)[:, ::2],  # not contiguous
    }


def test_round_trip(tmp_path):
    path = write_archive(tmp_path / "sub" / "f.herl", kind="thing", version=2, meta={"x": [1, 2], "s": "é"},
                         arrays=arrays())
    assert path.is_file()
    header, loaded = read_archive(path, kind="thing", max_version=2)
    assert header["x"] == [1, 2] and header["s"] == "é"
    assert header["format"] == "herl" and header["kind"] == "thing" and header["format_version"] == 2
    assert "herl_version" in header
    assert loaded.keys() == arrays().keys()
    for name, array in arrays().items():
        assert loaded[name].dtype == array.dtype
        np.testing.assert_array_equal(loaded[name], array)


def test_members_are_json_and_safetensors(tmp_path):
    path = write_archive(tmp_path / "f", kind="thing", version=1, meta={}, arrays=arrays())
    with zipfile.ZipFile(path) as archive:
        assert sorted(archive.namelist()) == ["arrays.safetensors", "meta.json"]
        json.loads(archive.read("meta.json"))


def test_kind_and_version_are_checked(tmp_path):
    path = write_archive(tmp_path / "f", kind="thing", version=3, meta={}, arrays=arrays())
    with pytest.raises(ArchiveError, match="'thing'.*not a 'other'"):
        read_archive(path, kind="other", max_version=3)
    with pytest.raises(ArchiveError, match="upgrade herl"):
        read_archive(path, kind="thing", max_version=2)


def test_archive_error_is_a_value_error():
    assert issubclass(ArchiveError, ValueError)


@pytest.mark.parametrize("content", [b"", b"hello", b"PK\x03\x04garbage", bytes(range(256)) * 10])
def test_non_archives_are_rejected(tmp_path, content):
    path = tmp_path / "f"
    path.write_bytes(content)
    with pytest.raises(ArchiveError, match="not a herl"):
        read_archive(path, kind="thing", max_version=1)


def test_truncated_archives_are_rejected(tmp_path):
    path = write_archive(tmp_path / "f", kind="thing", version=1, meta={"a": 1}, arrays=arrays())
    data = path.read_bytes()
    for cut in range(0, len(data), max(1, len(data) // 17)):
        path.write_bytes(data[:cut])
        with pytest.raises(ArchiveError):
            read_archive(path, kind="thing", max_version=1)


def test_damaged_members_are_rejected(tmp_path):
    def archive_with(meta: bytes, tensors: bytes):
        path = tmp_path / "m.zip"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("meta.json", meta)
            archive.writestr("arrays.safetensors", tensors)
        return path

    good = write_archive(tmp_path / "good", kind="thing", version=1, meta={}, arrays=arrays())
    with zipfile.ZipFile(good) as archive:
        meta, tensors = archive.read("meta.json"), archive.read("arrays.safetensors")
    with pytest.raises(ArchiveError, match="meta.json is damaged"):
        read_archive(archive_with(b"{not json", tensors), kind="thing", max_version=1)
    with pytest.raises(ArchiveError, match="meta.json is damaged"):
        read_archive(archive_with(b"\xff\xfe\x00", tensors), kind="thing", max_version=1)
    with pytest.raises(ArchiveError, match="arrays.safetensors is damaged"):
        read_archive(archive_with(meta, tensors[:40]), kind="thing", max_version=1)
    with pytest.raises(ArchiveError, match="arrays.safetensors is damaged"):
        read_archive(archive_with(meta, pickle.dumps({"a": np.zeros(3)})), kind="thing", max_version=1)
    with pytest.raises(ArchiveError, match="not a herl archive"):
        read_archive(archive_with(json.dumps({"format": "other"}).encode(), tensors), kind="thing", max_version=1)


def test_a_zip_without_our_members_is_rejected(tmp_path):
    path = tmp_path / "sb3.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data", "{}")
    with pytest.raises(ArchiveError, match="lacks meta.json or arrays.safetensors"):
        read_archive(path, kind="thing", max_version=1)


def test_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_archive(tmp_path / "none", kind="thing", max_version=1)


def test_a_failed_write_leaves_the_previous_file_intact(tmp_path, monkeypatch):
    path = write_archive(tmp_path / "f", kind="thing", version=1, meta={"v": 1}, arrays=arrays())
    before = path.read_bytes()
    real = zipfile.ZipFile.writestr
    calls = []

    def failing(self, name, data, *args, **kwargs):
        calls.append(name)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(self, name, data, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "writestr", failing)
    with pytest.raises(OSError, match="disk full"):
        write_archive(path, kind="thing", version=1, meta={"v": 2}, arrays=arrays())
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["f"]  # no temporary file left behind


def test_unserializable_meta_leaves_no_file(tmp_path):
    with pytest.raises(TypeError):
        write_archive(tmp_path / "f", kind="thing", version=1, meta={"x": object()}, arrays=arrays())
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------------- spaces
SPACES = [
    spaces.Box(-1.5, 2.0, (3,), np.float32),
    spaces.Box(low=np.array([-np.inf, 0.0]), high=np.array([np.inf, 1.0]), dtype=np.float64),
    spaces.Box(0, 255, (1, 4, 4), np.uint8),
    spaces.Discrete(7),
    spaces.Discrete(5, start=-2),
    spaces.MultiBinary(6),
    spaces.MultiBinary([2, 3]),
    spaces.MultiDiscrete([3, 4, 2]),
    spaces.Dict({
        "observation": spaces.Box(-1, 1, (4,), np.float32),
        "achieved_goal": spaces.MultiBinary(3),
        "desired_goal": spaces.MultiBinary(3),
        "nested": spaces.Dict({"d": spaces.Discrete(2)}),
    }),
]


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_spaces_round_trip_through_json(space):
    data = json.loads(json.dumps(space_to_json(space)))
    restored = space_from_json(data)
    assert restored == space
    if isinstance(space, spaces.Box):
        assert restored.dtype == space.dtype
        np.testing.assert_array_equal(restored.low, space.low)
        np.testing.assert_array_equal(restored.high, space.high)


def test_unsupported_spaces_say_so():
    with pytest.raises(TypeError, match="cannot save"):
        space_to_json(spaces.Tuple([spaces.Discrete(2)]))
    with pytest.raises(ValueError, match="unknown space"):
        space_from_json({"type": "Graph"})
