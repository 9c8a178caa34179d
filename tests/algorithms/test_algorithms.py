"""Every algorithm, with HER and with plain replay: trains, saves, loads, predicts, continues."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from herl import DDPG, DQN, SAC, TD3, TQC, CrossQ, HerReplayBuffer, NormalActionNoise, ReplayBuffer, evaluate_policy
from herl.envs import BitFlippingEnv
from herl.io import ArchiveError

ALGOS = [DQN, DDPG, TD3, SAC, TQC, CrossQ]
SMALL = dict(learning_starts=32, batch_size=16, buffer_size=1000, policy_kwargs=dict(net_arch=[16, 16]))


def make_env(algo, n_bits: int = 4) -> BitFlippingEnv:
    return BitFlippingEnv(n_bits=n_bits, continuous=algo is not DQN)


def make_model(algo, her: bool = True, seed: int = 0, env=None, **kwargs):
    env = env or make_env(algo)
    buffer = dict(replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=dict(n_sampled_goal=2)) if her else {}
    return algo("MultiInputPolicy", env, seed=seed, **buffer, **{**SMALL, **kwargs})


def some_observations(algo, n: int = 8) -> dict[str, np.ndarray]:
    env = make_env(algo)
    obs = [env.reset(seed=i)[0] for i in range(n)]
    return {k: np.stack([o[k] for o in obs]) for k in obs[0]}


@pytest.mark.parametrize("her", [True, False], ids=["her", "plain"])
@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: a.__name__)
def test_short_training_runs(algo, her):
    model = make_model(algo, her)
    model.learn(120)
    assert model.num_timesteps == 120
    assert model._n_updates == 120 - 32 if algo is not DQN else model._n_updates > 0
    assert isinstance(model.replay_buffer, HerReplayBuffer if her else ReplayBuffer)
    assert len(model.replay_buffer) == 120
    action, state = model.predict(make_env(algo).reset(seed=0)[0], deterministic=True)
    assert state is None
    assert model.action_space.contains(action.astype(model.action_space.dtype) if algo is not DQN else int(action))
    mean, std = evaluate_policy(model, make_env(algo), n_eval_episodes=3)
    assert -4.0 <= mean <= 0.0


@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: a.__name__)
def test_save_load_same_predictions_without_env(algo, tmp_path):
    model = make_model(algo)
    model.learn(100)
    obs = some_observations(algo)
    expected, _ = model.predict(obs, deterministic=True)
    model.save(tmp_path / "model.zip")
    loaded = algo.load(tmp_path / "model.zip")  # no env: a loaded model still predicts
    assert loaded.get_env() is None
    actions, _ = loaded.predict(obs, deterministic=True)
    np.testing.assert_array_equal(actions, expected)
    for name, state in model.get_parameters().items():
        if not name.endswith(".optimizer"):
            for key, tensor in state.items():
                torch.testing.assert_close(loaded.get_parameters()[name][key], tensor)
    with pytest.raises(ValueError, match="no env"):
        loaded.learn(10)


@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: a.__name__)
def test_continue_learning_after_load(algo, tmp_path):
    model = make_model(algo)
    model.learn(80)
    model.save(tmp_path / "model.zip")
    loaded = algo.load(tmp_path / "model.zip", env=make_env(algo))
    assert loaded.num_timesteps == 80
    before = {k: v.clone() for k, v in loaded.get_parameters()[loaded_net(algo)].items()}
    loaded.learn(80, reset_num_timesteps=False)
    assert loaded.num_timesteps == 160
    after = loaded.get_parameters()[loaded_net(algo)]
    assert any(not torch.equal(before[k], after[k]) for k in before)


def loaded_net(algo) -> str:
    return "q_net" if algo is DQN else "actor"


def test_set_env_then_learn(tmp_path):
    model = make_model(SAC)
    model.save(tmp_path / "m.zip")
    loaded = SAC.load(tmp_path / "m.zip")
    loaded.set_env(make_env(SAC))
    loaded.learn(40)
    assert loaded.num_timesteps == 40
    with pytest.raises(ValueError, match="spaces differ"):
        loaded.set_env(BitFlippingEnv(n_bits=5, continuous=True))


def test_same_seed_same_run():
    def run(seed):
        model = make_model(SAC, seed=seed)
        model.learn(80)
        return model.get_parameters()["actor"]

    first, second, other = run(3), run(3), run(4)
    for key in first:
        torch.testing.assert_close(first[key], second[key], rtol=0, atol=0)
    assert any(not torch.equal(first[k], other[k]) for k in first)


def test_loading_the_wrong_algorithm_or_a_damaged_file_says_so(tmp_path):
    model = make_model(TD3)
    model.save(tmp_path / "td3.zip")
    with pytest.raises(ArchiveError, match="TD3"):
        SAC.load(tmp_path / "td3.zip")
    (tmp_path / "junk.zip").write_bytes(b"not a zip at all")
    with pytest.raises(ArchiveError, match="not a herl"):
        SAC.load(tmp_path / "junk.zip")
    import herl  # both names are herl's own, as docs/algorithms.md promises for every class it shows

    assert herl.ArchiveError is ArchiveError
    assert isinstance(herl.OffPolicyAlgorithm.load(tmp_path / "td3.zip"), TD3)  # the base class loads whatever the file holds


def test_model_file_is_json_and_safetensors(tmp_path):
    import json
    import zipfile

    make_model(SAC, action_noise=NormalActionNoise(np.zeros(4), 0.1 * np.ones(4))).save(tmp_path / "m.zip")
    with zipfile.ZipFile(tmp_path / "m.zip") as archive:
        assert sorted(archive.namelist()) == ["arrays.safetensors", "meta.json"]
        meta = json.loads(archive.read("meta.json"))
    assert meta["algorithm"] == "SAC" and meta["kind"] == "model"
    assert meta["config"]["batch_size"] == 16
    assert meta["action_noise"]["class"] == "NormalActionNoise"


def test_replay_buffer_save_load(tmp_path):
    model = make_model(DQN)
    model.learn(60)
    model.save_replay_buffer(tmp_path / "buffer.zip")
    other = make_model(DQN, seed=1)
    other.load_replay_buffer(tmp_path / "buffer.zip")
    assert len(other.replay_buffer) == len(model.replay_buffer) == 60
    other.learn(40)


def test_normalizer_statistics_are_saved(tmp_path):
    model = make_model(SAC)
    model.learn(80)
    normalizer = model.encoder.normalizer
    assert normalizer is not None and normalizer.count > 0  # on by default for goal envs
    model.save(tmp_path / "m.zip")
    loaded = SAC.load(tmp_path / "m.zip")
    torch.testing.assert_close(loaded.encoder.normalizer.mean, normalizer.mean)
    torch.testing.assert_close(loaded.encoder.normalizer.std, normalizer.std)
    plain = SAC("MultiInputPolicy", make_env(SAC), normalize_observations=False, **SMALL)
    assert plain.encoder.normalizer is None


def test_unknown_arguments_and_bad_values_are_reported():
    with pytest.raises(TypeError, match="learning_rat"):
        SAC("MultiInputPolicy", make_env(SAC), learning_rat=1e-3)
    with pytest.raises(ValueError, match="Discrete"):
        DQN("MultiInputPolicy", make_env(SAC))
    with pytest.raises(ValueError, match="reads images.*use MlpPolicy or MultiInputPolicy"):
        SAC("CnnPolicy", make_env(SAC))
    with pytest.raises(ValueError, match="tau"):
        SAC("MultiInputPolicy", make_env(SAC), tau=-0.1)


def test_clip_target_bounds():
    model = make_model(DQN, clip_target=True, gamma=0.9)
    assert model._target_bounds == pytest.approx((-10.0, 0.0))
    model.learn(60)


def test_predict_single_and_batch():
    model = make_model(DQN)
    obs = some_observations(DQN, 5)
    batch, _ = model.predict(obs, deterministic=True)
    assert batch.shape == (5,)
    single, _ = model.predict({k: v[0] for k, v in obs.items()}, deterministic=True)
    assert np.ndim(single) == 0 and single == batch[0]


def test_dqn_her_solves_10_bit_flipping():
    """The HER paper's sanity check, small: DQN+HER learns 10 bits in a few thousand steps (plain DQN does not)."""
    env = BitFlippingEnv(n_bits=10)
    model = DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer,
                replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
                learning_starts=100, learning_rate=1e-3, batch_size=256, train_freq=1, gamma=0.95,
                exploration_fraction=0.3, exploration_final_eps=0.05, target_update_interval=500, seed=0)
    model.learn(3000)
    _, _, success = evaluate_policy(model, BitFlippingEnv(n_bits=10), n_eval_episodes=100, return_success_rate=True, seed=1)
    assert success >= 0.9


