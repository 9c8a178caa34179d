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


@pytest.mark.parametrize("name", ["fetch_push", "fetch_pick_and_place", "fetch_slide"])
@pytest.mark.parametrize("algo", ["tqc", "crossq"])
def test_fetch_presets_build_tqc_and_crossq_models(name: str, algo: str) -> None:
    from gymnasium import spaces

    from herl.run.config import algorithm_class

    preset = get_preset(name)
    c = build_config(algo=algo, env="FetchPush-v4", seed=0, goal_env=True, preset=name, layers=preset.layers(algo))
    space = spaces.Dict({"observation": spaces.Box(-1, 1, (25,)), "achieved_goal": spaces.Box(-1, 1, (3,)),
                         "desired_goal": spaces.Box(-1, 1, (3,))})
    model = algorithm_class(algo)("MultiInputPolicy", observation_space=space, action_space=spaces.Box(-1, 1, (4,)),
                                  policy_kwargs=c.policy.to_policy_kwargs(), **c.hyperparameters)
    # benchmarks.md §11-18's recipe (Push; PickAndPlace since §18, Slide since §22): action repeat, time feature, ...
    wide = algo == "tqc"
    assert model.config.clip_target is True
    # two hidden layers of 512 for Push since the float32 runs (research/fetch.md, "Two hidden layers")
    assert model.policy_config.critic_arch == (((512, 512) if name == "fetch_push" else (512, 512, 512)) if wide
                                               else (256, 256))
    assert model.policy_config.actor_arch == model.policy_config.critic_arch or not wide
    start = {"fetch_pick_and_place": {"grasped_start": 0.5}, "fetch_push": {"contact_start": 0.5}}  # §20, §24
    assert c.env_kwargs == ({"action_repeat": 3, "time_feature": True, **start.get(name, {})} if wide else {})
    assert c.her.desired_goal_share == (0.5 if wide else 0.0)  # ... and other episodes' desired goals (§16)
    # Slide's measured run kept the newest 100,000 transitions (§25); the others let herl size the buffer to the run
    assert c.hyperparameters.get("buffer_size") == (100_000 if wide and name == "fetch_slide" else None)
    assert model.config.n_steps == (3 if wide else 1)
    assert model.config.compile is wide  # TQC's update compiled in all three, as measured (CrossQ refuses compiling)
    assert c.policy.precision == ("auto" if wide else "float32")
    assert model.policy_config.options == ({"n_quantiles": 25} if algo == "tqc" else
                                           {"batch_norm_momentum": 0.01, "batch_norm_eps": 0.001,
                                            "renorm_warmup_steps": 10_000})


def test_fetch_push_many_envs_is_the_recipe_measured_and_chosen_by_name_only() -> None:
    """docs/benchmarks.md "FetchPush-v4 with 1,024 envs in one process": 1,024 envs in one process, 64 updates of
    batch 1,024 after each step of all of them, plain TQC + HER; FetchPush-v4 alone still gets fetch_push."""
    preset = get_preset("fetch_push_many_envs")
    c = build_config(algo=preset.algo, env="FetchPush-v4", seed=0, goal_env=True, preset=preset.name,
                     layers=preset.layers(preset.algo))
    assert (c.algo, c.n_envs, c.vector_env, c.timesteps, c.threads) == ("tqc", 1024, "sync", 409_600, 2)
    hp = c.hyperparameters
    assert (hp["train_freq"], hp["gradient_steps"], hp["batch_size"], hp["learning_starts"]) == (1, 64, 1024, 20_480)
    assert hp["clip_target"] is True and "n_steps" not in hp and c.env_kwargs == {}
    assert (c.her.strategy, c.her.n_sampled_goal, c.her.desired_goal_share) == ("future", 4, 0.0)
    assert tuple(c.policy.net_arch) == (256, 256, 256) and c.policy.precision == "auto"
    assert preset_for_env("FetchPush-v4").name == "fetch_push"


