"""BatchedHerBuffer: goals from the transition's own episode, at or after its next state, uniformly; relabeled rewards
and dones; the ring never serves a partly overwritten episode; exact resume; clear errors.

Every stored step is identifiable: env ``e``'s step at absolute row ``r`` has the observation ``(e, r, start)`` and
leads to the achieved goal ``(e, r)``, so a relabeled goal names the step it came from, and the tests compare what
is sampled with the episodes the feeder really ran.
"""

from __future__ import annotations

import copy
import math
from collections import Counter

import numpy as np
import pytest
import torch
from gymnasium import spaces

from herl.batched.buffer import BatchedHerBuffer
from herl.errors import ConfigError

STORED_REWARD_BASE = -1000.0
"""Stored rewards are ``-1000 - r``: never a value the test reward functions give."""
DESIRED_BASE = 100.0
"""Stored desired goals are ``(100 + e, start)``: never an achieved goal ``(e, r)``."""


def reward_fn(*, achieved_goal, desired_goal):
    """Asymmetric and keyword-only: a swap of the two goals or a positional call gives other numbers or fails."""
    return achieved_goal[..., 1] - 2.0 * desired_goal[..., 1]


def terminated_fn(*, achieved_goal, desired_goal):
    """Asymmetric: with a future goal (row r' >= r) true only for r' == r; swapped, always true."""
    return achieved_goal[..., 1] >= desired_goal[..., 1]


def space() -> spaces.Dict:
    return spaces.Dict({
        "observation": spaces.Box(-np.inf, np.inf, (3,), np.float32),
        "achieved_goal": spaces.Box(-np.inf, np.inf, (2,), np.float32),
        "desired_goal": spaces.Box(-np.inf, np.inf, (2,), np.float32),
    })


def make(capacity=64, n_envs=2, T=4, **kwargs) -> BatchedHerBuffer:
    kwargs.setdefault("compute_reward", reward_fn)
    kwargs.setdefault("seed", 0)
    kwargs.setdefault("action_space", spaces.Box(-1, 1, (2,), np.float32))
    return BatchedHerBuffer(capacity=capacity, n_envs=n_envs, observation_space=space(), max_episode_steps=T,
                            **kwargs)


class Feeder:
    """Steps a buffer's envs with identifiable transitions and remembers the episodes.

    ``lengths[e]``: the episode lengths env ``e`` cycles through; an episode shorter than the time limit ends by
    termination (as bit flipping ends on success), one of the limit's length by truncation.
    """

    def __init__(self, buffer: BatchedHerBuffer, lengths: list[list[int]]):
        self.buffer, self.lengths = buffer, lengths
        self.n, self.T = buffer.n_envs, buffer.max_episode_steps
        self.row = 0
        self.start = [0] * self.n
        self.count = [0] * self.n
        self.episode_of: dict[tuple[int, int], int] = {}  # (env, row) -> its episode's start row
        self.end_of: dict[tuple[int, int], int] = {}  # (env, start) -> last row, once ended

    def step(self, steps: int = 1) -> None:
        for _ in range(steps):
            r = self.row
            terminated, truncated = [], []
            for e in range(self.n):
                length = self.lengths[e][self.count[e] % len(self.lengths[e])]
                assert 1 <= length <= self.T
                done = r - self.start[e] + 1 == length
                terminated.append(done and length < self.T)
                truncated.append(done and length == self.T)
                self.episode_of[e, r] = self.start[e]
            starts = list(self.start)
            obs = {"observation": [[e, r, starts[e]] for e in range(self.n)],
                   "achieved_goal": [[e, r - 0.5] for e in range(self.n)],
                   "desired_goal": [[DESIRED_BASE + e, starts[e]] for e in range(self.n)]}
            final = {"observation": [[e, r + 0.5, starts[e]] for e in range(self.n)],
                     "achieved_goal": [[e, r] for e in range(self.n)],
                     "desired_goal": obs["desired_goal"]}
            tensors = lambda d: {k: torch.tensor(v, dtype=torch.float32) for k, v in d.items()}
            if self.buffer.discrete:
                actions = torch.tensor([(e + r) % 4 for e in range(self.n)])
            else:
                actions = torch.tensor([[e, r] for e in range(self.n)], dtype=torch.float32)
            self.buffer.add(tensors(obs), actions, torch.full((self.n,), STORED_REWARD_BASE) - r,
                            torch.tensor(terminated), torch.tensor(truncated), tensors(final))
            for e in range(self.n):
                if terminated[e] or truncated[e]:
                    self.end_of[e, self.start[e]] = r
                    self.start[e] = r + 1
                    self.count[e] += 1
            self.row += 1

    def valid(self) -> set[tuple[int, int]]:
        """(env, row) of the transitions that may be sampled: stored, and their episode's first row still stored."""
        low = max(self.row - self.buffer.rows, 0)
        return {(e, r) for (e, r), start in self.episode_of.items() if r >= low and start >= low}

    def last_row(self, e: int, r: int) -> int:
        """The last row of the episode of (e, r): its end, or the latest row while it runs."""
        return self.end_of.get((e, self.episode_of[e, r]), self.row - 1)


