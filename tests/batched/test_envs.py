"""The batched goal envs: the same numbers as their single-env twins, the interface's promises, and the checker."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from herl.batched import (
    BatchedBitFlipping,
    BatchedGoalEnv,
    BatchedPointReach,
    BatchedPush,
    BatchedStep,
    check_batched_goal_env,
)
from herl.envs import BitFlippingEnv, GoalEnvError, PointReachEnv
from herl.errors import ConfigError

KEYS = ("observation", "achieved_goal", "desired_goal")


def _numpy_obs(obs: dict[str, torch.Tensor], i: int) -> dict[str, np.ndarray]:
    return {key: obs[key][i].numpy() for key in KEYS}


def _assert_same_obs(batched: dict[str, np.ndarray], single: dict[str, np.ndarray], where: str) -> None:
    for key in KEYS:
        assert batched[key].dtype == np.float32, (where, key)
        # Bit for bit: both envs compute the same float32 operations in the same order.
        assert np.array_equal(batched[key], np.asarray(single[key], dtype=np.float32)), (where, key, batched[key],
                                                                                         single[key])


# ---------------------------------------------------------------------------------------------------------------------
# PointReach


@pytest.mark.parametrize("dim", [2, 3])
def test_point_reach_matches_point_reach_env_to_the_bit(dim):
    n, steps = 8, 100  # two episode boundaries, at 50 and 100 steps
    env = BatchedPointReach(n_envs=n, dim=dim)
    env.reset(seed=1)
    # Start some points in a corner with their goals near, so that position clipping and success both happen.
    state = env.state_dict()
    state["position"][:3] = 1.0
    state["goal"][:3] = 0.97
    env.load_state_dict(state)
    obs = {"achieved_goal": state["position"], "desired_goal": state["goal"]}

    singles = []
    for i in range(n):
        single = PointReachEnv(dim=dim)
        single.reset(seed=i)
        single.position, single.goal = obs["achieved_goal"][i].numpy().copy(), obs["desired_goal"][i].numpy().copy()
        singles.append(single)

    rng = np.random.default_rng(0)
    successes = clipped = 0
    for t in range(steps):
        position = np.stack([single.position for single in singles])
        goal = np.stack([single.goal for single in singles])
        # Half the envs steer to their goal (overshooting the [-1, 1] action box), half act at random.
        steer = (goal - position) / 0.1 * rng.uniform(0.5, 3.0, size=(n, 1))
        random = rng.uniform(-1.5, 1.5, size=(n, dim))
        actions = np.where(np.arange(n)[:, None] % 2 == 0, steer, random).astype(np.float32)

        step = env.step(torch.from_numpy(actions))
        for i, single in enumerate(singles):
            single_obs, reward, terminated, truncated, info = single.step(actions[i])
            where = f"step {t}, env {i}"
            _assert_same_obs(_numpy_obs(step.final_obs, i), single_obs, where)
            assert step.reward[i].item() == reward, where
            assert step.success[i].item() == info["is_success"], where
            assert step.terminated[i].item() is terminated is False, where
            assert step.truncated[i].item() is truncated, where
            if truncated:
                single.reset()
                single.position = step.obs["achieved_goal"][i].numpy().copy()
                single.goal = step.obs["desired_goal"][i].numpy().copy()
            # The observation to act on: the same step's, or the new episode's first (velocity zero).
            _assert_same_obs(_numpy_obs(step.obs, i), single._get_obs(), where)
        successes += int(step.success.sum())
        clipped += int((step.final_obs["achieved_goal"].abs() == 1.0).sum())
    assert successes > 0 and clipped > 0  # both paths were exercised
    assert step.truncated.all()  # the run ended on the second boundary


def test_point_reach_spaces_are_point_reach_envs():
    env = BatchedPointReach(n_envs=2, dim=3, max_speed=0.2)
    single = PointReachEnv(dim=3, max_speed=0.2)
    assert env.single_observation_space == single.observation_space
    assert env.single_action_space == single.action_space


def test_point_reach_compute_reward_matches_point_reach_env_on_relabeled_batches():
    env = BatchedPointReach(n_envs=1, dim=3, distance_threshold=0.3)
    single = PointReachEnv(dim=3, distance_threshold=0.3)
    rng = np.random.default_rng(0)
    achieved = rng.uniform(-1, 1, size=(64, 4, 3)).astype(np.float32)
    desired = (achieved + rng.uniform(-0.25, 0.25, size=achieved.shape)).astype(np.float32)
    rewards = env.compute_reward(torch.from_numpy(achieved), torch.from_numpy(desired))
    assert rewards.shape == (64, 4) and rewards.dtype == torch.float32
    expected = single.compute_reward(achieved, desired, {})
    assert np.array_equal(rewards.numpy(), expected)
    assert 0.1 < (expected == 0).mean() < 0.9
    # A transposed, non-contiguous batch gives the same rewards: the sum's order does not depend on the layout.
    achieved_t, desired_t = torch.from_numpy(achieved).transpose(0, 1), torch.from_numpy(desired).transpose(0, 1)
    assert torch.equal(env.compute_reward(achieved_t, desired_t).T, rewards)


def test_point_reach_success_at_the_threshold_is_point_reach_envs():
    # Squared distances within a few ulps of the threshold's square. There torch's float32 square root (an ulp off
    # for some inputs on the CPU) would decide differently from NumPy's for about a third of the thresholds.
    rng = np.random.default_rng(1)
    for threshold in rng.uniform(0.01, 0.5, size=30).tolist():  # Python floats: NumPy compares them in float32
        env = BatchedPointReach(n_envs=1, distance_threshold=threshold)
        single = PointReachEnv(distance_threshold=threshold)
        angles = rng.uniform(0, 2 * np.pi, size=(300, 1))
        radius = np.float32(threshold) * (1 + rng.uniform(-2e-7, 2e-7, size=(300, 1)))
        achieved = (np.hstack([np.cos(angles), np.sin(angles)]) * radius).astype(np.float32)
        desired = np.zeros_like(achieved)
        rewards = env.compute_reward(torch.from_numpy(achieved), torch.from_numpy(desired)).numpy()
        expected = single.compute_reward(achieved, desired, {})
        assert np.array_equal(rewards, expected), threshold
        assert 0 < expected.mean() + 1 < 1  # both sides of the threshold


# ---------------------------------------------------------------------------------------------------------------------
# Bit flipping


def test_bit_flipping_matches_bit_flipping_env():
    n, n_bits, steps = 8, 4, 60
    env = BatchedBitFlipping(n_envs=n, n_bits=n_bits)
    obs = env.reset(seed=0)
    singles = []
    for i in range(n):
        single = BitFlippingEnv(n_bits)
        single.reset(seed=i)
        single.state = obs["achieved_goal"][i].numpy().astype(np.int8)
        singles.append(single)

    rng = np.random.default_rng(0)
    early_ends = both = 0
    for t in range(steps):
        state = np.stack([single.state for single in singles])
        # Mostly flip a bit that is still 0, so that episodes succeed at different steps; sometimes any bit.
        towards = np.argmin(state, axis=1)
        actions = np.where(rng.uniform(size=n) < 0.7, towards, rng.integers(0, n_bits, size=n))
        step = env.step(torch.from_numpy(actions))
        for i, single in enumerate(singles):
            single_obs, reward, terminated, truncated, info = single.step(int(actions[i]))
            where = f"step {t}, env {i}"
            _assert_same_obs(_numpy_obs(step.final_obs, i), single_obs, where)
            assert step.reward[i].item() == reward, where
            assert step.success[i].item() == info["is_success"], where
            assert step.terminated[i].item() is terminated, where
            assert step.truncated[i].item() is truncated, where
            if terminated or truncated:
                single.reset()
                single.state = step.obs["achieved_goal"][i].numpy().astype(np.int8)
            _assert_same_obs(_numpy_obs(step.obs, i), single._get_obs(), where)
        early_ends += int((step.terminated & ~step.truncated).sum())
        both += int((step.terminated & step.truncated).sum())
    assert early_ends > 0 and both > 0  # episodes of different lengths, and success on the last step


def test_bit_flipping_sets_both_flags_when_success_meets_the_time_limit():
    env = BatchedBitFlipping(n_envs=2, n_bits=3, max_episode_steps=2)
    env.reset(seed=0)
    state = env.state_dict()
    state["state"][:] = torch.tensor([True, False, True])
    state["elapsed_steps"][:] = torch.tensor([1, 0])
    env.load_state_dict(state)
    step = env.step(torch.tensor([1, 1]))
    assert step.terminated.tolist() == [True, True] and step.success.tolist() == [True, True]
    assert step.truncated.tolist() == [True, False]
    assert step.reward.tolist() == [0.0, 0.0] and not torch.signbit(step.reward).any()  # 0.0, not -0.0
    assert env.elapsed_steps.tolist() == [0, 0]


def test_bit_flipping_compute_terminated_matches_bit_flipping_env():
    env = BatchedBitFlipping(n_envs=1, n_bits=3)
    single = BitFlippingEnv(3)
    goals = torch.tensor([[[0, 1, 1], [1, 1, 1]], [[1, 1, 1], [0, 0, 0]]], dtype=torch.float32)
    desired = torch.ones_like(goals)
    terminated = env.compute_terminated(goals, desired)
    assert terminated.dtype == torch.bool and terminated.shape == (2, 2)
    assert np.array_equal(terminated.numpy(), single.compute_terminated(goals.numpy(), desired.numpy(), {}))
    assert np.array_equal(env.compute_reward(goals, desired).numpy(), single.compute_reward(goals.numpy(),
                                                                                             desired.numpy(), {}))


def test_bit_flipping_default_time_limit_is_n_bits():
    assert BatchedBitFlipping(n_envs=1, n_bits=7).max_episode_steps == 7
    assert BatchedBitFlipping(n_envs=1, n_bits=7, max_episode_steps=3).max_episode_steps == 3


def test_bit_flipping_refuses_actions_outside_the_bits():
    env = BatchedBitFlipping(n_envs=2, n_bits=3)
    env.reset(seed=0)
    for bad in ([0, 3], [-1, 0]):
        with pytest.raises(ValueError, match=r"outside \[0, 3\)"):
            env.step(torch.tensor(bad))
    with pytest.raises(ValueError, match="integer indices"):
        env.step(torch.tensor([0.0, 1.0]))


# ---------------------------------------------------------------------------------------------------------------------
# Push


def _push_env(pusher, puck, goal, **kwargs) -> BatchedPush:
    env = BatchedPush(n_envs=len(pusher), **kwargs)
    env.reset(seed=0)
    env.load_state_dict({**env.state_dict(), "pusher": torch.tensor(pusher), "puck": torch.tensor(puck),
                         "goal": torch.tensor(goal)})
    return env


def test_push_moves_the_puck_only_when_the_pusher_touches_it():
    # env 0 pushes the puck ahead of it; env 1 moves beside it without touching; env 2 lands on the puck's centre at
    # each step, so the puck goes along the action
    env = _push_env([[-0.3, 0.0], [-0.3, 0.5], [0.2, 0.1]], [[0.0, 0.0], [0.0, 0.0], [0.2, 0.2]],
                    [[0.5, 0.0], [0.5, 0.0], [0.5, 0.5]])
    for _ in range(5):
        step = env.step(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))
    pusher, puck = step.final_obs["observation"][:, :2], step.final_obs["achieved_goal"]
    torch.testing.assert_close(pusher, torch.tensor([[0.2, 0.0], [0.2, 0.5], [0.2, 0.6]]))
    torch.testing.assert_close(puck[0], torch.tensor([0.3, 0.0]))  # kept at the contact radius ahead of the pusher
    torch.testing.assert_close(puck[1], torch.tensor([0.0, 0.0]))  # never touched
    torch.testing.assert_close(puck[2], torch.tensor([0.2, 0.7]))  # pushed along the action from the centre
    observation = step.final_obs["observation"]
    torch.testing.assert_close(observation[:, 2:4], puck)
    torch.testing.assert_close(observation[:, 4:6], puck - pusher)
    torch.testing.assert_close(observation[:, 6:], torch.tensor([[0.1, 0.0], [0.1, 0.0], [0.0, 0.1]]))


def test_push_rewards_the_pucks_place_not_the_pushers():
    env = _push_env([[0.5, 0.0], [-0.9, -0.9]], [[0.0, 0.0], [0.5, 0.5]], [[0.5, 0.0], [0.52, 0.5]])
    step = env.step(torch.zeros(2, 2))
    assert step.reward.tolist() == [-1.0, 0.0] and step.success.tolist() == [False, True]
    assert torch.equal(env.compute_reward(step.final_obs["achieved_goal"], step.final_obs["desired_goal"]), step.reward)
    assert not step.terminated.any()


def test_push_restarts_its_episodes_in_the_square_with_pucks_and_goals_inside():
    env = BatchedPush(n_envs=500, max_episode_steps=3)
    obs = env.reset(seed=1)
    for _ in range(3):
        step = env.step(torch.rand(500, 2) * 2 - 1)
    assert step.truncated.all() and not torch.equal(step.obs["achieved_goal"], step.final_obs["achieved_goal"])
    for o in (obs, step.obs):
        assert o["achieved_goal"].abs().max() <= 0.6 and o["desired_goal"].abs().max() <= 0.6
        assert o["observation"][:, :2].abs().max() <= 1.0


# ---------------------------------------------------------------------------------------------------------------------
# The interface's promises


def _envs() -> list[BatchedGoalEnv]:
    return [BatchedPointReach(n_envs=5), BatchedPointReach(n_envs=3, dim=4, max_episode_steps=7),
            BatchedBitFlipping(n_envs=6, n_bits=3), BatchedBitFlipping(n_envs=1, n_bits=1),
            BatchedPush(n_envs=5), BatchedPush(n_envs=2, contact_radius=0.3, max_episode_steps=4)]


@pytest.mark.parametrize("env", _envs(), ids=lambda env: f"{type(env).__name__}-{env.n_envs}")
def test_envs_pass_the_checker(env):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_batched_goal_env(env)


@pytest.mark.parametrize("make", [lambda: BatchedPointReach(n_envs=4), lambda: BatchedBitFlipping(n_envs=4, n_bits=3),
                                  lambda: BatchedPush(n_envs=4, max_episode_steps=6)])
def test_state_dict_continues_bit_identically_in_a_new_env(make):
    env, other = make(), make()
    env.reset(seed=3)
    actions = [_actions(env, seed) for seed in range(2 * env.max_episode_steps)]
    for action in actions[:5]:
        env.step(action)
    other.load_state_dict({key: value.clone() for key, value in env.state_dict().items()})
    for action in actions[5:]:
        a, b = env.step(action), other.step(action)
        for field in ("reward", "terminated", "truncated", "success"):
            assert torch.equal(getattr(a, field), getattr(b, field))
        for key in KEYS:
            assert torch.equal(a.obs[key], b.obs[key]) and torch.equal(a.final_obs[key], b.final_obs[key])


def test_load_state_dict_refuses_another_envs_state():
    state = BatchedPointReach(n_envs=4).state_dict()
    with pytest.raises(ValueError, match="'position' is .*expected \\(3, 2\\).*same arguments"):
        BatchedPointReach(n_envs=3).load_state_dict(state)
    del state["generator"]
    with pytest.raises(ValueError, match="lacks \\['generator'\\]"):
        BatchedPointReach(n_envs=4).load_state_dict(state)


def test_seeded_resets_repeat_and_unseeded_envs_differ():
    first = BatchedPointReach(n_envs=4).reset(seed=5)
    again = BatchedPointReach(n_envs=4).reset(seed=5)
    other = BatchedPointReach(n_envs=4).reset(seed=6)
    assert all(torch.equal(first[key], again[key]) for key in KEYS)
    assert not torch.equal(first["achieved_goal"], other["achieved_goal"])
    # Never seeded: drawn from the operating system's entropy, as gymnasium's envs are.
    assert not torch.equal(BatchedPointReach(n_envs=4).reset()["achieved_goal"],
                           BatchedPointReach(n_envs=4).reset()["achieved_goal"])


@pytest.mark.parametrize("env", _envs()[::2], ids=lambda env: type(env).__name__)
def test_step_before_reset_raises(env):
    with pytest.raises(RuntimeError, match=r"before reset\(\)"):
        env.step(_actions(env, 0))


def test_point_reach_refuses_actions_of_the_wrong_shape_or_type():
    env = BatchedPointReach(n_envs=3)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(3,\), expected \(3, 2\)"):
        env.step(torch.zeros(3))
    with pytest.raises(ValueError, match="Box actions are floats"):
        env.step(torch.zeros((3, 2), dtype=torch.int64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        env.step(np.zeros((3, 2), dtype=np.float32))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: BatchedPointReach(n_envs=0), "n_envs=0 is not allowed"),
        (lambda: BatchedPointReach(n_envs=2, max_speed=0.0), "max_speed=0.0 is not allowed"),
        (lambda: BatchedPointReach(n_envs=2, max_speed=1e-50), "float32 can hold"),
        (lambda: BatchedPointReach(n_envs=2, distance_threshold=-1.0), "distance_threshold=-1.0"),
        (lambda: BatchedPointReach(n_envs=2, max_episode_steps=None), "max_episode_steps=None"),
        (lambda: BatchedBitFlipping(n_envs=2, n_bits=0), "n_bits=0 is not allowed"),
        (lambda: BatchedBitFlipping(n_envs=2.5), "n_envs=2.5"),
        (lambda: BatchedBitFlipping(n_envs=2, max_episode_steps=0), "max_episode_steps=0"),
        (lambda: BatchedPointReach(n_envs=2).reset(seed=-1), "seed=-1"),
    ],
)
def test_bad_arguments_are_refused_by_name(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_constructors_are_keyword_only():
    with pytest.raises(TypeError):
        BatchedPointReach(4)
    with pytest.raises(TypeError):
        BatchedBitFlipping(4, 10)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("make", [lambda device: BatchedPointReach(n_envs=64, dim=3, device=device),
                                  lambda device: BatchedBitFlipping(n_envs=64, n_bits=4, device=device)])
def test_cuda_envs_pass_the_checker_and_step_as_on_the_cpu(make):
    cpu, cuda = make("cpu"), make("cuda")
    assert cuda.device == torch.device("cuda", torch.cuda.current_device())
    check_batched_goal_env(cuda)
    cpu.reset(seed=0)
    cuda.reset(seed=0)
    # The same state on both devices (each keeps its own generator, whose draws differ between devices).
    cuda.load_state_dict({**cpu.state_dict(), "generator": cuda.state_dict()["generator"]})
    for seed in range(cpu.max_episode_steps - 1 if isinstance(cpu, BatchedPointReach) else 1):  # before restarts
        actions = _actions(cpu, seed)
        a, b = cpu.step(actions), cuda.step(actions.to(cuda.device))
        for field in ("reward", "terminated", "truncated", "success"):
            assert torch.equal(getattr(a, field), getattr(b, field).cpu()), (seed, field)
        for key in KEYS:
            assert torch.equal(a.final_obs[key], b.final_obs[key].cpu()), (seed, key)


def _actions(env: BatchedGoalEnv, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if isinstance(env, BatchedBitFlipping):
        return torch.randint(0, env.n_bits, (env.n_envs,), generator=generator)
    return torch.rand((env.n_envs, env.dim), generator=generator) * 2 - 1


# ---------------------------------------------------------------------------------------------------------------------
# The checker catches broken envs


class _RewardForgetsSuccess(BatchedBitFlipping):
    def compute_reward(self, achieved_goal, desired_goal):
        return torch.full(achieved_goal.shape[:-1], -1.0)


class _TerminatedNotOverridden(BatchedPointReach):
    """Ends episodes on success, but compute_terminated is still the base class's (never)."""

    def step(self, actions):
        step = super().step(actions)
        return step._replace(terminated=step.success)


