"""Mutated model and buffer files: each one is either loaded and usable, or refused with herl's own error
type (:class:`herl.errors.HerlError`). Never a hang (every case runs under a time limit), never a raw exception from
numpy, torch, zipfile or json. Bounded to about 20 s in all (hypothesis' example counts below)."""

from __future__ import annotations

import copy
import io
import json
import os
import signal
import sys
import warnings
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herl import SAC, HerReplayBuffer, ReplayBuffer
from herl.envs import BitFlippingEnv
from herl.errors import HerlError
from herl.io.archive import ARRAYS_NAME, META_NAME
from safetensors.numpy import load as load_arrays
from safetensors.numpy import save as save_arrays

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the per-case time limit uses SIGALRM")
TIME_LIMIT = 10.0  # seconds per case; a load takes ~20 ms
# HERL_FUZZ_EXAMPLES=2000 for a long sweep with fresh random cases; the suite's default stays within seconds.
EXAMPLES = int(os.environ.get("HERL_FUZZ_EXAMPLES", 0)) or 60
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize="HERL_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    def alarm(signum, frame):
        raise Hang(f"a case ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------------------------------------- the files
@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("valid")
    env = BitFlippingEnv(n_bits=4, continuous=True)
    model = SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, learning_starts=8, batch_size=8,
                buffer_size=200, policy_kwargs=dict(net_arch=[8]), seed=0)
    model.learn(30)  # episodes of 4 steps: some closed, one open
    model.save(folder / "model.zip")
    model.save_replay_buffer(folder / "her.zip")
    plain = ReplayBuffer(64, env.observation_space, env.action_space, prioritized=True, n_envs=2, seed=0)
    obs = {k: np.stack([v, v]) for k, v in env.reset(seed=0)[0].items()}
    for t in range(40):
        plain.add(obs, obs, np.zeros((2, 4), np.float32), np.ones(2), terminated=np.array([t % 5 == 4, False]))
    plain.save(folder / "plain.zip")
    return {name: (folder / name).read_bytes() for name in ("model.zip", "her.zip", "plain.zip")}


def _unpack(data: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return json.loads(archive.read(META_NAME)), load_arrays(archive.read(ARRAYS_NAME))


def _pack(meta: object, arrays: dict[str, np.ndarray]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(META_NAME, json.dumps(meta))
        archive.writestr(ARRAYS_NAME, save_arrays({k: np.ascontiguousarray(v) for k, v in arrays.items()}))
    return out.getvalue()


def _use(kind: str, path: Path) -> None:
    """Load the file and use it as a user would."""
    env = BitFlippingEnv(n_bits=4, continuous=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NaN weights warn, by design
        if kind == "model.zip":
            model = SAC.load(path, device="cpu")
            obs = {k: np.stack([v, v]) for k, v in env.reset(seed=0)[0].items()}
            model.predict(obs, deterministic=True)
            model.predict(obs, deterministic=False)
            return
        buffer = (HerReplayBuffer.load(path, env=env, device="cpu") if kind == "her.zip"
                  else ReplayBuffer.load(path, device="cpu"))
        if len(buffer):
            batch = buffer.sample(16)
            # usable: a buffer that checks what is added samples no NaN (one once loaded from a file did, silently)
            sampled = [batch.rewards, batch.actions, *batch.observations.values(), *batch.next_observations.values()]
            assert not buffer.check_finite or all(torch.isfinite(t).all() for t in sampled), "sampled NaN or inf"
        obs = {k: np.stack([v] * buffer.n_envs) for k, v in env.reset(seed=0)[0].items()}
        buffer.add(obs, obs, np.zeros((buffer.n_envs, 4), np.float32), np.zeros(buffer.n_envs),
                   terminated=np.ones(buffer.n_envs, bool))
        buffer.sample(4)


def _check(kind: str, data: bytes, tmp_path: Path) -> None:
    path = tmp_path / kind
    path.write_bytes(data)
    try:
        with time_limit(TIME_LIMIT):
            _use(kind, path)
    except HerlError:
        pass  # refused with a message of herl's


# ---------------------------------------------------------------------------------------------------------- mutations
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=8,
)
SPECIAL = st.sampled_from([0, -1, 1, 2**40, 10**12, 10**13, 10**4000, -(2**63), 0.5, float("nan"), float("inf"), "3", "",
                           None, [], {}, True])


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list) and len(value) <= 8:
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


@st.composite
def meta_mutation(draw, meta: dict) -> dict:
    meta = copy.deepcopy(meta)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(meta) if p and p[:1] not in (("format",), ("kind",))]
        path = draw(st.sampled_from(paths))
        parent = meta
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and draw(st.booleans()) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(SPECIAL | JSON_VALUES)
    return meta