def decode(batch):
    """Per row: env, row, whether relabeled, and the (env, row) the goal came from (for relabeled rows)."""
    obs = batch.observations["observation"]
    goal = batch.observations["desired_goal"]
    env, row = obs[:, 0].long(), obs[:, 1].long()
    her = goal[:, 0] < DESIRED_BASE
    return env, row, her, goal[:, 0].long(), goal[:, 1].long()


def samples(buffer, n_batches=20, batch_size=1024):
    return [buffer.sample(batch_size) for _ in range(n_batches)]


# ----------------------------------------------------------------------------------------------------------------------
# which transitions and which goals


def test_batch_is_the_stored_transitions_with_types_and_shapes():
    buffer = make(n_envs=3, T=4, capacity=48)
    feeder = Feeder(buffer, [[4], [2, 3], [1, 4]])
    feeder.step(10)
    batch = buffer.sample(256)
    env, row, her, _, _ = decode(batch)
    assert batch.actions.shape == (256, 2) and batch.actions.dtype == torch.float32
    assert batch.rewards.shape == batch.dones.shape == (256, 1)
    assert batch.rewards.dtype == batch.dones.dtype == torch.float32
    for part in (batch.observations, batch.next_observations):
        assert {k: tuple(v.shape) for k, v in part.items()} == {"observation": (256, 3), "achieved_goal": (256, 2),
                                                                "desired_goal": (256, 2)}
    # every field of a row comes from the same stored step
    assert torch.equal(batch.actions, torch.stack([env, row], 1).float())
    assert torch.equal(batch.next_observations["achieved_goal"], torch.stack([env, row], 1).float())
    assert torch.equal(batch.next_observations["observation"][:, 1], row + 0.5)
    assert torch.equal(batch.observations["achieved_goal"][:, 1], row - 0.5)
    start = torch.tensor([feeder.episode_of[e, r] for e, r in zip(env.tolist(), row.tolist())])
    assert torch.equal(batch.observations["observation"][:, 2].long(), start)
    # relabeled rows got the same goal in obs and next obs; the others their stored goal
    assert torch.equal(batch.observations["desired_goal"], batch.next_observations["desired_goal"])
    stored_goal = torch.stack([env + DESIRED_BASE, start], 1).float()
    assert torch.equal(batch.observations["desired_goal"][~her], stored_goal[~her])
    assert 0 < int(her.sum()) < 256


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_goals_come_from_the_same_env_and_episode(strategy):
    """future: rows t..end; final: end; episode: start..end; never another env or episode (envs of different
    lengths, some ending early, desynchronized)."""
    buffer = make(n_envs=4, T=5, capacity=4 * 40, goal_selection_strategy=strategy)
    feeder = Feeder(buffer, [[5], [2, 5, 3], [1, 1, 4], [3]])
    feeder.step(33)  # finished and running episodes, no wrap yet
    for batch in samples(buffer, 5):
        env, row, her, goal_env, goal_row = decode(batch)
        for e, r, e2, r2 in zip(env[her].tolist(), row[her].tolist(), goal_env[her].tolist(), goal_row[her].tolist()):
            assert e2 == e
            start, last = feeder.episode_of[e, r], feeder.last_row(e, r)
            assert feeder.episode_of[e2, r2] == start
            if strategy == "future":
                assert r <= r2 <= last
            elif strategy == "final":
                assert r2 == last
            else:
                assert start <= r2 <= last