class _Float64Reward(BatchedPointReach):
    def step(self, actions):
        step = super().step(actions)
        return step._replace(reward=step.reward.double())


class _NoAutoReset(BatchedPointReach):
    def step(self, actions):
        step = super().step(actions)
        return step._replace(obs=step.final_obs)


class _NeverTruncates(BatchedPointReach):
    def step(self, actions):
        step = super().step(actions)
        return step._replace(truncated=torch.zeros_like(step.truncated))


class _StateWithoutGenerator(BatchedPointReach):
    def state_dict(self):
        state = super().state_dict()
        del state["generator"]
        return state

    def load_state_dict(self, state):
        self._position, self._velocity, self._goal = (state[key].clone() for key in ("position", "velocity", "goal"))
        self._elapsed, self._started = state["elapsed_steps"].clone(), bool(state["started"])


class _SeedIgnored(BatchedPointReach):
    def reset(self, seed=None):
        return super().reset(seed=None)


class _RewardNotVectorized(BatchedPointReach):
    def compute_reward(self, achieved_goal, desired_goal):
        flat = super().compute_reward(achieved_goal.reshape(-1, self.dim), desired_goal.reshape(-1, self.dim))
        return flat if achieved_goal.dim() == 2 else flat.reshape(-1)


class _StepWritesIntoOldObs(BatchedPointReach):
    def step(self, actions):
        step = super().step(actions)
        if getattr(self, "_last", None) is not None:
            self._last.add_(1.0)
        self._last = step.obs["achieved_goal"]
        return step


