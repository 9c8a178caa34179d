"""Every model saves, loads and trains on: the round-trip matrix.

For each algorithm and each combination of the settings that change what a model holds (observation normalization,
Box or goal observations, plain or HER buffer, n-step returns, float32 or bfloat16 hidden layers, demonstrations):
train, save the model and its replay buffer, load both, and check that

- the loaded model predicts what the saved one did (deterministic and stochastic actions, with and without an env);
- trained on from there, it stays bit-identical to the model it was saved from trained on the same way (each given a
  fresh env, as a loaded model is): weights, optimizer states, generators, normalizer, counters.

On CPU the two must be bit-identical. Where CUDA is available every case also runs there, and models cross between
the devices: saved on one, loaded on the other, trained on, and back.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from herl import DDPG, DQN, SAC, TD3, TQC, CrossQ, HerReplayBuffer, NormalActionNoise
from herl.demos import generate_expert_traj
from herl.envs import BitFlippingEnv, PointReachEnv
from herl.nn import gemm

EPISODE = 8
N_BITS = 4
ALGOS = {cls.__name__: cls for cls in (DQN, DDPG, TD3, SAC, TQC, CrossQ)}
# the settings' values; a combination is valid when its buffer can hold its observations and its demonstrations
FACTORS = {
    "obs": ("box", "goal"),
    "buffer": ("plain", "her"),
    "normalize": (False, True),
    "n_steps": (1, 3),
    "precision": ("float32", "bfloat16"),
    "demos": (False, True),
}


@dataclass(frozen=True)
class Case:
    algo: str
    obs: str
    buffer: str
    normalize: bool
    n_steps: int
    precision: str
    demos: bool

    def __str__(self) -> str:
        return "-".join([self.algo, self.obs, self.buffer, "norm" if self.normalize else "raw", f"n{self.n_steps}",
                         self.precision, "demos" if self.demos else "nodemos"])


BC_LOSS = ("DDPG", "TD3", "SAC", "TQC")  # CrossQ refuses a behaviour-cloning loss and DQN has none: demos in the buffer only


def valid(algo: str, values: dict) -> bool:
    """HER needs goal observations, demonstrations a HER buffer; CrossQ refuses bfloat16 (its batch renormalization
    runs in float32), with a message that tests/algorithms checks."""
    return not ((values["buffer"] == "her" and values["obs"] != "goal") or (values["demos"] and values["buffer"] != "her")
                or (algo == "CrossQ" and values["precision"] == "bfloat16"))


def all_cases() -> list[Case]:
    names = list(FACTORS)
    out = []
    for algo in ALGOS:
        for combo in itertools.product(*FACTORS.values()):
            values = dict(zip(names, combo))
            if valid(algo, values):
                out.append(Case(algo, **values))
    return out


CASES = all_cases()
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def bit_expert(obs):
    """Flips the first bit that differs from the goal."""
    diff = np.flatnonzero(obs["observation"] != obs["desired_goal"])
    return int(diff[0]) if len(diff) else 0


def reach_expert(obs):
    return np.clip(3.0 * (obs["desired_goal"] - obs["achieved_goal"]), -1.0, 1.0).astype(np.float32)


def make_env(case: Case):
    discrete = case.algo == "DQN"
    if case.obs == "goal":
        return BitFlippingEnv(n_bits=N_BITS) if discrete else PointReachEnv(max_episode_steps=EPISODE)
    return gym.make("CartPole-v1") if discrete else gym.make("Pendulum-v1", max_episode_steps=EPISODE * 3)


@pytest.fixture(scope="module")
def demonstrations():
    return {
        True: generate_expert_traj(bit_expert, None, BitFlippingEnv(n_bits=N_BITS), n_episodes=3, seed=5),
        False: generate_expert_traj(reach_expert, None, PointReachEnv(max_episode_steps=EPISODE), n_episodes=3,
                                    seed=5),
    }


def buffer_kwargs(case: Case, demonstrations) -> dict:
    if case.buffer != "her":
        return {}
    kwargs = dict(n_sampled_goal=2, goal_selection_strategy="future")
    if case.demos:
        kwargs.update(demonstrations=demonstrations[case.algo == "DQN"], demo_batch_ratio=0.25)
    return kwargs


def make_model(case: Case, demonstrations, device: str = "cpu"):
    cls = ALGOS[case.algo]
    env = make_env(case)
    kwargs = dict(device=device, learning_starts=10, batch_size=8, buffer_size=300, seed=3, n_steps=case.n_steps,
                  normalize_observations=case.normalize, gamma=0.9,
                  policy_kwargs=dict(net_arch=[16, 16], precision=case.precision))
    if case.buffer == "her":
        kwargs.update(replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=buffer_kwargs(case, demonstrations))
    if case.demos and case.algo in BC_LOSS:
        kwargs["bc_loss_weight"] = 1.0
    if case.algo in ("DDPG", "TD3"):
        kwargs["action_noise"] = NormalActionNoise(np.zeros(1 if case.obs == "box" else 2), 0.2 * np.ones(1 if case.obs == "box" else 2))
    if case.algo == "DQN":
        kwargs.update(exploration_fraction=0.5, target_update_interval=7)
    return cls("MultiInputPolicy" if case.obs == "goal" else "MlpPolicy", env, **kwargs)


def observations(model, n: int = 5):
    space = model.observation_space
    space.seed(11)
    samples = [space.sample() for _ in range(n)]
    if isinstance(samples[0], dict):
        return {k: np.stack([s[k] for s in samples]) for k in samples[0]}
    return np.stack(samples)


def assert_same_state(a, b, exact: bool = True) -> None:
    """Weights, optimizer states, counters and generators equal: bit for bit (``exact``), or to float32 rounding (CUDA
    runs reduce in an order of their own)."""
    def same(x, y, what):
        x, y = torch.as_tensor(x).cpu(), torch.as_tensor(y).cpu()
        if exact:
            assert torch.equal(x, y), what
        else:
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5, msg=str(what))

    pa, pb = a.get_parameters(), b.get_parameters()
    assert pa.keys() == pb.keys()
    for name in pa:
        if name.endswith(".optimizer"):
            sa, sb = pa[name]["state"], pb[name]["state"]
            assert sa.keys() == sb.keys(), name
            for index in sa:
                for key in sa[index]:
                    # a number the optimizer keeps as a Python number (torch < 2.4's RMSprop steps) stays one
                    assert torch.is_tensor(sa[index][key]) == torch.is_tensor(sb[index][key]), (name, index, key)
                    same(sa[index][key], sb[index][key], (name, index, key))
        else:
            for key in pa[name]:
                same(pa[name][key], pb[name][key], (name, key))
    assert (a.num_timesteps, a._n_updates, a._episode_num) == (b.num_timesteps, b._n_updates, b._episode_num)
    assert a.rng.bit_generator.state == b.rng.bit_generator.state
    if a.device == b.device:
        assert torch.equal(a.torch_rng.get_state(), b.torch_rng.get_state())


def assert_optimizer_state_fits(model) -> None:
    """What CUDA's fused Adam demands of a loaded optimizer (the CPU's tolerates less): every moment shaped, placed and
    typed as its parameter, every step count one 0-d float32 number: on the parameter's device for a fused or
    capturable optimizer, on the CPU for the others (torch's own placement, e.g. RMSprop's)."""
    for optimizer in model.optimizers.values():
        for group in optimizer.param_groups:
            on_device = group.get("fused") or group.get("capturable")
            for param in group["params"]:
                for key, value in optimizer.state[param].items():
                    if key == "step" and not torch.is_tensor(value):  # as torch < 2.4's RMSprop keeps it
                        assert type(value) in (int, float), key
                        continue
                    if key == "step":
                        expected = ((), param.device if on_device else torch.device("cpu"), torch.float32)
                    else:
                        expected = (param.shape, param.device, param.dtype)
                    assert (value.shape, value.device, value.dtype) == expected, key


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_save_load_predict_and_train_on(case: Case, device: str, demonstrations, tmp_path: Path):
    round_trip(case, device, demonstrations, tmp_path)


@pytest.mark.skipif(not gemm.onednn_available(), reason="this PyTorch build has no oneDNN linear op")
@pytest.mark.parametrize("case", [Case(algo, "goal", "her", True, 1, "float32", False) for algo in ALGOS], ids=str)
def test_round_trip_with_onednn_products(case: Case, demonstrations, tmp_path: Path, monkeypatch):
    """The same on the CPU's other float32 matmul path (herl.nn.gemm), every product through oneDNN (the networks
    here are below its size threshold)."""
    monkeypatch.setattr(gemm, "MIN_MULTIPLY_ADDS", 0)
    gemm.set_cpu_backend("onednn")
    try:
        round_trip(case, "cpu", demonstrations, tmp_path)
    finally:
        gemm.set_cpu_backend("auto")


def round_trip(case: Case, device: str, demonstrations, tmp_path: Path) -> None:
    """Save, load, predict the same (with and without an env), then train on: the same as never interrupted."""
    extra = {"replay_buffer_kwargs": buffer_kwargs(case, demonstrations)} if case.demos else {}
    round_trip_of(make_model(case, demonstrations, device), lambda: make_env(case), device, tmp_path, extra)


def round_trip_of(model, make_env, device: str, tmp_path: Path, extra: dict | None = None) -> None:
    """:func:`round_trip` for ``model``, whose env ``make_env`` makes anew; ``extra``: what its load needs."""
    extra = extra or {}
    cls = type(model)
    model.learn(30)
    obs = observations(model)
    expected, _ = model.predict(obs, deterministic=True)
    model.save(tmp_path / "model.zip")
    model.save_replay_buffer(tmp_path / "buffer.zip")

    alone = cls.load(tmp_path / "model.zip", device=device)  # without an env: predicts the same
    np.testing.assert_array_equal(alone.predict(obs, deterministic=True)[0], expected)
    loaded = cls.load(tmp_path / "model.zip", env=make_env(), device=device, **extra)
    loaded.load_replay_buffer(tmp_path / "buffer.zip")
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], expected)
    assert_same_state(model, loaded)
    assert_optimizer_state_fits(loaded)

    updates = model._n_updates
    model.set_env(make_env())  # a fresh env for each, as the loaded model has
    for m in (model, loaded):
        m.learn(25, reset_num_timesteps=False)
    assert model._n_updates > updates
    assert_same_state(model, loaded, exact=device == "cpu")
    if device == "cpu":
        np.testing.assert_array_equal(model.predict(obs, deterministic=False)[0],
                                      loaded.predict(obs, deterministic=False)[0])


OPTIMIZERS = {"AdamW": dict(weight_decay=0.01), "RMSprop": dict(alpha=0.95, eps=1e-5), "SGD": dict(momentum=0.9)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_a_model_with_another_optimizer_class_saves_loads_and_trains_on(algo: str, optimizer: str, device: str,
                                                                        tmp_path: Path):
    """SB3's ``policy_kwargs=dict(optimizer_class=..., optimizer_kwargs=...)``: the class (given as the class, saved
    by name) and its state survive the round trip."""
    case = Case(algo, "goal", "her", True, 1, "float32", False)
    model = make_model(case, None, device)
    kwargs = dict(policy_kwargs=dict(net_arch=[16, 16], optimizer_class=getattr(torch.optim, optimizer),
                                     optimizer_kwargs=OPTIMIZERS[optimizer]))
    model = type(model)("MultiInputPolicy", make_env(case), device=device, learning_starts=10, batch_size=8,
                        buffer_size=300, seed=3, gamma=0.9, replay_buffer_class=HerReplayBuffer,
                        replay_buffer_kwargs=buffer_kwargs(case, None), **kwargs,
                        **({"exploration_fraction": 0.5} if algo == "DQN" else {}))
    assert type(model.policy.optimizer) is getattr(torch.optim, optimizer)
    round_trip_of(model, lambda: make_env(case), device, tmp_path)


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_a_model_with_linear_networks_saves_loads_and_trains_on(algo: str, tmp_path: Path):
    """SB3's ``net_arch=[]``: actor and critics (DQN: its Q-network) without a hidden layer."""
    case = Case(algo, "goal", "her", True, 1, "float32", False)
    model = ALGOS[algo]("MultiInputPolicy", make_env(case), learning_starts=10, batch_size=8, buffer_size=300, seed=3,
                        gamma=0.9, replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=buffer_kwargs(case, None),
                        policy_kwargs=dict(net_arch=[]))
    round_trip_of(model, lambda: make_env(case), "cpu", tmp_path)


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_a_model_reading_chosen_observation_entries_saves_loads_and_trains_on(algo: str, tmp_path: Path):
    """``policy_kwargs=dict(input_keys=[...])`` (the presets' two entries): the file keeps the choice, and the model
    trains on as it would have (the matrix above covers the default, every entry)."""
    case = Case(algo, "goal", "her", True, 1, "float32", False)
    model = ALGOS[algo]("MultiInputPolicy", make_env(case), learning_starts=10, batch_size=8, buffer_size=300, seed=3,
                        gamma=0.9, replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=buffer_kwargs(case, None),
                        policy_kwargs=dict(net_arch=[16, 16], input_keys=["observation", "desired_goal"]))
    assert model.encoder.keys == ("observation", "desired_goal")
    round_trip_of(model, lambda: make_env(case), "cpu", tmp_path)