def test_get_set_parameters_round_trip(tmp_path):
    source, target = make_model(TD3, seed=0), make_model(TD3, seed=1)
    source.learn(60)
    target.set_parameters(source.get_parameters())
    obs = some_observations(TD3)
    np.testing.assert_array_equal(target.predict(obs, deterministic=True)[0], source.predict(obs, deterministic=True)[0])
    source.save(tmp_path / "m.zip")
    third = make_model(TD3, seed=2)
    third.set_parameters(tmp_path / "m.zip")
    np.testing.assert_array_equal(third.predict(obs, deterministic=True)[0], source.predict(obs, deterministic=True)[0])
    with pytest.raises(ValueError, match="lack"):
        third.set_parameters({"actor": source.get_parameters()["actor"]})


def test_progress_bar(capsys):
    pytest.importorskip("tqdm")
    make_model(DQN).learn(40, progress_bar=True)


def test_her_settings_survive_save_load(tmp_path):
    from herl import GoalSelectionStrategy

    model = DQN("MultiInputPolicy", make_env(DQN), replay_buffer_class=HerReplayBuffer,
                replay_buffer_kwargs=dict(n_sampled_goal=3, goal_selection_strategy=GoalSelectionStrategy.FINAL), **SMALL)
    model.save(tmp_path / "m.zip")
    loaded = DQN.load(tmp_path / "m.zip", env=make_env(DQN))
    assert loaded.replay_buffer.n_sampled_goal == 3
    assert loaded.replay_buffer.goal_selection_strategy is GoalSelectionStrategy.FINAL