def exact_counts(buffer, feeder, n_batches):
    """Counts of (env, row, goal row) over the relabeled rows of ``n_batches`` batches."""
    counts = Counter()
    for batch in samples(buffer, n_batches, 4096):
        env, row, her, _, goal_row = decode(batch)
        counts.update(zip(env[her].tolist(), row[her].tolist(), goal_row[her].tolist()))
    return counts


def check_uniform(counts, expected_support):
    """Each (transition, goal) cell has the count its probability gives, within 5 standard deviations, and no cell
    outside the support appears (the end points included: a rounded float would halve them)."""
    assert set(counts) <= set(expected_support), set(counts) - set(expected_support)
    total = sum(counts.values())
    for cell, p in expected_support.items():
        mean = total * p
        assert abs(counts[cell] - mean) <= 5 * math.sqrt(mean * (1 - p)) + 1, (cell, counts[cell], mean)


def test_future_offsets_are_uniform_from_the_transition_to_the_episode_end_inclusive():
    buffer = make(n_envs=2, T=6, capacity=24, goal_selection_strategy="future")
    feeder = Feeder(buffer, [[6], [4, 2]])
    feeder.step(12)  # env 0: two episodes of 6; env 1: 4, 2, 4, 2: all ended, no wrap (rows=12)
    valid = feeder.valid()
    support = {}
    for e, r in valid:
        last = feeder.last_row(e, r)
        for r2 in range(r, last + 1):
            support[e, r, r2] = 1 / len(valid) / (last - r + 1)
    check_uniform(exact_counts(buffer, feeder, 30), support)


def test_episode_and_final_strategies_distribution():
    for strategy in ("episode", "final"):
        buffer = make(n_envs=2, T=6, capacity=24, goal_selection_strategy=strategy)
        feeder = Feeder(buffer, [[6], [4, 2]])
        feeder.step(12)
        valid = feeder.valid()
        support = {}
        for e, r in valid:
            start, last = feeder.episode_of[e, r], feeder.last_row(e, r)
            goals = range(start, last + 1) if strategy == "episode" else [last]
            for r2 in goals:
                support[e, r, r2] = 1 / len(valid) / len(goals)
        check_uniform(exact_counts(buffer, feeder, 20), support)


def test_transitions_are_drawn_uniformly():
    buffer = make(n_envs=3, T=4, capacity=3 * 8, n_sampled_goal=0)
    feeder = Feeder(buffer, [[4], [1, 3], [2]])
    feeder.step(19)  # wrapped: some envs' oldest episode is partly overwritten
    valid = feeder.valid()
    counts = Counter()
    for batch in samples(buffer, 20, 2048):
        env, row, _, _, _ = decode(batch)
        counts.update(zip(env.tolist(), row.tolist()))
    check_uniform(counts, {slot: 1 / len(valid) for slot in valid})


def test_running_episodes_take_goals_up_to_their_latest_step():
    buffer = make(n_envs=2, T=8, capacity=64, goal_selection_strategy="final")
    feeder = Feeder(buffer, [[8], [3, 8]])
    feeder.step(5)  # env 0 runs since row 0; env 1 ended at row 2 and runs since row 3
    env, row, her, goal_env, goal_row = decode(buffer.sample(2048))
    running = her & ((env == 0) | (row >= 3))
    assert running.any() and torch.all(goal_row[running] == 4)
    assert torch.all(goal_row[her & (env == 1) & (row < 3)] == 2)
    feeder.step(2)  # the running episodes grew: their goals follow
    env, row, her, goal_env, goal_row = decode(buffer.sample(2048))
    assert torch.all(goal_row[her & ((env == 0) | (row >= 3))] == 6)
    # future goals of a running episode are its steps from the transition's to the latest, every one of them
    buffer = make(n_envs=1, T=8, capacity=64, goal_selection_strategy="future")
    feeder = Feeder(buffer, [[8]])
    feeder.step(5)
    _, row, her, _, goal_row = decode(buffer.sample(4096))
    pairs = set(zip(row[her].tolist(), goal_row[her].tolist()))
    assert pairs == {(r, r2) for r in range(5) for r2 in range(r, 5)}