@st.composite
def array_mutation(draw, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    arrays = dict(arrays)
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(arrays)))
        array = arrays[name].copy()
        how = draw(st.sampled_from(["value", "value", "value", "shape", "dtype", "drop"]))
        if how == "drop":
            del arrays[name]
            continue
        if how == "shape":
            array = np.zeros(draw(st.lists(st.integers(0, 5), max_size=3)), array.dtype)
        elif how == "dtype":
            array = array.astype(draw(st.sampled_from([np.float64, np.int32, np.bool_, np.uint8])))
        elif array.size:
            index = draw(st.integers(0, array.size - 1))
            if array.dtype.kind == "f":
                value = draw(st.sampled_from([np.nan, np.inf, -1.0, 1e30, 0.0]) | st.floats(-10, 10))
            elif array.dtype.kind == "b":
                value = not array.flat[index]
            else:
                info = np.iinfo(array.dtype)
                value = draw(st.sampled_from([info.min, info.max, -1, 0, 1]) | st.integers(-3, 300))
                value = int(np.clip(value, info.min, info.max))
            array.flat[index] = value
        arrays[name] = array
    return arrays


@pytest.mark.parametrize("kind", ["model.zip", "her.zip", "plain.zip"])
def test_mutated_metadata_is_loaded_and_usable_or_refused(files, kind, tmp_path):
    meta, arrays = _unpack(files[kind])

    @FUZZ
    @given(mutated=meta_mutation(meta))
    def case(mutated):
        _check(kind, _pack(mutated, arrays), tmp_path)

    case()


@pytest.mark.parametrize("kind", ["model.zip", "her.zip", "plain.zip"])
def test_mutated_arrays_are_loaded_and_usable_or_refused(files, kind, tmp_path):
    meta, arrays = _unpack(files[kind])

    @FUZZ
    @given(mutated=array_mutation(arrays))
    def case(mutated):
        _check(kind, _pack(meta, mutated), tmp_path)

    case()


@pytest.mark.parametrize("kind", ["model.zip", "her.zip"])
def test_mutated_bytes_are_loaded_and_usable_or_refused(files, kind, tmp_path):
    data = files[kind]

    @settings(FUZZ, max_examples=EXAMPLES * 2 // 3)
    @given(flips=st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(1, 255)), min_size=1, max_size=4),
           cut=st.none() | st.integers(0, len(data)))
    def case(flips, cut):
        mutated = bytearray(data)
        for at, xor in flips:
            mutated[at] ^= xor
        _check(kind, bytes(mutated[:cut] if cut is not None else mutated), tmp_path)

    case()


def test_a_decompression_bomb_is_refused_before_it_is_read(tmp_path):
    from herl.errors import ArchiveError

    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(META_NAME, json.dumps({"format": "herl", "kind": "model", "format_version": 1}))
        archive.writestr(ARRAYS_NAME, b"\0" * 200_000_000)  # 200 MB of zeros: ~200 KB compressed
    assert path.stat().st_size < 1_000_000
    with pytest.raises(ArchiveError, match="decompression bomb"):
        SAC.load(path)


def test_absurd_spaces_and_folders_are_refused(files, tmp_path):
    from herl.errors import ArchiveError

    meta, arrays = _unpack(files["model.zip"])
    meta["action_space"] = {"type": "Discrete", "n": 10**12}
    path = tmp_path / "m.zip"
    path.write_bytes(_pack(meta, arrays))
    with pytest.raises(ArchiveError, match="Discrete n must be a whole number in"):
        SAC.load(path)
    with pytest.raises(ArchiveError, match="is a folder"):
        SAC.load(tmp_path)