@pytest.mark.parametrize(("algo", "options"), [
    ("CrossQ", dict(batch_norm_momentum=0.1, batch_norm_eps=1e-5, renorm_warmup_steps=5)),
    ("TQC", dict(n_quantiles=7)), ("DQN", dict(dueling=True))])
def test_an_algorithms_own_policy_options_save_load_and_train_on(algo: str, options: dict, tmp_path: Path):
    """The policy options one algorithm reads (``--set policy.*`` as well): kept by the file, and the model trains on
    as it would have (CrossQ past its renormalization warm-up)."""
    case = Case(algo, "goal", "her", True, 1, "float32", False)
    model = ALGOS[algo]("MultiInputPolicy", make_env(case), learning_starts=10, batch_size=8, buffer_size=300, seed=3,
                        gamma=0.9, replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=buffer_kwargs(case, None),
                        policy_kwargs=dict(net_arch=[16, 16], **options))
    assert {k: model.policy_config.options[k] for k in options} == options
    round_trip_of(model, lambda: make_env(case), "cpu", tmp_path)


class FutureWithin(HerReplayBuffer):
    """A goal strategy of a user's own, with a setting of its own: 'future' within ``window`` steps."""

    def __init__(self, *args, window: int = 3, **kwargs):
        super().__init__(*args, **kwargs)
        self.window = window

    def goal_steps(self, steps, lengths):
        return steps + self.rng.integers(0, np.minimum(self.window, lengths - steps))


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_a_model_with_a_buffer_class_of_the_users_saves_loads_and_trains_on(algo: str, tmp_path: Path):
    """A HerReplayBuffer subclass (its own goal_steps and setting): the file names it, load finds it where its module
    is imported, the buffer comes back with its setting, and the model trains on as it would have."""
    case = Case(algo, "goal", "her", True, 1, "float32", False)
    model = ALGOS[algo]("MultiInputPolicy", make_env(case), learning_starts=10, batch_size=8, buffer_size=300, seed=3,
                        gamma=0.9, replay_buffer_class=FutureWithin,
                        replay_buffer_kwargs=dict(buffer_kwargs(case, None), window=2),
                        policy_kwargs=dict(net_arch=[16, 16]))
    round_trip_of(model, lambda: make_env(case), "cpu", tmp_path)
    loaded = ALGOS[algo].load(tmp_path / "model.zip", env=make_env(case))
    loaded.load_replay_buffer(tmp_path / "buffer.zip")
    assert type(loaded.replay_buffer) is FutureWithin and loaded.replay_buffer.window == 2