def test_fetch_pick_and_place_many_envs_is_the_push_recipe_with_grasped_starts() -> None:
    """docs/benchmarks.md "FetchPickAndPlace-v4 with 1,024 envs in one process": fetch_push_many_envs's settings with
    half of the training episodes started grasped; FetchPickAndPlace-v4 alone still gets fetch_pick_and_place."""
    configs = []
    for name, env in (("fetch_push_many_envs", "FetchPush-v4"), ("fetch_pick_and_place_many_envs", "FetchPickAndPlace-v4")):
        preset = get_preset(name)
        configs.append(build_config(algo=preset.algo, env=env, seed=0, goal_env=True, preset=preset.name,
                                    layers=preset.layers(preset.algo)))
    push, pick = configs
    assert pick.env_kwargs == {"grasped_start": 0.5} and push.env_kwargs == {}
    assert (pick.algo, pick.n_envs, pick.timesteps, pick.threads, pick.hyperparameters, pick.policy, pick.her) == (
        push.algo, push.n_envs, push.timesteps, push.threads, push.hyperparameters, push.policy, push.her)
    assert preset_for_env("FetchPickAndPlace-v4").name == "fetch_pick_and_place"


def test_algorithm_policy_settings_reach_the_model_or_are_refused() -> None:
    c = config({"policy.n_quantiles": 10, "top_quantiles_to_drop_per_net": 1}, algo="tqc")
    assert c.policy.to_policy_kwargs()["n_quantiles"] == 10 and c.hyperparameters["top_quantiles_to_drop_per_net"] == 1
    assert config({"policy.renorm_warmup_steps": 5}, algo="crossq").policy.to_policy_kwargs()["renorm_warmup_steps"] == 5
    crossq = config({"policy.batch_norm_eps": 1e-5, "policy.batch_norm_momentum": 0.1}, algo="crossq")
    assert crossq.policy.to_policy_kwargs()["batch_norm_eps"] == 1e-5
    with pytest.raises(CLIError, match=r"read by CrossQ only, not tqc"):
        config({"policy.batch_norm_eps": 1e-5}, algo="tqc")
    with pytest.raises(CLIError, match="unknown key 'top_quantiles_to_drop_per_net'"):
        config({"top_quantiles_to_drop_per_net": 1}, algo="sac")
    # another algorithm's policy option is named as its, and left out of this algorithm's valid keys
    with pytest.raises(CLIError, match=r"policy.n_quantiles in .* is read by TQC only, not dqn: .* --algo tqc"):
        config({"policy.n_quantiles": 5}, algo="dqn", goal_env=False)
    with pytest.raises(CLIError, match=r"read by CrossQ only, not sac"):
        config({"policy.renorm_warmup_steps": 5}, algo="sac")
    from herl.run.config import valid_keys

    assert "policy.n_quantiles" in valid_keys("tqc") and "policy.dueling" in valid_keys("dqn")
    assert not {"policy.n_quantiles", "policy.dueling", "policy.renorm_warmup_steps"} & set(valid_keys("sac"))


@pytest.mark.parametrize(("text", "match"), [
    ('algo = "sac"\nlearning_rate = inf\n', "learning_rate=inf"),
    ('algo = "sac"\n[policy]\nnet_arch = 64\n', "net_arch=64"),
    ('algo = "td3"\n[policy]\nn_critics = 0\n', "n_critics=0"),
    ('algo = "sac"\ntrain_freq = 0\n', "train_freq"),
])
def test_a_preset_is_checked_by_the_rules_of_the_constructor_and_of_set(text: str, match: str) -> None:
    """One validation path for the Python API, --set, presets and model files."""
    preset = parse_preset("mine", text)
    with pytest.raises(CLIError, match=match):
        build_config(algo=preset.algo, env="herl/PointReach-v0", seed=0, goal_env=True, preset="mine",
                     layers=preset.layers(preset.algo))


def test_policy_layer_norm_takes_true_false_or_critic() -> None:
    assert config({"policy.layer_norm": True}).policy.to_policy_kwargs()["layer_norm"] is True
    assert config({"policy.layer_norm": "critic"}, algo="tqc").policy.to_policy_kwargs()["layer_norm"] == "critic"
    assert "layer_norm" not in config().policy.to_policy_kwargs()
    c = config({"policy.layer_norm": "critic"})
    assert TrainConfig.from_json(c.to_json()) == c
    with pytest.raises(CLIError, match="layer_norm='actor' is not allowed: layer_norm must be True .* 'critic'"):
        config({"policy.layer_norm": "actor"})
    with pytest.raises(CLIError, match="CrossQ.*batch-renormalized"):
        config({"policy.layer_norm": True}, algo="crossq")


