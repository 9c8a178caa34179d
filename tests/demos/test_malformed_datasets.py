"""Malformed demonstration datasets: every error names the file, the episode and the field, and the shape and dtype
expected (it was a NumPy broadcast error or a KeyError); an HDF5 file whose data lives in other files is refused
before any data is read (external storage pointing at /etc/hostname made its bytes rewards). Fuzzed: a mutated
dataset loads, or is refused with herl's own error."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herl import HerReplayBuffer
from herl.cli import main
from herl.demos import DatasetError, Demonstrations, generate_expert_traj, load_minari
from herl.demos.dataset import as_demonstrations, from_episodes
from herl.envs import PointReachEnv
from herl.errors import HerlError, NonFiniteError

h5py = pytest.importorskip("h5py")
pytest.importorskip("minari")

EPISODE = 10


def reach_expert(obs):
    return np.clip(10.0 * (obs["desired_goal"] - obs["achieved_goal"]), -1.0, 1.0).astype(np.float32)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demos") / "reach"
    generate_expert_traj(reach_expert, path, PointReachEnv(max_episode_steps=EPISODE), n_episodes=3, seed=0)
    return path


def edited(dataset: Path, folder: Path, edit) -> Path:
    """A copy of ``dataset`` whose HDF5 file ``edit(file)`` changed; returns the copy's path."""
    copy = folder / "copy"
    shutil.copytree(dataset, copy)
    with h5py.File(copy / "data" / "main_data.hdf5", "a") as file:
        edit(file)
    return copy


def replace(file, name: str, data) -> None:
    del file[name]
    file[name] = data


def load(demonstrations: Path | Demonstrations):
    env = PointReachEnv(max_episode_steps=EPISODE)
    return HerReplayBuffer(1000, env.observation_space, env.action_space, env=env,
                           demonstrations=str(demonstrations) if isinstance(demonstrations, Path) else demonstrations)