@pytest.mark.parametrize("algo", ["SAC", "TD3", "TQC", "CrossQ"])
def test_a_model_with_a_float64_box_of_several_dimensions_saves_loads_and_trains_on(algo: str, tmp_path: Path):
    from tests.algorithms.test_action_space_forms import FLOAT32_OBS, FORMS, RecordingEnv

    def env():
        return gym.wrappers.TimeLimit(RecordingEnv(FLOAT32_OBS, FORMS["2x2 float64"]), max_episode_steps=EPISODE)

    model = ALGOS[algo]("MlpPolicy", env(), learning_starts=10, batch_size=8, buffer_size=300, seed=3,
                        policy_kwargs=dict(net_arch=[16, 16]))
    round_trip_of(model, env, "cpu", tmp_path)


class ImageEnv(gym.Env):
    """Random uint8 images (channels-last, as cameras give them), beside a vector in the Dict form; a reward that
    depends on the image, so the networks have something to fit."""

    def __init__(self, discrete: bool, form: str = "image") -> None:
        image = gym.spaces.Box(0, 255, (36, 36, 2), np.uint8)
        self.observation_space = image if form == "image" else gym.spaces.Dict(
            {"camera": image, "joints": gym.spaces.Box(-1.0, 1.0, (3,), np.float32)})
        self.action_space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.t = 0

    def _obs(self):
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        obs = self._obs()
        image = obs if isinstance(obs, np.ndarray) else obs["camera"]
        return obs, float(image[:4, :4].mean() / 255.0), False, self.t >= EPISODE, {}