@pytest.mark.parametrize("algo", [DDPG, TD3], ids=lambda a: a.__name__)
def test_random_action_prob(algo):
    obs = some_observations(algo, n=64)
    greedy = make_model(algo, learning_starts=0, random_action_prob=0.0)
    policy = greedy._policy_actions(obs, deterministic=False)
    np.testing.assert_array_equal(greedy._collect_actions(obs), policy)  # no noise given: the policy's actions
    mixed = make_model(algo, learning_starts=0, random_action_prob=0.5)
    replaced = ~np.all(mixed._collect_actions(obs) == policy, axis=1)
    assert 16 < replaced.sum() < 48  # about half of the 64 rows, each uniform in [-1, 1]
    with pytest.raises(ValueError, match="random_action_prob"):
        make_model(algo, random_action_prob=1.5)


def test_load_replay_buffer_keeps_the_reward_function_of_replay_buffer_kwargs(tmp_path):
    def seven(achieved_goal, desired_goal, info):  # recognisable: the env's rewards are -1 and 0
        return np.full(len(achieved_goal), -7.0, dtype=np.float32)

    buffer = dict(replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=dict(n_sampled_goal=4, compute_reward=seven))
    model = DQN("MultiInputPolicy", make_env(DQN), seed=0, **SMALL, **buffer)
    model.learn(60)
    model.save_replay_buffer(tmp_path / "buffer.zip")
    other = DQN("MultiInputPolicy", make_env(DQN), seed=1, **SMALL, **buffer)
    other.load_replay_buffer(tmp_path / "buffer.zip")
    rewards = other.replay_buffer.sample(256).rewards
    assert (rewards == -7.0).float().mean() > 0.5  # the relabeled 4/5 use `seven`


def prioritized(algo, **kwargs):
    return algo("MultiInputPolicy", make_env(algo), replay_buffer_class=HerReplayBuffer,
                replay_buffer_kwargs=dict(prioritized=True, n_sampled_goal=2, **kwargs), **SMALL)


@pytest.mark.parametrize("algo", [DDPG, TD3, SAC, TQC, CrossQ], ids=lambda a: a.__name__)
def test_prioritized_replay_is_refused_where_no_priority_is_fed_back(algo, monkeypatch, tmp_path):
    """Only DQN weighs its loss by importance and feeds back TD errors; the others drew uniformly from a buffer whose
    priorities never changed, silently. Now refused; a model file saved so loads without the option, with a note."""
    with pytest.raises(ValueError, match=rf"{algo.__name__} replay_buffer_kwargs prioritized=True is not allowed: "
                                         r".*False: .*feeds back no priorities"):
        prioritized(algo)
    monkeypatch.setattr(algo, "updates_priorities", True)  # a file from before the refusal
    prioritized(algo, alpha=0.5).save(tmp_path / "m")
    monkeypatch.undo()
    with pytest.warns(UserWarning, match=rf"prioritized=True, which {algo.__name__} never used .*loaded without it"):
        model = algo.load(tmp_path / "m.zip", env=make_env(algo))
    assert model.replay_buffer_kwargs == {"n_sampled_goal": 2} and not model.replay_buffer.prioritized


def test_dqn_feeds_back_priorities():
    model = prioritized(DQN)
    model.learn(120)
    leaves = model.replay_buffer.storage.priorities.state()["leaves"]
    assert len(np.unique(leaves[leaves > 0])) > 10  # all start at the same value