def test_sampling_the_first_step_works_and_empty_buffer_says_so():
    buffer = make()
    with pytest.raises(RuntimeError, match="empty"):
        buffer.sample(8)
    Feeder(buffer, [[4], [4]]).step(1)
    env, row, her, goal_env, goal_row = decode(buffer.sample(64))
    assert torch.all(row == 0) and torch.all(goal_row[her] == 0) and torch.all(goal_env[her] == env[her])


# ----------------------------------------------------------------------------------------------------------------------
# the ring


def test_partly_overwritten_episodes_are_never_sampled_and_later_ones_are():
    """After every step of a long run through the ring: exactly the transitions whose episode's first row is still
    stored are drawn (all of them, nothing else), and their goals stay inside their episode."""
    buffer = make(n_envs=3, T=4, capacity=3 * 8)
    feeder = Feeder(buffer, [[4, 1], [2, 3, 3], [1, 2, 4, 4]])
    for _ in range(40):
        feeder.step()
        valid = feeder.valid()
        assert len(buffer) == len(valid)
        seen = set()
        for batch in samples(buffer, 1, 1024):
            env, row, her, goal_env, goal_row = decode(batch)
            seen |= set(zip(env.tolist(), row.tolist()))
            for e, r, e2, r2 in zip(env[her].tolist(), row[her].tolist(), goal_env[her].tolist(),
                                    goal_row[her].tolist()):
                assert e2 == e and r <= r2 <= feeder.last_row(e, r)
                assert feeder.episode_of[e, r2] == feeder.episode_of[e, r]
        assert seen == valid, (feeder.row, seen ^ valid)
    assert feeder.row > 4 * buffer.rows  # wrapped several times


def test_an_episode_longer_than_the_ring_is_never_sampled():
    """An env that breaks its time limit loses its whole running episode once the ring reaches its start; its next
    episode is sampled again."""
    buffer = make(n_envs=2, T=2, capacity=8)  # 4 rows per env
    feeder = Feeder(buffer, [[2], [2]])
    feeder.T = 99
    feeder.lengths[1] = [6, 2]  # 6 > rows
    feeder.step(5)  # env 1's episode started at 0 and has lost row 0
    env, row, _, _, _ = decode(buffer.sample(512))
    assert torch.all(env == 0)
    feeder.step(1)  # it ends at row 5: its next episode starts at row 6
    feeder.step(1)
    env, row, _, _, _ = decode(buffer.sample(512))
    assert set(zip(env.tolist(), row.tolist())) == feeder.valid()
    assert (1, 6) in feeder.valid()


def test_no_sampleable_transition_is_an_error_on_the_cpu():
    buffer = make(n_envs=1, T=2, capacity=4)
    feeder = Feeder(buffer, [[9]])
    feeder.T = 99
    feeder.step(5)
    with pytest.raises(RuntimeError, match="max_episode_steps=2"):
        buffer.sample(4)
    assert len(buffer) == 0


# ----------------------------------------------------------------------------------------------------------------------
# rewards, dones, ratio


def test_relabeled_rewards_are_recomputed_by_keyword_and_others_stored():
    buffer = make(n_envs=3, T=5, capacity=3 * 10)
    feeder = Feeder(buffer, [[5], [2, 4], [1, 5, 3]])
    feeder.step(23)
    for batch in samples(buffer, 3):
        env, row, her, _, goal_row = decode(batch)
        rewards = batch.rewards[:, 0]
        assert torch.equal(rewards[~her], STORED_REWARD_BASE - row[~her].float())
        # reward(achieved = next achieved goal (e, r), desired = new goal (e, r2)) = r - 2 r2; swapped: r2 - 2 r
        assert torch.equal(rewards[her], (row[her] - 2 * goal_row[her]).float())