class BatchNormDropoutExtractor(torch.nn.Module):
    """A user's extractor, as SB3's docs write one: flatten, batch norm, dropout (modes matter: it acts in eval
    mode and trains in training mode, and target networks copy its running statistics)."""

    def __init__(self, observation_space, features_dim: int = 12):
        super().__init__()
        self.features_dim = features_dim
        self.layer = torch.nn.Linear(int(np.prod(observation_space.shape)), features_dim)
        self.norm = torch.nn.BatchNorm1d(features_dim)
        self.dropout = torch.nn.Dropout(0.3)

    def forward(self, observations):
        return self.dropout(self.norm(self.layer(observations.flatten(1))))


# (extractor setting, algorithms): CnnPolicy on images, its shared extractor, MultiInputPolicy's CombinedExtractor on a
# Dict with an image, a HER goal env of images, and a user's class with batch norm and dropout
EXTRACTOR_CASES = [
    *[(kind, algo) for kind in ("cnn", "combined", "custom") for algo in ("DQN", "DDPG", "TD3", "SAC", "TQC")],
    *[("cnn_shared", algo) for algo in ("TD3", "SAC", "TQC")],
    *[("her_images", algo) for algo in ("DQN", "SAC")],
]


def make_extractor_model(kind: str, algo: str, device: str):
    cls, discrete = ALGOS[algo], algo == "DQN"
    policy_kwargs: dict = dict(net_arch=[16], features_extractor_kwargs=dict(features_dim=8))
    kwargs = dict(device=device, learning_starts=10, batch_size=8, buffer_size=300, seed=3, gamma=0.9)
    if kind == "her_images":
        def env():
            return BitFlippingEnv(n_bits=N_BITS, continuous=not discrete, image_obs_space=True, max_steps=EPISODE)
        kwargs.update(replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=dict(n_sampled_goal=2))
        policy, policy_kwargs = "MultiInputPolicy", dict(net_arch=[16], features_extractor_kwargs=dict(cnn_output_dim=8))
    elif kind == "combined":
        def env():
            return ImageEnv(discrete, "dict")
        policy, policy_kwargs = "MultiInputPolicy", dict(net_arch=[16], features_extractor_kwargs=dict(cnn_output_dim=8))
    elif kind == "custom":
        def env():
            return gym.make("CartPole-v1") if discrete else gym.make("Pendulum-v1", max_episode_steps=EPISODE * 3)
        policy, policy_kwargs = "MlpPolicy", dict(net_arch=[16], features_extractor_class=BatchNormDropoutExtractor)
    else:
        def env():
            return ImageEnv(discrete)
        policy = "CnnPolicy"
        policy_kwargs["share_features_extractor"] = kind == "cnn_shared"
    if algo == "DQN":
        kwargs.update(exploration_fraction=0.5, target_update_interval=7)
    if algo in ("DDPG", "TD3"):
        kwargs["action_noise"] = NormalActionNoise(np.zeros(2 if kind != "custom" else 1), 0.2 * np.ones(2 if kind != "custom" else 1))
    return cls(policy, env(), policy_kwargs=policy_kwargs, **kwargs), env


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind, algo", EXTRACTOR_CASES, ids=lambda v: str(v))
def test_models_with_features_extractors_save_load_and_train_on(kind: str, algo: str, device: str, tmp_path: Path):
    model, make = make_extractor_model(kind, algo, device)
    assert model.policy_config.features_extractor is not None
    round_trip_of(model, make, device, tmp_path)


