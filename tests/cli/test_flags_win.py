"""Every flag of ``herl train`` wins over a preset (docs/cli.md: later sources win: herl's defaults, the preset's
settings, its [algos.<algo>] table, the flags, --set): for each flag, a preset that sets the same thing otherwise, and
the run's config.json to show which value the run used."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from herl.cli import main

# A preset file (--config) for a run that takes a second: PointReach, SAC, 20 steps, tiny networks.
BASE_TOP: dict[str, Any] = {"description": "a preset whose settings the flags override", "envs": ["herl/PointReach-v0"],
                            "algo": "sac", "timesteps": 20, "log_interval": 5}
BASE_TABLES: dict[str, dict[str, Any]] = {
    "eval": {"freq": 0, "episodes": 1}, "checkpoint": {"freq": 0},
    "algos.sac": {"learning_starts": 10, "batch_size": 8}, "algos.sac.policy": {"net_arch": [8]},
}


def herl(*args: str | os.PathLike) -> int:
    return main([str(a) for a in args])


def preset_file(path: Path, top: dict[str, Any], tables: dict[str, dict[str, Any]]) -> Path:
    """BASE_TOP and BASE_TABLES with ``top`` and ``tables`` over them, as a preset file (JSON values are TOML's)."""
    lines = [f"{key} = {json.dumps(value)}" for key, value in {**BASE_TOP, **top}.items()]
    for name in dict.fromkeys([*BASE_TABLES, *tables]):
        lines += ["", f"[{name}]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in {**BASE_TABLES.get(name, {}),
                                                                     **tables.get(name, {})}.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


# flag: (the flag's arguments, the preset's top-level settings, its tables, what config.json holds, the flag's value)
CASES: dict[str, tuple[list[str], dict[str, Any], dict[str, dict[str, Any]], Callable[[dict], Any], Any]] = {
    "--algo": (["--algo", "td3"], {"algo": "sac"}, {"algos.td3": {"learning_starts": 10, "batch_size": 8}},
               lambda c: c["algo"], "td3"),
    "--timesteps": (["--timesteps", "30"], {"timesteps": 5_000}, {"algos.sac": {"timesteps": 4_000}},
                    lambda c: c["timesteps"], 30),
    "--n-envs": (["--n-envs", "1"], {"n_envs": 2}, {}, lambda c: c["n_envs"], 1),
    "--her": (["--her", "episode:3"], {}, {"her": {"strategy": "final", "n_sampled_goal": 2}},
              lambda c: (c["her"]["strategy"], c["her"]["n_sampled_goal"]), ("episode", 3)),
    "--no-her": (["--no-her"], {}, {"her": {"enabled": True}}, lambda c: c["her"], None),
    "--demos": (["--demos", "DEMOS"], {}, {"demos": {"path": "scripted"}}, lambda c: c["demos"]["path"], "DEMOS"),
    "--device": (["--device", "cpu"], {"device": "cuda:7"}, {}, lambda c: c["device"], "cpu"),
    "--threads": (["--threads", "1"], {"threads": 2}, {}, lambda c: c["threads"], 1),
    "--workers": (["--workers", "0"], {"workers": 2}, {}, lambda c: c["workers"], 0),
    "--seed": (["--seed", "7"], {}, {}, lambda c: c["seed"], 7),  # a preset cannot set it: check_key refuses it
    "--env": (["--env", "FetchReach-v4"], {"envs": ["herl/PointReach-v0"]}, {}, lambda c: c["env"], "FetchReach-v4"),
    "--set": (["--set", "learning_rate=0.002"], {"learning_rate": 0.01}, {"algos.sac": {"learning_rate": 0.005}},
              lambda c: c["hyperparameters"]["learning_rate"], 0.002),
    "--set over a flag": (["--timesteps", "30", "--set", "timesteps=25"], {}, {}, lambda c: c["timesteps"], 25),
}


@pytest.mark.parametrize("flag", list(CASES))
def test_a_flag_wins_over_the_preset(flag: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    args, top, tables, read, expected = CASES[flag]
    if flag == "--env":
        pytest.importorskip("gymnasium_robotics")
    if flag == "--demos":
        demos = str(request.getfixturevalue("reach_demos"))
        args, expected = [demos if a == "DEMOS" else a for a in args], demos
    config_file = preset_file(tmp_path / "preset.toml", top, tables)
    assert herl("train", "--config", config_file, "--progress", "off", "--run-dir", tmp_path / "run", *args) == 0
    (seed_dir,) = [p for p in (tmp_path / "run").iterdir() if p.is_dir()]  # beside seeds.json
    config = json.loads((seed_dir / "config.json").read_text())
    assert read(config) == expected
    if flag == "--demos":  # a preset's demonstrations replaced: the run says so
        assert any(note.startswith(f"demonstrations: {expected}, from --demos, not those of preset")
                   for note in config["notes"]), config["notes"]


def test_demos_of_a_demos_preset_are_replaced_by_the_flags(reach_demos: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A *_demos preset's scripted expert yields to --demos DIR: the run learns from DIR (nothing is recorded into
    the run folder) and says so, in its notes and on stderr."""
    pytest.importorskip("gymnasium_robotics")
    from herl.run.presets import get_preset

    assert get_preset("fetch_push_demos").common["demos.path"] == "scripted"
    record = ["record", "--env", "FetchPush-v4", "--preset", "fetch_push_demos", "--episodes", "2", "-o"]
    assert herl(*record, tmp_path / "push") == 0
    assert "env.action_repeat=1, env.time_feature=false (herl train's env with preset fetch_push_demos, tqc)" \
        in capsys.readouterr().out
    assert herl("train", "--env", "FetchPush-v4", "--preset", "fetch_push_demos", "--demos", tmp_path / "push",
                "--timesteps", "20", "--threads", "1", "--progress", "off", "--run-dir", tmp_path / "run",
                "--set", "learning_starts=10", "--set", "batch_size=8", "--set", "policy.net_arch=[8]",
                "--set", "eval.freq=0") == 0
    run = tmp_path / "run" / "seed_0"
    config = json.loads((run / "config.json").read_text())
    assert config["demos"]["path"] == str((tmp_path / "push").resolve()) and not (run / "demos").exists()
    note = ("from --demos, not those of preset 'fetch_push_demos' (100 episodes of herl's scripted expert, "
            "recorded in the run): the command line wins over a preset")
    assert any(note in n for n in config["notes"]), config["notes"]
    assert note in capsys.readouterr().err


def test_no_her_with_a_demos_preset_names_the_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_file = preset_file(tmp_path / "preset.toml", {}, {"demos": {"path": "scripted"}})
    assert herl("train", "--config", config_file, "--no-her", "--progress", "off", "--run-dir", tmp_path / "run") == 2
    assert "learns from demonstrations (demos.path=scripted), which live in the HER buffer's own store: it needs HER" \
        in capsys.readouterr().err