def test_dones_recomputed_with_compute_terminated_for_relabeled_rows_only():
    buffer = make(n_envs=3, T=5, capacity=3 * 10, compute_terminated=terminated_fn)
    feeder = Feeder(buffer, [[5], [2, 4], [1, 5, 3]])
    feeder.step(23)
    stored = {(e, r): 0.0 for (e, r) in feeder.episode_of}
    for (e, start), end in feeder.end_of.items():
        stored[e, end] = float(end - start + 1 < buffer.max_episode_steps)  # terminated, not truncated
    some_truncated = some_terminated = False
    for batch in samples(buffer, 3):
        env, row, her, _, goal_row = decode(batch)
        dones = batch.dones[:, 0]
        assert torch.equal(dones[her], (row[her] == goal_row[her]).float())  # swapped: all ones
        expected = torch.tensor([stored[e, r] for e, r in zip(env.tolist(), row.tolist())])
        assert torch.equal(dones[~her], expected[~her])
        ends = [feeder.last_row(e, r) == r and (e, feeder.episode_of[e, r]) in feeder.end_of
                for e, r in zip(env[~her].tolist(), row[~her].tolist())]
        some_terminated |= bool((dones[~her] == 1).any())
        some_truncated |= any(end and d == 0 for end, d in zip(ends, dones[~her].tolist()))
    assert some_terminated and some_truncated  # a time limit is not a done


def test_without_compute_terminated_relabeled_rows_keep_the_stored_flag():
    buffer = make(n_envs=2, T=4, capacity=16)
    feeder = Feeder(buffer, [[2], [3]])  # every episode terminates early
    feeder.step(8)  # env 1's third episode runs
    batch = buffer.sample(2048)
    env, row, her, _, _ = decode(batch)
    ends = {(e, end) for (e, _), end in feeder.end_of.items()}
    expected = torch.tensor([float((e, r) in ends) for e, r in zip(env.tolist(), row.tolist())])
    assert torch.equal(batch.dones[:, 0], expected)
    assert her.any() and (expected[her] == 1).any() and (expected[her] == 0).any()


@pytest.mark.parametrize("k", [0, 1, 4])
def test_relabeled_share_is_k_over_k_plus_1(k):
    buffer = make(n_envs=2, T=4, capacity=16, n_sampled_goal=k)
    Feeder(buffer, [[4], [3]]).step(9)
    n, batch_size = 0, 1024
    for batch in samples(buffer, 20, batch_size):
        _, row, her, _, _ = decode(batch)
        n += int(her.sum())
        # as HerReplayBuffer: the relabeled rows are the batch's last
        assert torch.equal(her, torch.arange(batch_size) >= batch_size - int(her.sum()))
        if k == 0:
            assert torch.equal(batch.rewards[:, 0], STORED_REWARD_BASE - row.float())
    total, p = 20 * batch_size, k / (k + 1)
    assert abs(n - total * p) <= 5 * math.sqrt(total * p * (1 - p)) + (0 if k == 0 else 1)


# ----------------------------------------------------------------------------------------------------------------------
# actions, determinism, state


def test_discrete_actions_come_back_as_int64_columns():
    buffer = make(action_space=spaces.Discrete(4))
    feeder = Feeder(buffer, [[4], [2]])
    feeder.step(6)
    buffer.add(*_one_step(2, actions=torch.zeros(2, 1, dtype=torch.int64)))  # (n_envs, 1) is taken too
    batch = buffer.sample(128)
    env, row, _, _, _ = decode(batch)
    assert batch.actions.shape == (128, 1) and batch.actions.dtype == torch.int64
    expected = torch.where(row < 6, (env + row) % 4, 0)
    assert torch.equal(batch.actions[:, 0], expected)