# (edit, what the message must say after "FILE: episode N", besides "expected")
CASES = {
    "one row short": (lambda f: replace(f, "episode_1/observations/observation", f["episode_1/observations/observation"][:-1]),
                      1, r"observation 'observation' has shape \(10, 4\), expected shape \(11, 4\) of float32 \(one row "
                         r"per step and the last observation; the episode has 10 actions\)"),
    "no desired_goal": (lambda f: f.__delitem__("episode_2/observations/desired_goal"),
                        2, r"/episode_2/observations/desired_goal is missing; expected an array of shape \(steps \+ 1, "
                           r"2\) of float32"),
    "rewards short": (lambda f: replace(f, "episode_0/rewards", f["episode_0/rewards"][:-3]),
                      0, r"rewards has shape \(7,\), expected shape \(10,\) of float32"),
    "actions wide": (lambda f: replace(f, "episode_1/actions", np.zeros((EPISODE, 5), np.float32)),
                     1, r"actions has shape \(10, 5\), expected shape \(10, 2\) of float32"),
    "text rewards": (lambda f: replace(f, "episode_0/rewards", np.array([b"x"] * EPISODE)),
                     0, r"rewards holds \|S1 values, not numbers; expected numbers"),
    "extra key": (lambda f: f.__setitem__("episode_0/observations/velocity", np.zeros(EPISODE + 1)),
                  0, r"/episode_0/observations holds the key\(s\) \['velocity'\], which the dataset's observation space "
                     r"lacks"),
    "no rewards": (lambda f: f.__delitem__("episode_2/rewards"),
                   2, r"/episode_2/rewards is missing; expected an array of shape \(steps,\) of numbers"),
    "scalar observation": (lambda f: replace(f, "episode_0/observations/achieved_goal", np.float32(1)),
                           0, r"/episode_0/observations/achieved_goal is a single value; expected an array of shape "
                              r"\(steps \+ 1, 2\) of float32"),
    "episode missing": (lambda f: f.__delitem__("episode_2"),
                        2, r"/episode_2 is missing, but the metadata counts 3 or more episodes"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_hdf5_dataset_names_file_episode_field_and_what_was_expected(dataset, tmp_path, case):
    edit, episode, says = CASES[case]
    path = edited(dataset, tmp_path, edit)
    with pytest.raises(DatasetError) as info:
        load(path)
    message = str(info.value)
    file = path / "data" / "main_data.hdf5"
    assert re.match(rf"{re.escape(str(file))}: episode {episode}: {says}", message), message


def test_nan_in_a_dataset_names_file_episode_field_and_step(dataset, tmp_path):
    def poison(file):
        values = file["episode_1/observations/desired_goal"][:]
        values[4, 1] = np.nan
        replace(file, "episode_1/observations/desired_goal", values)

    path = edited(dataset, tmp_path, poison)
    with pytest.raises(NonFiniteError, match=rf"^{re.escape(str(path / 'data' / 'main_data.hdf5'))}: episode 1: "
                                             r"observation 'desired_goal' holds NaN or infinity at step 4"):
        load_minari(path)


def _external_storage(target: Path):
    def edit(file):
        size = file["episode_0/rewards"].shape[0] * 4
        del file["episode_0/rewards"]
        file.create_dataset("episode_0/rewards", shape=(size // 4,), dtype="<f4", external=[(str(target), 0, size)])
    return edit


def _virtual(target: Path):
    def edit(file):
        layout = h5py.VirtualLayout(shape=(EPISODE,), dtype="<f4")
        layout[:] = h5py.VirtualSource(str(target), "data", shape=(EPISODE,))
        del file["episode_1/rewards"]
        file.create_virtual_dataset("episode_1/rewards", layout)
    return edit


def _external_link(target: Path):
    def edit(file):
        del file["episode_2/rewards"]
        file["episode_2/rewards"] = h5py.ExternalLink(str(target), "/data")
    return edit


def _dangling_soft_link(target: Path):
    def edit(file):
        del file["episode_0/truncations"]
        file["episode_0/truncations"] = h5py.SoftLink("/nowhere/truncations")
    return edit


@pytest.mark.parametrize("edit, where, says", [
    (_external_storage, "/episode_0/rewards", r"keeps its data outside the file \(external storage in {target}\)"),
    (_virtual, "/episode_1/rewards", r"is a virtual dataset, made of data in other files"),
    (_external_link, "/episode_2/rewards", r"is an external link to {target}:/data"),
    (_dangling_soft_link, "/episode_0/truncations", r"is a soft link to /nowhere/truncations, which is not in the file"),
], ids=["external storage", "virtual dataset", "external link", "soft link leading out"])
def test_hdf5_data_from_other_files_is_refused_before_any_is_read(dataset, tmp_path, monkeypatch, edit, where, says):
    target = tmp_path / "secret.bin"  # as /etc/hostname was: its bytes became the rewards
    target.write_bytes(np.arange(EPISODE, dtype="<f4").tobytes())
    with h5py.File(tmp_path / "other.h5", "w") as other:
        other["data"] = np.arange(EPISODE, dtype="<f4")
    target = target if edit is _external_storage else tmp_path / "other.h5"
    path = edited(dataset, tmp_path, edit(target))
    from minari.dataset._storages.hdf5_storage import HDF5Storage

    def no_reading(*args, **kwargs):
        raise AssertionError("episode data was read")

    monkeypatch.setattr(HDF5Storage, "get_episodes", no_reading)
    with pytest.raises(DatasetError) as info:
        load(path)
    message = str(info.value)
    assert message.startswith(f"{path / 'data' / 'main_data.hdf5'}: {where} "), message
    assert re.search(says.format(target=re.escape(str(target))), message), message
    assert "herl reads only data held in main_data.hdf5 itself" in message and "before any of its data was read" in message


def test_a_soft_link_within_the_file_is_read(dataset, tmp_path):
    def link(file):
        file["spare/rewards"] = file["episode_0/rewards"][:]
        del file["episode_0/rewards"]
        file["episode_0/rewards"] = h5py.SoftLink("/spare/rewards")

    expected = load_minari(dataset)
    loaded = load_minari(edited(dataset, tmp_path, link))
    np.testing.assert_array_equal(loaded.rewards, expected.rewards)


def test_a_demonstrations_object_is_checked_naming_the_field(dataset):
    demos = load_minari(dataset)
    assert demos.source == str(dataset / "data" / "main_data.hdf5")
    short = dataclasses.replace(demos, source=None, next_observations={
        **demos.next_observations, "observation": demos.next_observations["observation"][:-1]})
    with pytest.raises(DatasetError, match=r"^the demonstrations: next observation 'observation' has shape \(29, 4\), "
                                           r"expected shape \(30, 4\) of float32 \(one row per step; the demonstrations "
                                           r"hold 30 actions\)"):
        as_demonstrations(short)
    no_goal = dataclasses.replace(demos, observations={k: v for k, v in demos.observations.items() if k != "desired_goal"})
    with pytest.raises(DatasetError, match=r"the observations lack the key 'desired_goal'; expected it as an array of "
                                           r"shape \(steps, 2\) of float32"):
        load(no_goal)  # was a KeyError from the replay buffer
    starts = dataclasses.replace(demos, episode_starts=np.array([0, 20, 40]))
    with pytest.raises(DatasetError, match=r"episode_starts \[0, 20, 40\] is not the row of each episode's first step"):
        load(starts)
    bad = demos.actions.copy()
    bad[23, 1] = np.inf
    with pytest.raises(NonFiniteError, match=r"actions holds NaN or infinity in episode 2, at step 3 \(row 23\)"):
        load(dataclasses.replace(demos, actions=bad))
    huge = {**demos.observations, "observation": demos.observations["observation"].astype(np.float64)}
    huge["observation"][12, 0] = 1e300
    with pytest.raises(NonFiniteError, match=r"observation 'observation' holds 1e\+300 in episode 1, at step 2 \(row 12\), "
                                             r"which overflows float32"):
        load(dataclasses.replace(demos, observations=huge))


def test_episodes_in_memory_are_named_by_index_and_id():
    env = PointReachEnv(max_episode_steps=EPISODE)
    space = env.observation_space

    def episode(steps: int, **changes):
        base = dict(observations={k: np.zeros((steps + 1, *s.shape), np.float32) for k, s in space.spaces.items()},
                    actions=np.zeros((steps, 2), np.float32), rewards=np.zeros(steps), terminations=np.zeros(steps),
                    truncations=np.zeros(steps))
        return {**base, **changes}

    good = [episode(3), episode(4)]
    assert from_episodes(good, space, env.action_space).n_episodes == 2
    with pytest.raises(DatasetError, match=r"^episode 1 \(id 7\) has no 'rewards'"):
        from_episodes([episode(3), {**{k: v for k, v in episode(4).items() if k != "rewards"}, "id": 7}],
                      space, env.action_space)
    with pytest.raises(DatasetError, match=r"^data.h5: episode 0: the observations lack the key 'achieved_goal'; "
                                           r"expected it as an array of shape \(steps \+ 1, 2\) of float32"):
        from_episodes([episode(3, observations={k: np.zeros((4, 2)) for k in ("observation", "desired_goal")})],
                      space, env.action_space, source="data.h5")
    with pytest.raises(DatasetError, match=r"^episode 0: actions holds object values, not numbers"):
        from_episodes([episode(2, actions=np.array([None, None]))], space, env.action_space)


def test_herl_train_demos_reports_a_malformed_dataset_in_one_line(dataset, tmp_path, capsys):
    path = edited(dataset, tmp_path, CASES["one row short"][0])
    code = main(["train", "--env", "herl/PointReach-v0", "--algo", "sac", "--timesteps", "100", "--progress", "off",
                 "--demos", str(path), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    line = next(line for line in err.splitlines() if line.startswith("herl train: error:"))
    assert f"{path / 'data' / 'main_data.hdf5'}: episode 1: observation 'observation' has shape (10, 4)" in line


# ------------------------------------------------------------------------------------------------------------ fuzzed
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
FIELDS = ["observations/observation", "observations/achieved_goal", "observations/desired_goal", "actions", "rewards",
          "terminations", "truncations"]
MUTATIONS = ["delete", "drop_row", "add_row", "add_column", "scalar", "text", "nan", "huge", "group", "object"]


def _mutate(file, name: str, mutation: str, rng: np.random.Generator) -> None:
    values = file[name][()]
    if mutation == "delete":
        del file[name]
    elif mutation == "drop_row":
        replace(file, name, values[:-1])
    elif mutation == "add_row":
        replace(file, name, np.concatenate([values, values[-1:]]))
    elif mutation == "add_column":
        replace(file, name, np.stack([values, values], axis=-1))
    elif mutation == "scalar":
        replace(file, name, values.reshape(-1)[0])
    elif mutation == "text":
        replace(file, name, np.array([b"text"] * len(values)))
    elif mutation in ("nan", "huge"):
        values = values.astype(np.float64)
        values.reshape(-1)[rng.integers(values.size)] = np.nan if mutation == "nan" else 1e300
        replace(file, name, values)
    elif mutation == "group":
        del file[name]
        file.create_group(name)["x"] = values
    elif mutation == "object":
        del file[name]
        file[name] = h5py.SoftLink("/" + name.replace("/", "_") + "_missing")


@FUZZ
@given(changes=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(FIELDS), st.sampled_from(MUTATIONS)),
                        min_size=1, max_size=3), seed=st.integers(0, 2**16))
def test_fuzzed_datasets_load_or_are_refused_naming_the_file(dataset, tmp_path_factory, changes, seed):
    rng = np.random.default_rng(seed)
    folder = tmp_path_factory.mktemp("fuzz")

    def edit(file):
        for episode, field, mutation in changes:
            name = f"episode_{episode}/{field}"
            if name in file and isinstance(file.get(name, getlink=True), h5py.HardLink) \
                    and isinstance(file[name], h5py.Dataset):
                _mutate(file, name, mutation, rng)

    path = edited(dataset, folder, edit)
    try:
        demos = load_minari(path)
    except HerlError as err:  # DatasetError or NonFiniteError: never NumPy's, h5py's or a KeyError
        assert isinstance(err, (DatasetError, NonFiniteError))
        assert str(err).startswith(str(path / "data" / "main_data.hdf5")), err
        assert re.search(r"(episode \d|/episode_\d)", str(err)), err
        return
    demos.validate()  # what loads is consistent
    assert isinstance(demos, Demonstrations) and len(demos) == sum(np.diff([*demos.episode_starts, len(demos)]))


@FUZZ
@given(changes=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(
    ["observations", "actions", "rewards", "terminations", "truncations", "id"]), st.sampled_from(
    ["delete", "drop_row", "add_row", "scalar", "text", "nan", "none", "ragged"])), min_size=1, max_size=3))
def test_fuzzed_episodes_in_memory_build_or_are_refused_naming_the_episode(changes):
    env = PointReachEnv(max_episode_steps=EPISODE)
    space = env.observation_space
    episodes = [dict(observations={k: np.zeros((6, *s.shape), np.float32) for k, s in space.spaces.items()},
                     actions=np.zeros((5, 2), np.float32), rewards=np.zeros(5), terminations=np.zeros(5),
                     truncations=np.zeros(5), id=i) for i in range(3)]
    for index, field, mutation in changes:
        episode = episodes[index]
        value = episode.get(field)
        target = value["observation"] if isinstance(value, dict) else value
        if mutation == "delete":
            episode.pop(field, None)
        elif mutation == "none":
            episode[field] = None
        elif mutation == "text":
            episode[field] = "text"
        elif mutation == "ragged":
            episode[field] = [[1.0], [1.0, 2.0]]
        elif isinstance(target, np.ndarray):
            new = {"drop_row": target[:-1], "add_row": np.concatenate([target, target[-1:]]),
                   "scalar": target.reshape(-1)[0], "nan": np.full_like(target, np.nan, dtype=np.float64)}[mutation]
            if isinstance(value, dict):
                value["observation"] = new
            else:
                episode[field] = new
    try:
        demos = from_episodes(episodes, space, env.action_space)
    except (DatasetError, NonFiniteError) as err:
        assert re.match(r"episode \d", str(err)), err
        return
    demos.validate()
