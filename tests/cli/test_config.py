"""Settings: dotted keys, TOML values, layers, presets, and the run config's JSON round trip."""

from __future__ import annotations

import pytest

from herl.run.config import TrainConfig, build_config, parse_assignment, parse_her, parse_value
from herl.run.errors import CLIError, MissingExtraError
from herl.run.presets import get_preset, parse_preset, preset_for_env


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e-3", 1e-3), ("1e6", 1e6), ("1_000", 1000), ("true", True), ("True", True), ("none", None),
     ("[64, 64]", [64, 64]), ("final", "final"), ('"a b"', "a b"), ("auto_0.1", "auto_0.1"), ("-1", -1)],
)
def test_values_read_as_toml_else_text(text: str, value: object) -> None:
    assert parse_value(text) == value


def test_assignments_need_an_equals_sign() -> None:
    assert parse_assignment(" batch_size = 64 ") == ("batch_size", 64)
    with pytest.raises(CLIError, match="key=value"):
        parse_assignment("batch_size")


def config(*layers: dict, algo: str = "sac", goal_env: bool = True) -> TrainConfig:
    return build_config(algo=algo, env="X-v0", seed=3, goal_env=goal_env, preset=None,
                        layers=[(f"layer {i}", layer) for i, layer in enumerate(layers)])


def test_later_layers_win_and_values_take_the_settings_type() -> None:
    c = config({"learning_rate": 1, "buffer_size": 1e6, "eval.freq": 100, "env.n": 1},
               {"learning_rate": 5e-4, "policy.net_arch": [64, 64], "env.n": 2, "clip_target": [-20, 0]})
    assert c.hyperparameters == {"learning_rate": 5e-4, "buffer_size": 1_000_000, "clip_target": (-20, 0)}
    assert isinstance(c.hyperparameters["buffer_size"], int)
    assert c.policy.net_arch == (64, 64) and c.eval.freq == 100 and c.env_kwargs == {"n": 2} and c.seed == 3


def test_her_auto_follows_the_env() -> None:
    assert config().her is not None
    assert config(goal_env=False).her is None
    assert config({"her.enabled": False}).her is None
    assert config({"her.enabled": True}, goal_env=False).her is not None  # then check_her_env says what is missing
    assert config(parse_her("episode:8")).her.n_sampled_goal == 8
    with pytest.raises(CLIError, match="STRATEGY:K"):
        parse_her("future:many")


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        ({"exploration_fraction": 0.1}, "unknown key 'exploration_fraction'"),  # a DQN setting given to SAC
        ({"eval.frequency": 1}, "did you mean eval.freq"),
        ({"timesteps": 0}, "timesteps=0 is not allowed: timesteps must be an integer >= 1"),
        ({"batch_size": "many"}, "batch_size must be a number"),
        ({"noise.type": "pink"}, "noise.type must be one of"),
        ({"eval.deterministic": "yes"}, "eval.deterministic must be true or false"),
    ],
)
def test_bad_settings_are_refused(layer: dict, message: str) -> None:
    with pytest.raises(CLIError, match=message):
        config(layer)


def test_config_json_round_trip() -> None:
    c = config({"policy.net_arch": [8], "her.strategy": "final", "env.n_bits": 4})
    assert TrainConfig.from_json(c.to_json()) == c
    assert TrainConfig.from_json(config(goal_env=False).to_json()).her is None


def test_presets_match_env_ids() -> None:
    assert preset_for_env("FetchReach-v4").name == "fetch_reach"
    assert preset_for_env("FetchPush-v1").name == "fetch_push"
    assert preset_for_env("herl/BitFlipping-v0").algo == "dqn"
    assert preset_for_env("mymodule:herl/PointReach-v0").name == "point_reach"
    assert preset_for_env("CartPole-v1") is None
    assert get_preset("fetch_reach").per_algo["sac"]["policy.net_arch"] == [64, 64]


def test_a_broken_preset_file_says_where() -> None:
    with pytest.raises(CLIError, match="unknown table \\[evaluation\\]"):
        parse_preset("mine", 'algo = "sac"\n[evaluation]\nfreq = 1\n')
    with pytest.raises(CLIError, match="algo must be one of"):
        parse_preset("mine", 'algo = "ppo"\n')
    with pytest.raises(CLIError, match="not valid TOML"):
        parse_preset("mine", "algo = sac")


def test_missing_extra_survives_pickling() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(MissingExtraError("Panda envs", "panda-gym", "panda")))
    assert "pip install 'herl[panda]'" in str(error) and error.extra == "panda"
