"""Nothing silently wrong: the finiteness guard (env outputs, reward functions, losses) and the
validation of every hyperparameter, through the Python API and the command line alike."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch

from herl import DDPG, DQN, SAC, TD3, HerReplayBuffer, ReplayBuffer
from herl.compat.cpprb import HindsightReplayBuffer
from herl.compat.rllte import HerReplayStorage
from herl.envs import BitFlippingEnv, PointReachEnv
from herl.errors import ConfigError, NonFiniteError
from herl.run.config import build_config
from herl.run.errors import CLIError

SMALL = dict(learning_starts=8, batch_size=8, buffer_size=1000, policy_kwargs=dict(net_arch=[8]))


class PoisonOnce(gym.Wrapper):
    """Returns NaN (or inf) in one entry of the observation, or as the reward, at one step."""

    def __init__(self, env: gym.Env, *, at_step: int, key: str | None, value: float = np.nan) -> None:
        super().__init__(env)
        self.at_step, self.key, self.value, self.steps = at_step, key, value, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps == self.at_step:
            if self.key is None:
                reward = self.value
            else:
                obs = {**obs, self.key: np.full_like(obs[self.key], self.value)}
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize(("key", "value"), [("achieved_goal", np.nan), ("observation", np.inf), (None, np.nan)])
def test_a_non_finite_env_output_stops_training_naming_env_key_and_step(key, value):
    env = PoisonOnce(PointReachEnv(), at_step=12, key=key, value=value)
    model = SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, seed=0, **SMALL)
    with pytest.raises(NonFiniteError) as info:
        model.learn(40)
    message = str(info.value)
    assert "env step 11" in message and "env 0" in message and "nothing of this add() was stored" in message
    assert (f"next_obs[{key!r}]" if key else "reward") in message
    assert len(model.replay_buffer) == 11  # the 11 good steps, not the 12th
    assert all(torch.isfinite(p).all() for p in model.nets.parameters())
    assert all(torch.isfinite(b).all() for b in model.nets.buffers())


def test_the_buffer_refuses_non_finite_values_unless_told_not_to():
    obs_space, act_space = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,))
    buffer = ReplayBuffer(100, obs_space, act_space, n_envs=2)
    good = np.zeros((2, 3), np.float32)
    bad = good.copy()
    bad[1, 2] = np.nan
    with pytest.raises(NonFiniteError, match="next_obs of env 1"):
        buffer.add(good, bad, np.zeros((2, 2)), np.zeros(2), terminated=np.zeros(2, bool))
    with pytest.raises(NonFiniteError, match="action of env 0"):
        buffer.add(good, good, np.array([[np.inf, 0], [0, 0]]), np.zeros(2), terminated=np.zeros(2, bool))
    assert len(buffer) == 0
    huge = np.full((2, 3), 3e38, np.float32)  # finite, though their sum overflows
    with np.errstate(over="ignore"):
        buffer.add(huge, huge, np.zeros((2, 2)), np.zeros(2), terminated=np.zeros(2, bool))
    assert len(buffer) == 2
    unchecked = ReplayBuffer(100, obs_space, act_space, n_envs=2, check_finite=False)
    unchecked.add(good, bad, np.zeros((2, 2)), np.zeros(2), terminated=np.zeros(2, bool))
    assert len(unchecked) == 2


def _her_buffer(compute_reward):
    env = BitFlippingEnv(n_bits=4, continuous=True)
    buffer = HerReplayBuffer(100, env.observation_space, env.action_space, env=env, n_sampled_goal=4, seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(4):
        next_obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        buffer.add(obs, next_obs, np.zeros(4, np.float32), reward, terminated=terminated, truncated=truncated)
        obs = next_obs
    buffer._compute_reward = lambda a, d, i: compute_reward(a)  # after the probe at construction
    return buffer


@pytest.mark.parametrize(("returns", "error", "match"), [
    (lambda a: np.full(len(a), np.nan), NonFiniteError, "compute_reward returned NaN or infinity"),
    (lambda a: np.array(["yes"] * len(a)), ValueError, "not numbers"),
    (lambda a: np.zeros(3), ValueError, r"returned shape \(3,\) for a batch of"),
])
def test_reward_function_outputs_are_checked(returns, error, match):
    with pytest.raises(error, match=match):
        _her_buffer(returns).sample(64)


def _broken_sac():
    model = SAC("MultiInputPolicy", BitFlippingEnv(n_bits=4, continuous=True), seed=0, **SMALL)
    model.learn(20)
    with torch.no_grad():
        model.critic.weights[0].fill_(float("nan"))  # as a too-high learning rate would leave them
    return model


def test_a_non_finite_loss_stops_training_and_names_the_term():
    model = _broken_sac()
    with pytest.raises(NonFiniteError, match=r"SAC's critic loss \(critic_loss=nan\), actor loss"):
        model.train(100)  # checked every LOSS_CHECK_EVERY updates, without a device sync per update
    dqn = DQN("MultiInputPolicy", BitFlippingEnv(n_bits=4), seed=0, **SMALL)
    dqn.learn(20)
    with torch.no_grad():
        dqn.q_net.layers[0].bias.fill_(float("inf"))
    dqn.train(1)
    with pytest.raises(NonFiniteError, match="DQN's Q-network loss"):
        dqn.train_info()  # and at log time


def test_a_non_finite_entropy_coefficient_is_named():
    model = SAC("MultiInputPolicy", BitFlippingEnv(n_bits=4, continuous=True), seed=0, **SMALL)
    model.learn(20)
    with torch.no_grad():
        model.log_ent_coef.fill_(float("nan"))
    with pytest.raises(NonFiniteError, match="entropy coefficient"):
        model.train(100)


def test_predict_names_a_missing_key_and_the_expected_shape():
    env = BitFlippingEnv(n_bits=4, continuous=True)
    model = SAC("MultiInputPolicy", env, seed=0, **SMALL)
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="the observation lacks the key 'desired_goal'"):
        model.predict({k: v for k, v in obs.items() if k != "desired_goal"})
    with pytest.raises(ValueError, match=r"observation\['observation'\] has shape \(1, 5\).*expected numbers shaped \(4,\)"):
        model.predict({**obs, "observation": np.zeros(5, np.float32)})
    with pytest.raises(ValueError, match=r"observation\['desired_goal'\] has shape \(3, 4\).*batch of 2"):
        model.predict({**{k: np.stack([v, v]) for k, v in obs.items()}, "desired_goal": np.zeros((3, 4), np.float32)})
    model.predict({k: np.stack([v, v]) for k, v in obs.items()})  # a well-formed batch


def test_nan_weights_are_caught_by_the_next_action_if_not_by_a_loss_first():
    model = _broken_sac()
    with pytest.raises(NonFiniteError, match="action of env 0"):
        model.learn(300, reset_num_timesteps=False)


# ---------------------------------------------------------------------------------------------------------- configs
ISSUE_CASES = [  # (algorithm, keyword arguments, the field the message must name)
    (SAC, dict(learning_rate=float("inf")), "learning_rate"),
    (SAC, dict(learning_rate=float("nan")), "learning_rate"),
    (SAC, dict(learning_rate=lambda progress: 0.0), "learning_rate"),  # a schedule that starts at 0
    (DQN, dict(train_freq=0), "train_freq"),
    (DQN, dict(train_freq=-4), "train_freq"),
    (DQN, dict(train_freq=(2, "steps")), "train_freq"),
    (SAC, dict(clip_observations=0.0), "clip_observations"),
    (SAC, dict(clip_observations=float("nan")), "clip_observations"),
    (SAC, dict(target_entropy=float("nan")), "target_entropy"),
    (SAC, dict(ent_coef="auto_-1"), "ent_coef"),
    (SAC, dict(policy_kwargs=dict(net_arch="64")), "net_arch"),
    (SAC, dict(policy_kwargs=dict(net_arch=[0])), "net_arch"),
    (SAC, dict(policy_kwargs=dict(net_arch=dict(pi=[64], qf=[64.5]))), "net_arch"),
    (TD3, dict(policy_kwargs=dict(n_critics=0)), "n_critics"),
    (SAC, dict(stats_window_size=0), "stats_window_size"),
    (SAC, dict(seed="abc"), "seed"),
    (SAC, dict(seed=-1), "seed"),
    (SAC, dict(device="tpu"), "device"),
    (SAC, dict(batch_size=float("inf")), "batch_size"),
    (SAC, dict(buffer_size=2.5), "buffer_size"),
    (SAC, dict(gamma=1.5), "gamma"),
    (SAC, dict(gradient_steps=-2), "gradient_steps"),
    (SAC, dict(normalize_observations="yes"), "normalize_observations"),
    (SAC, dict(clip_target=(0, -1)), "clip_target"),
    (DDPG, dict(target_policy_noise=-0.1), "target_policy_noise"),
    (TD3, dict(policy_delay=0), "policy_delay"),
    (DQN, dict(exploration_final_eps=2.0), "exploration_final_eps"),
    (DQN, dict(max_grad_norm=float("nan")), "max_grad_norm"),
    (DQN, dict(double_q="no"), "double_q"),
]


@pytest.mark.parametrize(("algo", "kwargs", "field"), ISSUE_CASES, ids=lambda x: getattr(x, "__name__", str(x)))
def test_every_bad_hyperparameter_is_refused_at_construction_naming_field_value_and_range(algo, kwargs, field):
    env = BitFlippingEnv(n_bits=4, continuous=algo is not DQN)
    with pytest.raises(ConfigError) as info:
        algo("MultiInputPolicy", env, **kwargs)
    assert info.value.name == field
    assert f"{field}=" in str(info.value) and "must be" in str(info.value)


def test_learn_checks_its_arguments():
    model = DQN("MultiInputPolicy", BitFlippingEnv(n_bits=4), **SMALL)
    with pytest.raises(ConfigError, match="total_timesteps=-5"):
        model.learn(-5)
    with pytest.raises(ConfigError, match="total_timesteps=2.5"):
        model.learn(2.5)
    with pytest.raises(ConfigError, match="log_interval"):
        model.learn(10, log_interval=-1)
    model.learn(1e1)  # a whole float is fine
    assert model.num_timesteps == 10


def test_whole_floats_and_numpy_numbers_are_accepted_and_stored_as_ints():
    model = SAC("MultiInputPolicy", BitFlippingEnv(n_bits=4, continuous=True), buffer_size=1e4, batch_size=np.int64(8),
                learning_starts=np.float64(8))
    assert model.config.buffer_size == 10_000 and type(model.config.batch_size) is int
    assert type(model.config.learning_starts) is int


def _config(**settings):
    return build_config(algo="sac", env="herl/PointReach-v0", seed=0, goal_env=True, preset=None,
                        layers=[("--set", settings)])


@pytest.mark.parametrize(("settings", "match"), [
    ({"batch_size": float("inf")}, "batch_size=inf"),
    ({"policy.net_arch": 64}, "net_arch=64"),
    ({"policy.net_arch": "64"}, "net_arch='64'"),
    ({"policy.n_critics": 0}, "n_critics=0"),
    ({"learning_rate": float("nan")}, "learning_rate=nan"),
    ({"train_freq": 0}, "train_freq"),
])
def test_the_command_line_checks_settings_by_the_same_rules_before_building_anything(settings, match):
    with pytest.raises(CLIError, match=match):
        _config(**settings)


def test_a_her_buffer_too_small_for_one_episode_is_refused_when_built():
    env = gym.make("herl/PointReach-v0")  # 50 steps an episode
    with pytest.raises(ValueError, match="buffer_size=20 cannot hold one whole episode of 50 steps"):
        SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, buffer_size=20)


# ---------------------------------------------------------------------------------------------------------- adapters
def _cpprb(**kwargs):
    env_dict = {"obs": {"shape": 2}, "act": {"shape": 1}, "next_obs": {"shape": 2}}
    return HindsightReplayBuffer(100, env_dict, max_episode_len=10, prioritized=False, seed=0,
                                 reward_func=lambda s, a, g: -np.abs(s - g).sum(axis=1), **kwargs)


def test_cpprb_on_episode_end_failure_leaves_the_episode_staged_for_a_retry():
    buffer = _cpprb()
    for t in range(3):
        buffer.add(obs=[t, 0], act=[0.0], next_obs=[t + 1, 0])
    with pytest.raises(ValueError, match="goal has shape"):
        buffer.on_episode_end([1.0, 2.0, 3.0])  # wrong goal shape
    with pytest.raises(NonFiniteError):
        buffer.on_episode_end([np.nan, 0.0])
    assert buffer.get_stored_size() == 0
    buffer.on_episode_end([5.0, 0.0])  # the retry stores the episode
    assert buffer.get_stored_size() == 3 * 5
    failing = _cpprb()
    failing.reward_func = lambda s, a, g: 1 / 0
    failing.add(obs=[0, 0], act=[0.0], next_obs=[1, 0])
    with pytest.raises(ZeroDivisionError):
        failing.on_episode_end([0.0, 0.0])
    failing.reward_func = lambda s, a, g: np.zeros(len(s))
    failing.on_episode_end([0.0, 0.0])
    assert failing.get_stored_size() == 5


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("strategy", ["future", "random"])
@pytest.mark.parametrize("failure", ["raises", "nan"])
def test_cpprb_reward_func_failing_on_the_relabeled_copies_leaves_the_buffer_as_it_was(failure, strategy, prioritized):
    """reward_func is called twice at episode end: on the real goals, then on the relabeled ones, after the engine has
    stored the real episode. A failure in the second call must undo that (store, priorities, generator), keep the
    episode staged, and name reward_func; the retry then stores exactly what a run that never failed stores."""
    def reward(s, a, g):
        return -np.abs(s - g).sum(axis=1)

    def failing(s, a, g):
        if (g[:, 0] != 5.0).any():  # only the relabeled goals: the real call passes
            if failure == "raises":
                raise RuntimeError("user bug")
            return np.full(len(s), np.nan)
        return reward(s, a, g)

    def run(fail_once):
        buffer = _cpprb(strategy=strategy) if not prioritized else HindsightReplayBuffer(
            100, {"obs": {"shape": 2}, "act": {"shape": 1}, "next_obs": {"shape": 2}}, max_episode_len=10, seed=0,
            reward_func=reward, strategy=strategy)
        buffer.reward_func = reward
        for episode in range(3):
            for t in range(4):
                buffer.add(obs=[t, episode], act=[0.0], next_obs=[t + 1, episode])
            if fail_once and episode == 2:
                buffer.reward_func = failing
                with pytest.raises((RuntimeError, NonFiniteError)) as caught:
                    buffer.on_episode_end([5.0, 0.0])
                assert "reward_func" in str(caught.value) + " ".join(getattr(caught.value, "__notes__", []))
                assert "stays staged" in " ".join(caught.value.__notes__)
                assert buffer.get_stored_size() == 2 * 4 * 5
                buffer.reward_func = reward
            buffer.on_episode_end([5.0, 0.0])
        return buffer

    expected, retried = run(False), run(True)
    assert retried.get_stored_size() == expected.get_stored_size() == 3 * 4 * 5
    # everything stored, and the next draw (the generator was put back too)
    for got, want in [(retried.get_all_transitions(), expected.get_all_transitions()), (retried.sample(64), expected.sample(64))]:
        for key, values in want.items():
            np.testing.assert_array_equal(got[key], values, err_msg=key)


@pytest.mark.parametrize("value", [2.5, "3", True])
def test_adapters_refuse_non_integer_counts_naming_the_users_argument(value):
    with pytest.raises(ConfigError, match="additional_goals="):
        _cpprb(additional_goals=value)
    env = BitFlippingEnv(n_bits=4, continuous=True)
    for name in ("num_goals", "storage_size"):
        with pytest.raises(ConfigError, match=f"{name}="):
            HerReplayStorage(observation_space=env.observation_space, action_space=env.action_space,
                             reward_fn=env.compute_reward, **{name: value})


def test_an_offline_buffer_too_small_for_an_episodes_copies_warns():
    env = BitFlippingEnv(n_bits=4, continuous=True)
    buffer = HerReplayBuffer(10, env.observation_space, env.action_space, env=env, n_sampled_goal=4,
                             online_sampling=False, max_episode_length=4, seed=0)
    obs, _ = env.reset(seed=0)
    with pytest.warns(UserWarning, match="keeps none. Raise buffer_size to at least 20"):
        for t in range(4):
            next_obs, reward, *_ = env.step(env.action_space.sample())
            buffer.add(obs, next_obs, np.zeros(4, np.float32), reward, terminated=False, truncated=t == 3)
            obs = next_obs


@pytest.mark.parametrize(("field", "value", "named"), [
    ("action", "abc", "action holds"),
    ("reward", object(), "reward holds"),
    ("observation", ["a", "b", "c", "d"], "obs['observation'] holds"),
])
def test_add_with_values_that_are_not_numbers_names_the_argument(field, value, named):
    env = BitFlippingEnv(n_bits=4, continuous=True)
    buffer = HerReplayBuffer(1000, env.observation_space, env.action_space, env=env, seed=0)
    obs, _ = env.reset(seed=0)
    args = dict(obs=obs, next_obs=obs, action=np.zeros(4, np.float32), reward=0.0)
    if field == "observation":
        args["obs"] = {**obs, "observation": value}
    else:
        args[field] = value
    with pytest.raises(ValueError, match=rf"{re.escape(named)} .* not numbers: pass numeric arrays"):
        buffer.add(args["obs"], args["next_obs"], args["action"], args["reward"], terminated=False, truncated=False)
    assert len(buffer) == 0  # nothing stored