def test_settings_that_say_where_training_writes_are_not_taken_from_a_file(files, tmp_path):
    from herl.errors import ArchiveError

    meta, arrays = _unpack(files["model.zip"])
    meta["config"]["tensorboard_log"] = "/tmp/elsewhere"
    path = tmp_path / "m.zip"
    path.write_bytes(_pack(meta, arrays))
    with pytest.raises(ArchiveError, match="tensorboard_log"):
        SAC.load(path)


def test_nan_weights_warn(files, tmp_path):
    meta, arrays = _unpack(files["model.zip"])
    name = next(k for k in arrays if k.startswith("nets/actor/"))
    arrays[name] = np.full_like(arrays[name], np.nan)
    path = tmp_path / "m.zip"
    path.write_bytes(_pack(meta, arrays))
    with pytest.warns(UserWarning, match=r"the weights of \['actor'\] hold NaN"):
        SAC.load(path)


def test_a_buffer_file_whose_bookkeeping_lies_is_refused_not_sampled_forever(files, tmp_path):
    from herl.errors import CorruptFileError

    meta, arrays = _unpack(files["her.zip"])
    rows = arrays["storage/episode_rows"].copy()
    rows[0, 0, 1] += 1  # the first episode's first row now claims one more transition than its other rows do
    arrays["storage/episode_rows"] = rows
    path = tmp_path / "b.zip"
    path.write_bytes(_pack(meta, arrays))
    with pytest.raises(CorruptFileError, match="the saved buffer is inconsistent"):
        HerReplayBuffer.load(path, env=BitFlippingEnv(n_bits=4, continuous=True))
    buffer = HerReplayBuffer.load(_write(tmp_path, files["her.zip"]), env=BitFlippingEnv(n_bits=4, continuous=True))
    buffer.storage.is_transition[:] = False  # what no check on load can see any more: sampling still ends
    buffer.storage.n_transitions -= 1
    with pytest.raises(CorruptFileError, match="book-keeping contradicts its rows"), time_limit(TIME_LIMIT):
        buffer.sample(8)


def _drop(name):
    return lambda meta, arrays: meta.pop(name)


def _set(*path_and_value):
    *path, value = path_and_value

    def mutate(meta, arrays):
        for key in path[:-1]:
            meta = meta[key]
        meta[path[-1]] = value
    return mutate


@pytest.mark.parametrize(("mutate", "match"), [
    (_drop("policy"), "lacks its 'policy' field"),
    (_set("policy", 3), "'policy' field is a int"),
    (_drop("algorithm"), "lacks its 'algorithm' field"),
    (_set("algorithm", ["SAC"]), "'algorithm' field is a list"),
    (_set("format_version", "1"), "format version '1'"),
    (_set("counters", "num_timesteps", "12"), "counters must be whole numbers"),
    (_set("rng_state", "state", "x"), r"random generator state \(rng_state\) is missing or damaged"),
    (_drop("rng_state"), r"random generator state \(rng_state\) is missing or damaged"),
    (_set("config", "learning_rate", float("inf")), "learning_rate=inf is not allowed"),
    (_set("config", "train_freq", 0), "train_freq=.* is not allowed"),
    (_set("policy_kwargs", "n_critics", 0), "n_critics=0 is not allowed"),
    (_set("config", "verbose", 2), r"holds \['verbose'\], which are not SAC hyperparameters"),
    (lambda meta, arrays: arrays.update({"nets/actor/net.layers.0.weight": np.zeros((3, 8), np.float32)}),
     "do not fit a SAC with the saved settings"),
], ids=["no policy", "policy int", "no algorithm", "algorithm list", "version string", "counters strings",
        "rng state", "no rng state", "learning_rate inf", "train_freq 0", "n_critics 0", "verbose", "tensor shape"])
def test_each_named_damage_to_a_model_file_is_refused_naming_the_field(files, tmp_path, mutate, match):
    """The issue's list, one by one (the fuzz tests above draw them at random): each is an ArchiveError naming what
    is wrong; hyperparameters are checked by the same rules as the constructor's (one validation path)."""
    from herl.errors import ArchiveError

    meta, arrays = _unpack(files["model.zip"])
    mutate(meta, arrays)
    path = tmp_path / "m.zip"
    path.write_bytes(_pack(meta, arrays))
    with pytest.raises(ArchiveError, match=match):
        SAC.load(path, device="cpu")


