"""What Stable-Baselines3 users read and call beyond learn/predict: file names, ``custom_objects``, and the
model's attributes (``policy``, ``learning_rate``, ``ep_info_buffer``, ...)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from herl import DDPG, DQN, SAC, TD3, HerReplayBuffer, ReplayBuffer
from herl.envs import BitFlippingEnv
from herl.training.logger import Logger

SMALL = dict(learning_starts=10, batch_size=16, policy_kwargs=dict(net_arch=[16]), seed=0)


def test_save_name_writes_name_zip_and_load_name_finds_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = BitFlippingEnv(4, max_steps=4)
    model = DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, **SMALL)
    model.save("./her_bit_env")
    assert (tmp_path / "her_bit_env.zip").is_file() and not (tmp_path / "her_bit_env").exists()
    loaded = DQN.load("./her_bit_env", env=env)
    obs, _ = env.reset(seed=0)
    assert loaded.predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]
    # a path with a suffix is written as given, and read as given
    model.save(tmp_path / "model.v1")
    assert (tmp_path / "model.v1").is_file()
    DQN.load(tmp_path / "model.v1")
    # set_parameters reads files the same way
    loaded.set_parameters("her_bit_env")
    with pytest.raises(FileNotFoundError, match="missing"):
        DQN.load("missing")


def test_custom_objects_replace_what_the_file_holds_and_ignore_the_rest(tmp_path):
    model = SAC("MultiInputPolicy", BitFlippingEnv(4, continuous=True), **SMALL)
    model.save(tmp_path / "sac")
    # what rl-zoo's enjoy script passes to every algorithm
    zoo = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0,
           "exploration_schedule": lambda _: 0.0}
    loaded = SAC.load(tmp_path / "sac", custom_objects=zoo)
    assert loaded.learning_rate == model.learning_rate  # a herl file holds a number, nothing to stand in for
    loaded = SAC.load(tmp_path / "sac", custom_objects={"batch_size": 8, "gamma": 0.9, "not_saved": 1})
    assert loaded.config.batch_size == 8 and loaded.config.gamma == 0.9
    # keyword overrides stay strict: a typo is an error that names it
    with pytest.raises(TypeError, match="not_saved"):
        SAC.load(tmp_path / "sac", not_saved=1)


def test_a_learning_rate_schedule_to_the_constructor_is_sb3s_schedule():
    """SB3 takes learning_rate=fn (progress remaining, 1 -> 0): the optimizers start at fn(1) and each train call
    sets the rate from fn, as model.lr_schedule = fn does on a model built with the number fn(1)."""
    sb3 = pytest.importorskip("stable_baselines3")
    env = BitFlippingEnv(4, continuous=True, max_steps=4)

    def linear(progress):
        return 1e-3 * progress

    given = SAC("MultiInputPolicy", env, learning_rate=linear, **SMALL)
    assert given.learning_rate == 1e-3 and given.optimizers["optimizer"].param_groups[0]["lr"] == 1e-3
    set_after = SAC("MultiInputPolicy", env, learning_rate=1e-3, **SMALL)
    set_after.lr_schedule = linear
    theirs = sb3.SAC("MultiInputPolicy", env, learning_rate=linear, **SMALL)
    for model in (given, set_after, theirs):
        model.learn(60)
    rates = [g["lr"] for opt in (given.optimizers["optimizer"], set_after.optimizers["optimizer"],
                                 theirs.actor.optimizer, theirs.critic.optimizer) for g in opt.param_groups]
    assert given._current_progress_remaining == theirs._current_progress_remaining < 1
    assert rates == pytest.approx([linear(theirs._current_progress_remaining)] * len(rates))
    for key, value in given.policy.state_dict().items():
        assert torch.equal(value, set_after.policy.state_dict()[key]), key


def test_a_function_passed_again_on_load_keeps_the_saved_buffer_settings(tmp_path):
    """Files hold no code: a compute_reward (or a compute_terminated, in-memory demonstrations) goes to load with
    replay_buffer_kwargs=, which replaces the entries it gives and keeps the saved n_sampled_goal and strategy."""
    env = BitFlippingEnv(4, continuous=True, max_steps=4)
    calls = []

    def reward(achieved_goal, desired_goal, info):
        calls.append(len(achieved_goal))
        return env.compute_reward(achieved_goal, desired_goal, info)

    kwargs = dict(n_sampled_goal=2, goal_selection_strategy="final", compute_reward=reward)
    SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=kwargs, **SMALL).save(
        tmp_path / "sac")
    loaded = SAC.load(tmp_path / "sac", env=env, replay_buffer_kwargs=dict(compute_reward=reward))
    assert loaded.replay_buffer.n_sampled_goal == 2 and loaded.replay_buffer_kwargs["goal_selection_strategy"] == "final"
    calls.clear()
    loaded.learn(30)
    assert calls  # the function given is the one that relabels
    # naming an entry replaces it
    loaded = SAC.load(tmp_path / "sac", env=env, replay_buffer_kwargs=dict(compute_reward=reward, n_sampled_goal=6))
    assert loaded.replay_buffer.n_sampled_goal == 6


@pytest.mark.parametrize("model_class, names", [
    (SAC, ("actor", "critic", "critic_target")),
    (TD3, ("actor", "actor_target", "critic", "critic_target")),
    (DDPG, ("actor", "actor_target", "critic", "critic_target")),
    (DQN, ("q_net", "q_net_target")),
])
def test_model_policy_is_a_module_with_sb3_names_state_dict_and_predict(model_class, names):
    env = BitFlippingEnv(4, continuous=model_class is not DQN, max_steps=4)
    model = model_class("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, **SMALL)
    policy = model.policy
    assert isinstance(policy, nn.Module)
    for name in names:
        assert isinstance(getattr(policy, name), nn.Module)
        assert getattr(policy, name) is getattr(model, name)
    state = policy.state_dict()
    assert any(key.startswith(names[0] + ".") for key in state) and all(torch.is_tensor(v) for v in state.values())
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(policy.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
    policy.set_training_mode(False)
    assert not policy.training
    assert model.policy_name == "MultiInputPolicy"


@pytest.mark.parametrize("model_class", [SAC, DQN])
def test_get_parameters_lists_each_weight_once_and_gives_sb3s_policy_entry(model_class):
    env = BitFlippingEnv(4, continuous=model_class is not DQN, max_steps=4)
    a, b = (model_class("MultiInputPolicy", env, **{**SMALL, "seed": seed}) for seed in (0, 1))
    params = a.get_parameters()
    # SB3's own test_save_load walks the entries, changes every tensor but each entry's last, and drops the last
    # entry to see exact_match refuse it: that needs each weight listed once
    tensors = [t for name, state in params.items() if not name.endswith(".optimizer") for t in state.values()]
    assert "policy" not in params and len({t.data_ptr() for t in tensors}) == len(tensors)
    with pytest.raises(ValueError, match="lack"):
        b.set_parameters(dict(list(params.items())[:-1]), exact_match=True)
    # params["policy"] is SB3's entry: every network by model.policy's names; changed, it is what set_parameters loads
    policy = params["policy"]
    assert policy.keys() == a.policy.state_dict().keys() and "policy" in params and params.get("policy") is policy
    key = next(k for k in policy if k.endswith("weight"))
    policy[key] = policy[key] + 1.0
    b.set_parameters(params, exact_match=True)
    assert torch.equal(b.policy.state_dict()[key], a.policy.state_dict()[key] + 1.0)
    b.set_parameters({"policy": a.get_parameters()["policy"]}, exact_match=False)
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(b.predict(obs, deterministic=True)[0], a.predict(obs, deterministic=True)[0])
    assert a.get_parameters().get("missing") is None


def test_sb3_attributes_users_read_after_learning():
    env = BitFlippingEnv(4, max_steps=4)
    model = DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, learning_rate=5e-4, **SMALL)
    model.learn(60)
    assert model.learning_rate == 5e-4
    assert isinstance(model.replay_buffer, HerReplayBuffer) and len(model.replay_buffer) == 60
    assert isinstance(model.logger, Logger)
    assert model.ep_info_buffer and all(set(e) >= {"r", "l"} for e in model.ep_info_buffer)
    assert len(model.ep_success_buffer) == len(model.ep_info_buffer)
    assert set(model.ep_success_buffer) <= {0.0, 1.0}


def test_use_sde_true_is_refused_with_what_to_use_and_false_is_accepted():
    env = BitFlippingEnv(4, continuous=True)
    with pytest.raises(ValueError, match="use_sde=True.*action_noise"):
        SAC("MultiInputPolicy", env, use_sde=True)
    SAC("MultiInputPolicy", env, use_sde=False, sde_sample_freq=-1, use_sde_at_warmup=False)
    with pytest.raises(ValueError, match="use_sde=True"):
        SAC("MultiInputPolicy", env, policy_kwargs=dict(use_sde=True))


def test_random_action_prob_for_sac_replaces_that_share_of_exploration_actions():
    env = BitFlippingEnv(4, continuous=True)
    obs = {k: np.repeat(v[None], 2000, 0) for k, v in env.reset(seed=0)[0].items()}
    for p in (0.0, 0.3, 1.0):
        model = SAC("MultiInputPolicy", env, random_action_prob=p, learning_starts=0, seed=0)
        with torch.no_grad():  # a policy that always acts tanh(5) with (almost) no spread
            for param in model.actor.parameters():
                param.zero_()
            bias = list(model.actor.parameters())[-1]
            bias[:4], bias[4:] = 5.0, -20.0
        policy_like = np.all(model._collect_actions(obs) > 0.99, axis=1).mean()
        assert policy_like == pytest.approx(1 - p, abs=0.04)
    with pytest.raises(ValueError, match="random_action_prob"):
        SAC("MultiInputPolicy", env, random_action_prob=1.5)


def test_plain_replay_buffer_models_have_the_same_attributes():
    model = TD3("MultiInputPolicy", BitFlippingEnv(4, continuous=True), **SMALL)
    assert isinstance(model.replay_buffer, ReplayBuffer) and model.policy.actor is model.actor


class ScaledReach(BitFlippingEnv):
    """A reward scaled by a number of the step's info, written as SB3 users write it: one info dict from step(), a
    sequence of the stored info dicts from the HER buffer."""

    def __init__(self):
        super().__init__(4, continuous=True, max_steps=4)
        self.scale = 1.0

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.scale = 3.0 - self.scale  # 2, 1, 2, ...
        info["scale"] = self.scale
        return obs, reward * self.scale, terminated, truncated, info

    def compute_reward(self, achieved_goal, desired_goal, info):
        base = super().compute_reward(achieved_goal, desired_goal, info)
        if isinstance(info, dict):
            return base * info.get("scale", 1.0)
        return base * np.array([row.get("scale", 1.0) for row in info])


@pytest.mark.parametrize("library", ["herl", "sb3"])
def test_an_sb3_compute_reward_reads_copied_infos_by_row(library):
    """With copy_info_dict, SB3 hands compute_reward an array of the stored info dicts; herl's info reads the same
    way (and by entry, info["scale"]), so the env above relabels alike in both libraries."""
    sb3 = pytest.importorskip("stable_baselines3")
    lib = sb3 if library == "sb3" else __import__("herl")
    env = ScaledReach()
    model = lib.SAC("MultiInputPolicy", env, replay_buffer_class=lib.HerReplayBuffer,
                    replay_buffer_kwargs=dict(copy_info_dict=True), **SMALL)
    model.learn(40)
    batch = model.replay_buffer.sample(256, env=None) if library == "sb3" else model.replay_buffer.sample(256)
    rewards = np.asarray(batch.rewards).ravel()
    assert set(np.unique(rewards)) <= {0.0, -1.0, -2.0} and {-1.0, -2.0} <= set(np.unique(rewards))


def test_info_batch_reads_by_entry_and_by_row():
    from herl.buffers.goal_functions import InfoBatch

    info = InfoBatch({"scale": np.array([1.0, 2.0, 3.0])}, 3)
    assert len(info) == 3 and [row["scale"] for row in info] == [1.0, 2.0, 3.0] and info[-1] == {"scale": 3.0}
    np.testing.assert_array_equal(info["scale"], [1.0, 2.0, 3.0])
    assert "scale" in info and list(info.keys()) == ["scale"] and info.get("missing") is None
    assert not isinstance(info, dict)
    with pytest.raises(IndexError):
        info[3]
    assert [row for row in InfoBatch({}, 2)] == [{}, {}]  # without copy_info_dict: empty dicts, as SB3's


def test_evaluate_policy_calls_back_with_sb3s_locals_for_each_env():
    """SB3's EvalCallback logs successes from locals_["done"] and locals_["info"], one call per env and step."""
    from herl import evaluate_policy
    from herl.training.envs import make_env

    model = DQN("MultiInputPolicy", BitFlippingEnv(), **SMALL)  # the registered id's env
    calls, successes = [], []

    def sb3_style(locals_, globals_):
        calls.append((locals_["i"], locals_["done"], locals_["episode_counts"][locals_["i"]]))
        if locals_["done"]:
            successes.append(locals_["info"].get("is_success"))

    env = make_env("herl/BitFlipping-v0", n_envs=2)
    _, _, rate = evaluate_policy(model, env, n_eval_episodes=5, callback=sb3_style, return_success_rate=True)
    assert {i for i, _, _ in calls} == {0, 1}
    assert len(successes) == 5 and np.mean(successes) == rate
    assert all(count < (5 + i) // 2 for i, _, count in calls)  # only while the env's episodes still count
