"""Features extractors (SB3's CnnPolicy, CombinedExtractor, features_extractor_class): what they read, how they
train, their modes, and the errors that name the fix. The round trip of every algorithm with one is in
tests/io/test_round_trip_matrix.py."""

from __future__ import annotations

import copy
import sys
import types

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from herl import DQN, SAC, TD3, TQC, CrossQ, HerReplayBuffer
from herl.envs import BitFlippingEnv
from herl.errors import ArchiveError
from herl.nn.extractors import (BaseFeaturesExtractor, CombinedExtractor, ExtractorInput, ImageSpaceError, NatureCNN,
                                extractor_class, extractor_name)

IMAGE_LAST = gym.spaces.Box(0, 255, (36, 40, 3), np.uint8)


class ImageEnv(gym.Env):
    def __init__(self, space=IMAGE_LAST, discrete=False, length=6):
        self.observation_space = space
        self.action_space = gym.spaces.Discrete(2) if discrete else gym.spaces.Box(-1, 1, (1,), np.float32)
        self.length, self.t = length, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), 0.0, False, self.t >= self.length, {}


class NormDropout(BaseFeaturesExtractor):
    def __init__(self, observation_space, features_dim=6):
        super().__init__(observation_space, features_dim)
        self.layer = nn.Linear(int(np.prod(observation_space.shape)), features_dim)
        self.batch_norm = nn.BatchNorm1d(features_dim)
        self.dropout = nn.Dropout(0.5)

    def forward(self, observations):
        return self.dropout(self.batch_norm(self.layer(observations)))


def test_the_extractor_reads_images_channels_first_and_scaled_whatever_the_env_gives():
    """A channels-last image reaches the extractor as the same image channels-first, in [0, 1]; the network's output
    for it equals NatureCNN's on the transposed, scaled image."""
    feed = ExtractorInput(IMAGE_LAST, ("obs",), normalize_images=True)
    assert feed.space.shape == (3, 36, 40) and feed.images
    image = IMAGE_LAST.sample()
    flat = torch.as_tensor(image, dtype=torch.float32).reshape(1, -1)
    expected = torch.as_tensor(image.transpose(2, 0, 1)[None], dtype=torch.float32) / 255.0
    torch.testing.assert_close(feed(flat), expected, rtol=0, atol=0)
    raw = ExtractorInput(IMAGE_LAST, ("obs",), normalize_images=False)
    assert raw(flat).max() > 1.0

    model = SAC("CnnPolicy", ImageEnv(), policy_kwargs=dict(net_arch=[8], features_extractor_kwargs=dict(features_dim=5)))
    cnn = model.actor.features_extractor
    assert isinstance(cnn, NatureCNN) and cnn.features_dim == 5
    torch.testing.assert_close(model.actor.features(flat), cnn(expected))


def test_dict_entries_come_back_in_their_own_forms():
    space = gym.spaces.Dict({"camera": gym.spaces.Box(0, 255, (1, 36, 36), np.uint8), "mode": gym.spaces.Discrete(3, start=1),
                             "buttons": gym.spaces.MultiDiscrete([2, 3]), "v": gym.spaces.Box(-1, 1, (2,), np.float32)})
    keys = ("buttons", "camera", "mode", "v")
    feed = ExtractorInput(space, keys, normalize_images=True)
    row = np.concatenate([[1, 2], np.full(36 * 36, 255.0), [3], [0.5, -0.5]]).astype(np.float32)
    out = feed(torch.as_tensor(row[None]))
    assert out["camera"].shape == (1, 1, 36, 36) and float(out["camera"].max()) == 1.0
    assert out["mode"].tolist() == [[0.0, 0.0, 1.0]]  # value 3 of {1, 2, 3}
    assert out["buttons"].tolist() == [[0.0, 1.0, 0.0, 0.0, 1.0]]
    assert out["v"].tolist() == [[0.5, -0.5]]
    combined = CombinedExtractor(feed.space, cnn_output_dim=4)
    assert combined.features_dim == 4 + 3 + 5 + 2
    assert combined(out).shape == (1, 14)