CROSSING = [Case(algo, "goal", "her", True, 1, "float32", False) for algo in ALGOS]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("case", CROSSING, ids=str)
def test_a_model_crosses_between_cpu_and_cuda_and_trains_on_each(case: Case, tmp_path: Path):
    model = make_model(case, None, "cpu")
    model.learn(30)
    obs = observations(model)
    expected, _ = model.predict(obs, deterministic=True)
    model.save(tmp_path / "cpu.zip")
    on_cuda = ALGOS[case.algo].load(tmp_path / "cpu.zip", env=make_env(case), device="cuda")
    assert on_cuda.device.type == "cuda"
    assert_optimizer_state_fits(on_cuda)
    np.testing.assert_allclose(on_cuda.predict(obs, deterministic=True)[0], expected, rtol=1e-4, atol=1e-5)
    on_cuda.learn(30, reset_num_timesteps=False)  # fused Adam on CUDA takes the loaded state
    on_cuda.save(tmp_path / "cuda.zip")
    back = ALGOS[case.algo].load(tmp_path / "cuda.zip", env=make_env(case), device="cpu")
    assert_optimizer_state_fits(back)
    assert_same_state(on_cuda, back, exact=False)
    back.learn(30, reset_num_timesteps=False)
    assert back.num_timesteps == 90


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("case", CROSSING, ids=str)
def test_assigning_cuda_to_model_device_moves_the_model_and_its_buffer_and_back(case: Case):
    """SB3 code assigns ``model.device``: the networks, optimizer states and generator follow, and so do the replay
    buffer's samples; training goes on there and back."""
    model = make_model(case, None, "cpu")
    model.learn(30)
    obs = observations(model)
    expected, _ = model.predict(obs, deterministic=True)
    model.device = "cuda"
    assert model.device.type == "cuda" and model.replay_buffer.device.type == "cuda"
    assert all(p.device.type == "cuda" for p in model.policy.parameters()) and model.torch_rng.device.type == "cuda"
    assert_optimizer_state_fits(model)
    np.testing.assert_allclose(model.predict(obs, deterministic=True)[0], expected, rtol=1e-4, atol=1e-5)
    model.learn(30, reset_num_timesteps=False)
    model.device = "cpu"
    assert_optimizer_state_fits(model)
    model.learn(30, reset_num_timesteps=False)
    assert model.num_timesteps == 90 and model.replay_buffer.sample(4).actions.device.type == "cpu"