class _ReturnsTuple(BatchedPointReach):
    def step(self, actions):
        return tuple(super().step(actions))


@pytest.mark.parametrize(
    "env, match",
    [
        (_RewardForgetsSuccess(n_envs=8, n_bits=2), "compute_reward disagrees with step"),
        (_TerminatedNotOverridden(n_envs=8, distance_threshold=0.5), "compute_terminated disagrees with step"),
        (_Float64Reward(n_envs=3), "reward has dtype torch.float64, expected torch.float32"),
        (_NoAutoReset(n_envs=3, max_episode_steps=5), "obs equals final_obs: step must restart the ended envs"),
        (_NeverTruncates(n_envs=3, max_episode_steps=5), "reaching max_episode_steps=5, but truncated is False"),
        (_StateWithoutGenerator(n_envs=3, max_episode_steps=5), r"load_state_dict\(state_dict\(\)\).*generator"),
        (_SeedIgnored(n_envs=3),
         r"reset\(seed=12345\) twice gave different 'observation' "
         r"\(\d+ of 12 entries, by at most [\d.e-]+, in columns"),
        (_RewardNotVectorized(n_envs=3), r"goals of shape \(2, n_envs, goal_dim\)"),
        (_StepWritesIntoOldObs(n_envs=3), "changed an earlier step's obs\\['achieved_goal'\\] in place"),
        (_ReturnsTuple(n_envs=3), "return a herl.batched.BatchedStep"),
    ],
    ids=lambda value: type(value).__name__.strip("_") if isinstance(value, BatchedGoalEnv) else "",
)
def test_checker_names_what_is_broken(env, match):
    with pytest.raises(GoalEnvError, match=match):
        check_batched_goal_env(env, steps=20)


def test_checker_refuses_what_is_not_a_batched_env():
    with pytest.raises(GoalEnvError, match="subclass it"):
        check_batched_goal_env(PointReachEnv())
    assert issubclass(GoalEnvError, ValueError)
    assert BatchedStep._fields == ("obs", "final_obs", "reward", "terminated", "truncated", "success")