def test_multi_input_policy_picks_the_combined_extractor_only_where_an_entry_is_an_image():
    images = SAC("MultiInputPolicy", BitFlippingEnv(n_bits=4, continuous=True, image_obs_space=True),
                 replay_buffer_class=HerReplayBuffer)
    assert images.policy_config.features_extractor == "CombinedExtractor"
    assert images.encoder.normalizer is None  # images are not put through the running normalizer
    plain = SAC("MultiInputPolicy", BitFlippingEnv(n_bits=4, continuous=True), replay_buffer_class=HerReplayBuffer)
    assert plain.policy_config.features_extractor is None and not hasattr(plain.actor, "features_extractor")
    assert plain.encoder.normalizer is not None


def test_a_shared_extractor_learns_from_the_actor_loss_only_and_separate_ones_from_their_own():
    def trained(share: bool, algo=SAC):
        model = algo("CnnPolicy", ImageEnv(length=4), learning_starts=8, batch_size=4, buffer_size=64, seed=1,
                     policy_kwargs=dict(net_arch=[8], share_features_extractor=share,
                                        features_extractor_kwargs=dict(features_dim=4)))
        before = copy.deepcopy(model.policy.state_dict())
        model.learn(12)
        return model, before

    for algo in (SAC, TD3):
        model, before = trained(True, algo)
        assert model.actor.features_extractor is model.critic.features_extractor
        assert model.critic_target.features_extractor is not model.critic.features_extractor
        shared = [p for p in model.actor.features_extractor.parameters()]
        optimizer_params = [p for g in model.optimizers["optimizer"].param_groups for p in g["params"]]
        assert len({id(p) for p in optimizer_params}) == len(optimizer_params)
        assert all(any(p is q for q in optimizer_params) for p in shared)
        key = "actor.features_extractor.linear.0.weight"
        assert not torch.equal(before[key], model.policy.state_dict()[key])

    # the critic's loss alone does not move a shared extractor: with the actor's learning switched off (TD3's actor
    # learns every policy_delay updates), one critic-only update leaves it as it was
    model, _ = trained(True, TD3)
    model.policy_delay = 100
    extractor = copy.deepcopy(model.actor.features_extractor.state_dict())
    critic = copy.deepcopy({k: v for k, v in model.critic.state_dict().items() if "features" not in k})
    model._n_updates = 1  # the next update is not the actor's
    model.train(1)
    for k, v in model.actor.features_extractor.state_dict().items():
        assert torch.equal(v, extractor[k]), k
    assert any(not torch.equal(v, critic[k]) for k, v in model.critic.state_dict().items() if k in critic)

    separate, before = trained(False)
    assert separate.actor.features_extractor is not separate.critic.features_extractor
    for name in ("actor", "critic"):
        key = f"{name}.features_extractor.linear.0.weight"
        assert not torch.equal(before[key], separate.policy.state_dict()[key]), name


def test_batch_norm_and_dropout_act_in_eval_mode_and_train_in_training_mode():
    model = TQC("MlpPolicy", "Pendulum-v1", learning_starts=10, gradient_steps=0, seed=1,
                policy_kwargs=dict(net_arch=[8], n_quantiles=5, features_extractor_class=NormDropout))
    norms = [model.actor.features_extractor.batch_norm, model.critic.features_extractor.batch_norm,
             model.critic_target.features_extractor.batch_norm]
    stats = [n.running_mean.clone() for n in norms]
    model.learn(40)  # collection only: acting leaves the statistics alone
    obs = model.observation_space.sample()[None]
    first = model.predict(obs, deterministic=True)[0]
    for _ in range(4):  # dropout is off when acting
        np.testing.assert_array_equal(model.predict(obs, deterministic=True)[0], first)
    for norm, before in zip(norms, stats):
        assert torch.equal(norm.running_mean, before)
    assert model.actor.training and model.critic.training and not model.critic_target.training

    model.tau = 0.0  # targets stay, their running statistics are copied all the same (SB3)
    target_bias = model.critic_target.features_extractor.batch_norm.bias.clone()
    model.train(3)
    assert not torch.equal(norms[0].running_mean, stats[0]) and not torch.equal(norms[1].running_mean, stats[1])
    assert torch.equal(norms[2].running_mean, norms[1].running_mean)
    assert torch.equal(model.critic_target.features_extractor.batch_norm.bias, target_bias)