@pytest.mark.parametrize(("mutate", "match"), [
    (lambda meta, arrays: arrays.update({"storage/counters": np.array([1.5, 2.0, 3.0])}), "counters"),
    (_set("rng_state", "state", {"state": "x"}), r"random generator state \(rng_state\)"),
    (_set("format_version", "2"), "format version '2'"),
    (_set("config", "buffer_size", "200"), "buffer_size='200' is not allowed"),
    (_set("config", "buffer_size", 10**13), r"claims buffer_size=10,000,000,000,000, storage of .* bytes, more than "
                                           r"this machine's"),
    (lambda meta, arrays: arrays["storage/transition/reward"].__setitem__((3, 0), np.nan),
     r"storage/transition/reward holds NaN or infinity at row 3 \(env 0\)"),
    (lambda meta, arrays: arrays["storage/transition/action"].__setitem__((5, 0, 1), -np.inf),
     r"storage/transition/action holds NaN or infinity at row 5"),
], ids=["counters floats", "rng state", "version string", "buffer_size string", "buffer_size 1e13", "nan reward",
        "inf action"])
def test_each_named_damage_to_a_buffer_file_is_refused_naming_the_field(files, tmp_path, mutate, match):
    meta, arrays = _unpack(files["her.zip"])
    arrays = {k: v.copy() for k, v in arrays.items()}  # writable
    mutate(meta, arrays)
    path = tmp_path / "b.zip"
    path.write_bytes(_pack(meta, arrays))
    with pytest.raises(HerlError, match=match):  # ArchiveError, or ConfigError for a setting (the constructor's rules)
        HerReplayBuffer.load(path, env=BitFlippingEnv(n_bits=4, continuous=True))


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "valid.zip"
    path.write_bytes(data)
    return path


def test_nan_in_a_buffer_saved_without_the_finiteness_check_loads_as_saved(files, tmp_path):
    """check_finite=False stores NaN on purpose: such a file loads, NaN and all (nothing a user saved is changed)."""
    meta, arrays = _unpack(files["plain.zip"])
    meta["config"]["check_finite"] = False
    arrays = {k: v.copy() for k, v in arrays.items()}
    arrays["storage/transition/reward"][3, 1] = np.nan
    path = tmp_path / "b.zip"
    path.write_bytes(_pack(meta, arrays))
    assert np.isnan(ReplayBuffer.load(path, device="cpu").storage.transitions["reward"][3, 1]).all()


def _raw_meta(data: bytes, edit) -> bytes:
    """The archive ``data`` with its meta.json's text passed through ``edit`` (for what json.dumps cannot write)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as archive:
        archive.writestr(META_NAME, edit(source.read(META_NAME).decode()))
        archive.writestr(ARRAYS_NAME, source.read(ARRAYS_NAME))
    return out.getvalue()


@pytest.mark.parametrize("kind", ["model.zip", "her.zip", "plain.zip"])
def test_a_number_beyond_pythons_digit_limit_is_refused_naming_the_file(files, kind, tmp_path):
    from herl.errors import ArchiveError

    path = tmp_path / kind
    path.write_bytes(_raw_meta(files[kind], lambda text: text.replace('"format_version": ', '"format_version": '
                                                                      + "7" * 5000, 1)))
    with pytest.raises(ArchiveError, match=rf"{path}: its meta.json is damaged \(it holds a whole number of more "
                                           r"than 4,300 digits\)"):
        _use(kind, path)


@pytest.mark.parametrize("kind", ["model.zip", "her.zip", "plain.zip"])
def test_a_zip_whose_members_say_they_are_encrypted_is_refused(files, kind, tmp_path):
    """zipfile would ask for a password (a RuntimeError): the flag bit is set in the local and central headers."""
    from herl.errors import ArchiveError

    data = bytearray(files[kind])
    for signature, flag_offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(signature)
        while at >= 0:
            data[at + flag_offset] |= 0x1
            at = data.find(signature, at + 4)
    with pytest.raises(ArchiveError, match="its meta.json is encrypted, which herl files never are"):
        _use(kind, _write(tmp_path, bytes(data)))
    from herl.io.archive import read_header

    with pytest.raises(ArchiveError, match="encrypted"):
        read_header(_write(tmp_path, bytes(data)))