# docs/benchmarks.md "FetchPush-v4 with scripted demonstrations" and "HER + demonstrations: FetchPickAndPlace":
# [256, 256, 256], no action repeat, BC + Q-filter; the env's own preset stays pure RL
@pytest.mark.parametrize("env, own, demos", [("FetchPush-v4", "fetch_push", "fetch_push_demos"),
                                             ("FetchPickAndPlace-v4", "fetch_pick_and_place",
                                              "fetch_pick_and_place_demos")])
def test_the_demonstrations_presets_are_chosen_by_name_only_and_record_the_scripted_expert(env: str, own: str,
                                                                                             demos: str) -> None:
    assert preset_for_env(env).name == own
    preset = get_preset(demos)
    c = build_config(algo="tqc", env=env, seed=0, goal_env=True, preset=preset.name, layers=preset.layers("tqc"))
    assert c.demos is not None and c.demos.path == "scripted" and c.hyperparameters["bc_loss_weight"] == 1.0
    assert c.policy.net_arch == (256, 256, 256) and c.env_kwargs == {} and c.timesteps == 100_000
    assert c.her.desired_goal_share == 0.0


def test_net_arch_takes_a_table_of_the_actors_and_the_critics_layers() -> None:
    """``--set 'policy.net_arch={pi=[...],qf=[...]}'`` and ``net_arch = {pi = [...], qf = [...]}`` in a preset: the
    Python API's ``dict(pi=..., qf=...)``; a part left out keeps the algorithm's default."""
    from herl import TQC
    from herl.run.presets import format_preset

    c = config(parse_assignment_dict("policy.net_arch={pi=[32,32],qf=[64,64,64]}"), algo="tqc")
    assert c.policy.net_arch == {"pi": (32, 32), "qf": (64, 64, 64)}
    assert c.policy.to_policy_kwargs()["net_arch"] == {"pi": [32, 32], "qf": [64, 64, 64]}
    assert TrainConfig.from_json(c.to_json()) == c
    model = TQC("MultiInputPolicy", None, observation_space=_goal_space(), action_space=_box(2),
                policy_kwargs=c.policy.to_policy_kwargs())
    assert model.policy_config.actor_arch == (32, 32) and model.policy_config.critic_arch == (64, 64, 64)
    partial = config({"policy.net_arch": {"qf": [16]}}, algo="crossq").policy.to_policy_kwargs()
    from herl import CrossQ
    assert CrossQ("MultiInputPolicy", None, observation_space=_goal_space(), action_space=_box(2),
                  policy_kwargs=partial).policy_config.actor_arch == (256, 256)  # CrossQ's default actor
    text = format_preset(description="d", envs=["X-v0"], algo="tqc", settings={"policy.net_arch": c.policy.net_arch})
    preset = parse_preset("mine", text)
    assert build_config(algo="tqc", env="X-v0", seed=0, goal_env=True, preset="mine",
                        layers=preset.layers("tqc")).policy == c.policy
    with pytest.raises(CLIError, match=r"parts \['vf'\]: a table of net_arch takes pi .* and qf"):
        config({"policy.net_arch": {"pi": [8], "vf": [8]}})
    with pytest.raises(CLIError, match=r"policy.net_arch.qf=\[0\] is not allowed"):
        config({"policy.net_arch": {"qf": [0]}})


def parse_assignment_dict(text: str) -> dict:
    key, value = parse_assignment(text)
    return {key: value}


def _box(n: int):
    import gymnasium as gym
    import numpy as np

    return gym.spaces.Box(-1, 1, (n,), np.float32)


def _goal_space():
    import gymnasium as gym

    return gym.spaces.Dict({"observation": _box(5), "achieved_goal": _box(2), "desired_goal": _box(2)})