def test_dropout_draws_from_the_models_generator_and_leaves_the_global_one_alone():
    def run():
        torch.manual_seed(123)
        model = SAC("MlpPolicy", "Pendulum-v1", learning_starts=10, batch_size=8, seed=2,
                    policy_kwargs=dict(net_arch=[8], features_extractor_class=NormDropout))
        model.learn(30)
        return model, torch.rand(1)

    (a, after_a), (b, after_b) = run(), run()
    for key, value in a.policy.state_dict().items():
        assert torch.equal(value, b.policy.state_dict()[key]), key
    torch.manual_seed(123)
    assert torch.equal(after_a, after_b)


def test_lr_schedule_sets_the_step_size_of_each_train_call_and_tau_zero_freezes_the_targets(tmp_path):
    model = SAC("MlpPolicy", "Pendulum-v1", learning_starts=10, batch_size=8, seed=0, policy_kwargs=dict(net_arch=[8]),
                tau=0.0)
    assert model.lr_schedule(0.3) == model.learning_rate
    model.learn(20)
    target = copy.deepcopy(model.critic_target.state_dict())
    critic = copy.deepcopy(model.critic.state_dict())
    model.lr_schedule = lambda progress: 0.0
    model.train(2)
    assert all(torch.equal(v, critic[k]) for k, v in model.critic.state_dict().items())
    assert all(torch.equal(v, target[k]) for k, v in model.critic_target.state_dict().items())
    model.lr_schedule = lambda progress: 1e-3 * progress
    model._current_progress_remaining = 0.5
    model.train(1)
    assert model.optimizers["optimizer"].param_groups[0]["lr"] == pytest.approx(5e-4)
    with pytest.warns(UserWarning, match="lr_schedule .* is code"):
        model.save(tmp_path / "m")
    model.lr_schedule = lambda progress: float("nan")
    with pytest.raises(ValueError, match="a learning rate is a finite number >= 0"):
        model.train(1)
    with pytest.raises(TypeError, match="lr_schedule must be a function"):
        model.lr_schedule = "fast"
    model._on_step()  # SB3's hook: nothing to do