def test_assigning_the_device_a_model_is_on_changes_nothing_of_its_training(tmp_path: Path):
    """``model.device = model.device`` (SB3's tests assign it before loading a buffer) moves and reseeds nothing: the
    run equals one without the assignment, bit for bit."""
    case = Case("SAC", "goal", "her", True, 1, "float32", False)
    runs = []
    for assign in (False, True):
        model = make_model(case, None, "cpu")
        model.learn(30)
        if assign:
            model.device = torch.device("cpu")
            model.replay_buffer.device = "cpu"
        model.learn(30, reset_num_timesteps=False)
        runs.append(model)
    assert_same_state(*runs)


LEGACY = Path(__file__).parent / "data"


@pytest.mark.parametrize("name, env", [("legacy_sac_pendulum.zip", "Pendulum-v1"),
                                       ("legacy_sac_her_nonorm.zip", "herl/PointReach-v0")])
def test_files_written_before_the_layout_fix_load_predict_and_train_on(name: str, env: str, tmp_path: Path):
    """Two models saved by herl before its files named every network and kept 0-d arrays 0-d: a SAC without an
    observation normalizer (whose encoder has nothing to store), Adam's step counts and its entropy coefficient's
    moments shaped (1,). They load, their optimizer states fit their parameters, and they train on and save again."""
    alone = SAC.load(LEGACY / name)
    assert alone.encoder.normalizer is None
    if env.startswith("herl/"):  # saved before input_keys: its networks read the state and the desired goal
        assert alone.encoder.keys == alone.policy_config.input_keys == ("observation", "desired_goal")
    assert_optimizer_state_fits(alone)
    obs = observations(alone)
    expected, _ = alone.predict(obs, deterministic=True)
    model = SAC.load(LEGACY / name, env=env)
    np.testing.assert_array_equal(model.predict(obs, deterministic=True)[0], expected)
    model.learn(20, reset_num_timesteps=False)
    model.save(tmp_path / "again.zip")
    again = SAC.load(tmp_path / "again.zip")
    assert_same_state(model, again)