def _one_step(n, *, actions=None, row=6):
    """Step ``row`` of ``n`` envs, as the feeder writes it (an episode started at row 0, still running)."""
    envs = torch.arange(n, dtype=torch.float32)
    column = lambda value: torch.full((n,), float(value))
    obs = {"observation": torch.stack([envs, column(row), column(0)], 1),
           "achieved_goal": torch.stack([envs, column(row - 0.5)], 1),
           "desired_goal": torch.stack([envs + DESIRED_BASE, column(0)], 1)}
    final = {"observation": torch.stack([envs, column(row + 0.5), column(0)], 1),
             "achieved_goal": torch.stack([envs, column(row)], 1),
             "desired_goal": obs["desired_goal"].clone()}
    if actions is None:
        actions = torch.stack([envs, column(row)], 1)
    return obs, actions, column(STORED_REWARD_BASE - row), torch.zeros(n, dtype=torch.bool), \
        torch.zeros(n, dtype=torch.bool), final


def assert_same_batch(a, b):
    for part in ("observations", "next_observations"):
        for key in getattr(a, part):
            assert torch.equal(getattr(a, part)[key], getattr(b, part)[key]), (part, key)
    for field in ("actions", "rewards", "dones"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field


def test_same_seed_same_batches_other_seed_others():
    batches = []
    for seed in (3, 3, 4):
        buffer = make(n_envs=3, T=4, capacity=24, seed=seed, compute_terminated=terminated_fn)
        Feeder(buffer, [[4], [1, 3], [2]]).step(15)
        batches.append([buffer.sample(256) for _ in range(3)])
    for a, b in zip(batches[0], batches[1]):
        assert_same_batch(a, b)
    assert not torch.equal(batches[0][0].actions, batches[2][0].actions)


@pytest.mark.parametrize("steps", [5, 30])  # filled in part; wrapped
def test_state_dict_round_trip_samples_and_continues_exactly(steps):
    lengths = [[4], [1, 3], [2, 2, 4]]
    original = make(n_envs=3, T=4, capacity=24, seed=1, compute_terminated=terminated_fn)
    feeder = Feeder(original, lengths)
    feeder.step(steps)
    original.sample(64)  # the generator has moved on
    # through NumPy, as BatchedTrainer.save and load carry it
    state = {k: torch.from_numpy(v.detach().cpu().numpy().copy()) for k, v in original.state_dict().items()}
    restored = make(n_envs=3, T=4, capacity=24, seed=99, compute_terminated=terminated_fn)
    restored.load_state_dict(state)
    assert len(restored) == len(original)
    for _ in range(3):
        assert_same_batch(original.sample(256), restored.sample(256))
    # both continue alike: the same new steps, the same book-keeping, the same batches
    twin = Feeder.__new__(Feeder)
    twin.__dict__.update(copy.deepcopy({k: v for k, v in feeder.__dict__.items() if k != "buffer"}), buffer=restored)
    feeder.step(9)
    twin.step(9)
    assert_same_batch(original.sample(256), restored.sample(256))


def test_load_state_dict_refuses_another_buffer_shape():
    small = make(n_envs=2, T=4, capacity=16)
    Feeder(small, [[4], [4]]).step(20)
    with pytest.raises(ValueError, match="steps per env"):
        make(n_envs=2, T=4, capacity=32).load_state_dict(small.state_dict())
    with pytest.raises(ValueError, match="obs/'observation'|obs/observation"):
        other = make(n_envs=2, T=4, capacity=16)
        state = dict(small.state_dict())
        state["obs/observation"] = state["obs/observation"][:, :, :2]
        other.load_state_dict(state)


def test_sampling_never_changes_storage():
    buffer = make(n_envs=3, T=4, capacity=24, compute_terminated=terminated_fn)
    Feeder(buffer, [[4], [1, 3], [2]]).step(30)
    before = {k: v.clone() for k, v in buffer.state_dict().items()}
    batch = buffer.sample(512)
    for part in (batch.observations, batch.next_observations):
        for value in part.values():
            value.add_(1000)  # a learner writing into its batch reaches nothing stored
    after = buffer.state_dict()
    for key, value in before.items():
        if key != "generator":
            assert torch.equal(value, after[key]), key


# ----------------------------------------------------------------------------------------------------------------------
# errors


def test_constructor_errors_say_what_to_do():
    with pytest.raises(ConfigError, match=r"capacity=15 .*at least 2 \* n_envs \* max_episode_steps = 16"):
        make(capacity=15, n_envs=2, T=4)
    make(capacity=16, n_envs=2, T=4)
    with pytest.raises(ConfigError, match="goal_selection_strategy='sideways'.*'future', 'final', 'episode'"):
        make(goal_selection_strategy="sideways")
    with pytest.raises(ConfigError, match="'random' goals from other episodes are for HerReplayBuffer"):
        make(goal_selection_strategy="random")
    with pytest.raises(ConfigError, match="n_sampled_goal=-1"):
        make(n_sampled_goal=-1)
    with pytest.raises(ConfigError, match="n_envs=0"):
        make(n_envs=0)
    with pytest.raises(ValueError, match=r"exactly the keys \['observation', 'achieved_goal', 'desired_goal'\]"):
        BatchedHerBuffer(capacity=64, n_envs=2, observation_space=spaces.Dict({"observation": space()["observation"]}),
                         action_space=spaces.Discrete(2), compute_reward=reward_fn, max_episode_steps=4)
    with pytest.raises(TypeError, match="Box or Discrete"):
        make(action_space=spaces.MultiBinary(3))
    with pytest.raises(TypeError, match="compute_reward must be"):
        make(compute_reward=None)


def test_add_errors_name_the_field_the_expected_and_the_given():
    buffer = make(n_envs=2)
    good = _one_step(2)

    def add_with(index, value, key=None):
        args = list(good)
        if key is None:
            args[index] = value
        else:
            args[index] = {**args[index], key: value}
        buffer.add(*args)

    with pytest.raises(ValueError, match=r"obs\['achieved_goal'\] has shape \(2, 3\), expected \(2, 2\)"):
        add_with(0, torch.zeros(2, 3), "achieved_goal")
    with pytest.raises(TypeError, match=r"final_obs\['desired_goal'\] must be a torch tensor"):
        add_with(5, None, "desired_goal")
    with pytest.raises(ValueError, match=r"actions has shape \(3, 2\), expected \(2, 2\)"):
        add_with(1, torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"reward has shape \(2, 1\), expected \(2,\)"):
        add_with(2, torch.zeros(2, 1))
    with pytest.raises(ValueError, match=r"terminated has dtype torch.float32, expected bools"):
        add_with(3, torch.zeros(2))
    with pytest.raises(ValueError, match=r"truncated is on meta but the buffer on cpu"):
        add_with(4, torch.zeros(2, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match=r"obs\['observation'\] has dtype torch.int64, expected floats"):
        add_with(0, torch.zeros(2, 3, dtype=torch.int64), "observation")
    discrete = make(n_envs=2, action_space=spaces.Discrete(4))
    args = list(good)
    args[1] = torch.zeros(2)
    with pytest.raises(ValueError, match="actions has dtype torch.float32, expected integer indices"):
        discrete.add(*args)
    assert buffer.written == 0 and discrete.written == 0  # nothing half-stored
    buffer.add(*good)
    assert buffer.written == 1


def test_goal_function_of_the_wrong_shape_is_named():
    buffer = make(compute_reward=lambda *, achieved_goal, desired_goal: (achieved_goal - desired_goal)[..., :1])
    Feeder(buffer, [[4], [4]]).step(4)
    with pytest.raises(ValueError, match=r"compute_reward\(achieved_goal, desired_goal\) of 32 goals gave shape "
                                         r"\(32, 1\).*expected a tensor of shape \(32,\)"):
        buffer.sample(32)
    with pytest.raises(ConfigError, match="batch_size=0"):
        buffer.sample(0)