def test_a_users_class_is_found_by_name_only_among_loaded_modules(tmp_path):
    module = types.ModuleType("users_extractors")
    exec("import torch\nfrom herl.nn.extractors import BaseFeaturesExtractor\n"
         "class Tiny(BaseFeaturesExtractor):\n"
         "    def __init__(self, space, features_dim=3):\n"
         "        super().__init__(space, features_dim); self.layer = torch.nn.Linear(space.shape[0], features_dim)\n"
         "    def forward(self, x):\n        return self.layer(x)\n", module.__dict__)
    module.Tiny.__module__ = "users_extractors"
    sys.modules["users_extractors"] = module
    try:
        model = SAC("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(features_extractor_class=module.Tiny))
        assert extractor_name(module.Tiny) == "users_extractors:Tiny" == model.policy_config.features_extractor
        model.save(tmp_path / "m")
        assert type(SAC.load(tmp_path / "m").actor.features_extractor) is module.Tiny
        assert extractor_class("NatureCNN") is NatureCNN
    finally:
        del sys.modules["users_extractors"]
    from herl.nn import extractors

    extractors.SEEN_EXTRACTORS.pop("users_extractors:Tiny")
    with pytest.raises(ArchiveError, match=r"users_extractors:Tiny' is not loaded: import its module"):
        SAC.load(tmp_path / "m")
    # as the message says: the class given to load is the one the file names (the file's other settings stay)
    loaded = SAC.load(tmp_path / "m", policy_kwargs=dict(features_extractor_class=module.Tiny))
    assert type(loaded.actor.features_extractor) is module.Tiny


def test_bad_settings_name_the_fix():
    floats = gym.spaces.Box(-5.0, 5.0, (1, 36, 36), np.float32)  # e.g. behind VecNormalize
    with pytest.raises(ImageSpaceError, match="normalize_images=False"):
        SAC("CnnPolicy", ImageEnv(floats))
    with pytest.raises(AssertionError):  # SB3's check is an assertion; tests written for it catch this one too
        SAC("CnnPolicy", ImageEnv(floats))
    assert SAC("CnnPolicy", ImageEnv(floats), policy_kwargs=dict(normalize_images=False, net_arch=[4])).actor
    with pytest.raises(ImageSpaceError, match="at least 36x36"):
        SAC("CnnPolicy", ImageEnv(gym.spaces.Box(0, 255, (20, 20, 1), np.uint8)))
    with pytest.raises(ValueError, match="reads images.*use MlpPolicy or MultiInputPolicy"):
        SAC("CnnPolicy", "Pendulum-v1")
    with pytest.raises(ValueError, match="normalize_observations=True with image observations"):
        SAC("CnnPolicy", ImageEnv(), normalize_observations=True)
    with pytest.raises(ValueError, match="CrossQ does not take a features extractor"):
        CrossQ("CnnPolicy", ImageEnv())
    with pytest.raises(TypeError, match="features_extractor_kwargs must be a dict of JSON values"):
        SAC("CnnPolicy", ImageEnv(), policy_kwargs=dict(features_extractor_kwargs=dict(act=nn.ReLU)))
    with pytest.raises(TypeError, match="must be a torch.nn.Module subclass"):
        SAC("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(features_extractor_class=dict))
    with pytest.raises(ValueError, match="herl's own are"):
        SAC("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(features_extractor_class="nowhere:Gone"))

    class NoSize(nn.Module):
        def __init__(self, space):
            super().__init__()

    with pytest.raises(TypeError, match="has no features_dim > 0"):
        SAC("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(features_extractor_class=NoSize))


def test_dqn_reads_images_through_its_q_network(tmp_path):
    model = DQN("CnnPolicy", ImageEnv(discrete=True), learning_starts=8, batch_size=4, buffer_size=64, seed=0,
                policy_kwargs=dict(net_arch=[8], features_extractor_kwargs=dict(features_dim=4)))
    model.learn(16)
    assert isinstance(model.q_net.features_extractor, NatureCNN)
    assert model.q_net_target.features_extractor is not model.q_net.features_extractor
    obs = IMAGE_LAST.sample()
    model.save(tmp_path / "dqn")
    assert DQN.load(tmp_path / "dqn").predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]


def test_a_model_with_an_extractor_exports_to_onnx_and_predicts_the_same(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    model = SAC("CnnPolicy", ImageEnv(), learning_starts=8, batch_size=4, buffer_size=64, seed=0,
                policy_kwargs=dict(net_arch=[8], features_extractor_kwargs=dict(features_dim=4)))
    model.learn(12)
    model.export_onnx(tmp_path / "policy.onnx")
    session = ort.InferenceSession(str(tmp_path / "policy.onnx"))
    obs = np.stack([IMAGE_LAST.sample() for _ in range(3)])
    feed = session.get_inputs()[0]
    (actions,) = session.run(None, {feed.name: obs.astype(np.uint8 if feed.type == "tensor(uint8)" else np.float32)})
    np.testing.assert_allclose(actions, model.predict(obs, deterministic=True)[0], rtol=1e-4, atol=1e-5)


def test_flatten_extractor_on_dict_observations_names_what_to_use():
    """It failed with int(None) (a Dict space has no shape), in Python and as `herl train`'s message."""
    from herl.nn.extractors import FlattenExtractor

    space = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (3,)), "achieved_goal": gym.spaces.Box(-1, 1, (2,)),
                             "desired_goal": gym.spaces.Box(-1, 1, (2,))})
    with pytest.raises(ValueError, match=r"FlattenExtractor flattens one array, and the observations are dicts with "
                                         r"the entries \['achieved_goal', 'desired_goal', 'observation'\]: leave "
                                         r"features_extractor_class out .* or use CombinedExtractor"):
        FlattenExtractor(space)
    assert FlattenExtractor(gym.spaces.Box(-1, 1, (2, 3))).features_dim == 6
