"""herl.compat.cpprb.HindsightReplayBuffer: cpprb's documented behaviour, checked against cpprb itself and the engine."""

import copy

import numpy as np
import pytest
import torch
from gymnasium import spaces

from herl import HerReplayBuffer
from herl.compat.cpprb import HindsightReplayBuffer

cpprb = pytest.importorskip("cpprb")

# A counting world: the state of step t of episode e is [t, e], its goal is the step, t. A stored
# goal then tells which step it was taken from, and the episode's own desired goal, -1, is never
# achieved, so relabeled transitions are recognisable.
ENV_DICT = {"obs": {"shape": 2}, "act": {"shape": 1, "dtype": np.ubyte}, "next_obs": {"shape": 2}}
NO_GOAL = -1.0


def goal_func(states):
    return states[:, :1]


def reward_func(next_states, actions, goals):
    # uses all three arguments, asymmetrically, so that any mix-up changes the value
    return 100.0 * next_states[:, 0] + 10.0 * actions[:, 0] - goals[:, 0]


def make(cls, size=1000, env_dict=ENV_DICT, max_episode_len=20, **kwargs):
    kwargs = {"goal_func": goal_func, "goal_shape": (1,), "prioritized": False, **kwargs}
    return cls(size, env_dict, max_episode_len=max_episode_len, reward_func=reward_func, **kwargs)


def add_episode(buffer, length, episode=0, **extra):
    for t in range(length):
        buffer.add(obs=[t, episode], act=t % 3, next_obs=[t + 1, episode], **{k: v[t] for k, v in extra.items()})
    buffer.on_episode_end([NO_GOAL])


def future_offsets(sample):
    """For relabeled transitions: how many steps after the transition's own next state its goal lies."""
    relabeled = sample["goal"][:, 0] != NO_GOAL
    return relabeled, (sample["goal"][:, 0] - sample["next_obs"][:, 0])[relabeled]


# ---------------------------------------------------------------------------------------------- the interface
@pytest.mark.parametrize("prioritized", [False, True])
def test_sample_has_cpprbs_keys_shapes_and_dtypes(prioritized):
    env_dict = {**ENV_DICT, "done": {}, "mask": {"shape": (2, 2), "dtype": np.int32}}
    batches = []
    for cls in (HindsightReplayBuffer, cpprb.HindsightReplayBuffer):
        buffer = make(cls, env_dict=env_dict, prioritized=prioritized)
        add_episode(buffer, 5, done=np.arange(5) == 4, mask=np.ones((5, 2, 2)))
        batches.append(buffer.sample(7))
    ours, theirs = batches
    assert list(ours) == list(theirs)
    for key in theirs:
        assert (key, ours[key].shape, ours[key].dtype) == (key, theirs[key].shape, theirs[key].dtype)


@pytest.mark.parametrize("strategy", ["future", "episode", "random", "final"])
@pytest.mark.parametrize("prioritized", [False, True])
def test_stored_size_grows_at_episode_end_as_cpprbs(strategy, prioritized):
    buffers = [make(cls, size=100, strategy=strategy, prioritized=prioritized)
               for cls in (HindsightReplayBuffer, cpprb.HindsightReplayBuffer)]
    lengths = [3, 7, 1, 20, 9, 4]
    for episode, length in enumerate(lengths):
        sizes = []
        for buffer in buffers:
            for t in range(length):
                buffer.add(obs=[t, episode], act=0, next_obs=[t + 1, episode])
            sizes.append(buffer.get_stored_size())  # the running episode is not stored yet
            buffer.on_episode_end([NO_GOAL])
            sizes.append(buffer.get_stored_size())
        assert sizes[:2] == sizes[2:]
    copies = 2 if strategy == "final" else 5  # cpprb stores one relabeled copy with "final"
    assert buffers[0].get_stored_size() == min(copies * sum(lengths), 100)  # a ring of 100
    assert buffers[0].get_buffer_size() == 100


def test_stored_rewards_are_reward_func_of_next_state_action_and_goal():
    buffer = make(HindsightReplayBuffer, seed=0)
    for episode in range(3):
        add_episode(buffer, 8, episode)
    sample = buffer.sample(500)
    np.testing.assert_allclose(sample["rew"][:, 0], reward_func(sample["next_obs"], sample["act"].astype(float), sample["goal"]))
    relabeled, _ = future_offsets(sample)
    assert relabeled.any() and not relabeled.all()


def test_extra_fields_are_stored_and_returned_per_transition():
    env_dict = {**ENV_DICT, "done": {}}
    buffer = make(HindsightReplayBuffer, env_dict=env_dict, seed=0)
    add_episode(buffer, 6, done=np.arange(6) == 5)
    sample = buffer.sample(300)
    np.testing.assert_array_equal(sample["done"][:, 0], sample["obs"][:, 0] == 5)


def test_a_batch_add_equals_single_adds():
    one, many = make(HindsightReplayBuffer, seed=3), make(HindsightReplayBuffer, seed=3)
    add_episode(one, 6)
    many.add(obs=[[t, 0] for t in range(4)], act=[[t % 3] for t in range(4)], next_obs=[[t + 1, 0] for t in range(4)])
    many.add(obs=[[4, 0], [5, 0]], act=[1, 2], next_obs=[[5, 0], [6, 0]])
    many.on_episode_end([NO_GOAL])
    a, b = one.sample(50), many.sample(50)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_goal_func_defaults_to_the_state_and_the_goal_may_carry_a_batch_axis():
    buffer = HindsightReplayBuffer(100, ENV_DICT, max_episode_len=5, reward_func=reward_func, prioritized=False, seed=0)
    for t in range(4):
        buffer.add(obs=[t, 7], act=0, next_obs=[t + 1, 7])
    buffer.on_episode_end(np.array([[-1.0, -1.0]]))  # as the seed's example passes it
    sample = buffer.sample(200)
    relabeled = sample["goal"][:, 0] != NO_GOAL
    assert sample["goal"].shape == (200, 2)
    np.testing.assert_array_equal(sample["goal"][relabeled, 1], 7)  # a whole next state became the goal


def test_clear_forgets_the_store_and_the_running_episode():
    buffer = make(HindsightReplayBuffer, prioritized=True)
    add_episode(buffer, 5)
    buffer.add(obs=[0, 1], act=0, next_obs=[1, 1])
    buffer.clear()
    assert buffer.get_stored_size() == 0
    with pytest.raises(ValueError, match="on_episode_end"):
        buffer.sample(4)
    add_episode(buffer, 3)
    assert buffer.get_stored_size() == 15


def test_on_episode_end_without_transitions_stores_nothing():
    buffer = make(HindsightReplayBuffer)
    buffer.on_episode_end([NO_GOAL])
    assert buffer.get_stored_size() == 0


# ---------------------------------------------------------------------------------------------- errors
def test_an_episode_longer_than_max_episode_len_is_refused():
    buffer = make(HindsightReplayBuffer, max_episode_len=3)
    for t in range(3):
        buffer.add(obs=[t, 0], act=0, next_obs=[t + 1, 0])
    with pytest.raises(ValueError, match="max_episode_len=3"):
        buffer.add(obs=[3, 0], act=0, next_obs=[4, 0])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"Nstep": {"size": 3}}, ValueError, "N-step"),
        ({"next_of": "obs"}, ValueError, "next_of"),
        ({"check_for_update": True}, ValueError, "check_for_update"),
        ({"learning_rate": 1}, TypeError, "learning_rate"),
        ({"strategy": "futur"}, ValueError, "unknown strategy"),
        ({"eps": 0.0}, ValueError, "eps"),
        ({"env_dict": {**ENV_DICT, "rew": {}}}, ValueError, "'rew'"),
        ({"env_dict": {"obs": {"shape": 2}, "act": {}}}, ValueError, "next_obs"),
    ],
)
def test_unsupported_or_wrong_arguments_say_what_to_do(kwargs, error, match):
    with pytest.raises(error, match=match):
        make(HindsightReplayBuffer, **kwargs)


def test_a_reward_func_that_is_not_batched_is_named_in_the_error():
    with pytest.raises(ValueError, match="reward_func must be batched"):
        HindsightReplayBuffer(10, ENV_DICT, max_episode_len=5, reward_func=lambda s, a, g: float(np.all(s == g)))


def test_wrong_fields_and_shapes_are_refused():
    buffer = make(HindsightReplayBuffer)
    with pytest.raises(ValueError, match="missing \\['act'\\]"):
        buffer.add(obs=[0, 0], next_obs=[1, 0])
    with pytest.raises(ValueError, match="unknown \\['rew'\\]"):
        buffer.add(obs=[0, 0], act=0, next_obs=[1, 0], rew=1.0)
    with pytest.raises(ValueError, match="next_obs has shape \\(3,\\)"):
        buffer.add(obs=[0, 0], act=0, next_obs=[1, 0, 0])


SHAPE_ONE = {"obs": {}, "act": {}, "next_obs": {}}  # cpprb's default shape, (1,), as its docs' pseudo code has it


@pytest.mark.parametrize(
    "env_dict, transitions",
    [
        (ENV_DICT, dict(obs=torch.zeros(2), act=torch.tensor(1), next_obs=torch.ones(2))),
        (ENV_DICT, dict(obs=np.zeros(2), act=torch.randn(4).argmax(), next_obs=np.ones(2))),  # a 0-d tensor
        (ENV_DICT, dict(obs=torch.zeros(3, 2), act=torch.ones(3, 1), next_obs=torch.ones(3, 2))),
        (ENV_DICT, dict(obs=[[0, 0]], act=1, next_obs=[[0, 1]])),
        (ENV_DICT, dict(obs=[0, 0], act=[[1]], next_obs=[0, 1])),
        (ENV_DICT, dict(obs=(0, 0), act=-1, next_obs=(0, 1))),  # -1 into the uint8 action: 255, as numpy casts
        (ENV_DICT, dict(obs=[[0, 0], [0, 1]], act=[[1], [2]], next_obs=[[0, 1], [0, 2]])),
        (SHAPE_ONE, dict(obs=np.array([0.0, 1.0, 2.0]), act=np.array([1, 1, 1]), next_obs=np.array([1.0, 2.0, 3.0]))),
        (SHAPE_ONE, dict(obs=[0.0, 1.0, 2.0], act=[1, 1, 1], next_obs=[1.0, 2.0, 3.0])),
        (SHAPE_ONE, dict(obs=np.zeros((3, 1)), act=np.ones((3, 1)), next_obs=np.ones((3, 1)))),
    ],
)
def test_add_takes_every_form_cpprb_takes(env_dict, transitions):
    """Lists, tuples, scalars, torch tensors, a leading axis of 1 or n, flat runs for shape-1 fields: cpprb counts
    the transitions from the state's size and reshapes every field; the stored transitions must be cpprb's."""
    stored = []
    for cls in (HindsightReplayBuffer, cpprb.HindsightReplayBuffer):
        buffer = make(cls, env_dict=copy.deepcopy(env_dict))  # cpprb writes into the env_dict it is given
        buffer.add(**transitions)
        buffer.on_episode_end([NO_GOAL])
        stored.append(buffer.get_all_transitions())
    ours, theirs = stored
    assert len(ours["obs"]) == len(theirs["obs"]) > 0
    for key in ("obs", "act", "next_obs"):
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)


def test_add_refuses_a_field_whose_size_disagrees_with_the_states():
    buffer = make(HindsightReplayBuffer)
    with pytest.raises(ValueError, match=r"obs has shape \(3,\): expected \(2,\) for one transition"):
        buffer.add(obs=[0, 0, 0], act=0, next_obs=[1, 0, 0])
    with pytest.raises(ValueError, match=r"act has shape \(3,\); expected \(1,\) for one transition or \(2, \*\(1,\)\) "
                                         r"for 2, as obs holds 2"):
        buffer.add(obs=np.zeros((2, 2)), act=[0, 1, 2], next_obs=np.zeros((2, 2)))
    assert buffer.get_stored_size() == 0 and buffer._episode_len == 0  # nothing half-added


def test_update_priorities_needs_prioritization():
    buffer = make(HindsightReplayBuffer)
    add_episode(buffer, 3)
    with pytest.raises(ValueError, match="prioritized=True"):
        buffer.update_priorities(np.arange(3), np.ones(3))


# ---------------------------------------------------------------------------------------------- prioritization
def prioritized_with(priorities, *, alpha=0.6, eps=1e-4, cls=HindsightReplayBuffer):
    buffer = make(cls, prioritized=True, alpha=alpha, eps=eps, **({"seed": 0} if cls is HindsightReplayBuffer else {}))
    add_episode(buffer, len(priorities) // 5)
    buffer.update_priorities(np.arange(len(priorities)), priorities)
    return buffer


def test_weights_are_probability_ratios_to_the_power_minus_beta_as_in_cpprb():
    priorities = np.random.default_rng(0).uniform(0, 2, 50)
    ours, theirs = prioritized_with(priorities), prioritized_with(priorities, cls=cpprb.HindsightReplayBuffer)
    mass = (priorities + 1e-4) ** 0.6
    for beta in (0.0, 0.4, 1.0):
        sample = ours.sample(400, beta=beta)
        expected = (mass[sample["indexes"].astype(int)] / mass.min()) ** -beta
        np.testing.assert_allclose(sample["weights"], expected, rtol=1e-5)
        assert np.all((sample["weights"] > 0) & (sample["weights"] <= 1))
        reference = theirs.sample(400, beta=beta)  # cpprb weighs its slots (stored in the same order) alike
        np.testing.assert_allclose(reference["weights"], (mass[reference["indexes"].astype(int)] / mass.min()) ** -beta, rtol=1e-5)


def test_annealing_beta_moves_weights_away_from_one():
    buffer = prioritized_with(np.linspace(0.1, 3, 50))
    means = [buffer.sample(2000, beta=beta)["weights"].mean() for beta in (0.0, 0.4, 0.7, 1.0)]
    assert means[0] == 1.0
    assert means == sorted(means, reverse=True)


def test_updated_priorities_change_what_is_sampled():
    priorities = np.zeros(50)
    priorities[7] = 100.0  # eps keeps the others possible: (1e-4)^0.6 each against 100^0.6
    buffer = prioritized_with(priorities)
    drawn = buffer.sample(20_000)["indexes"]
    mass = (priorities + 1e-4) ** 0.6
    assert abs(np.mean(drawn == 7) - mass[7] / mass.sum()) < 0.005
    assert len(np.unique(drawn)) > 1


def test_alpha_zero_is_uniform_replay():
    buffer = prioritized_with(np.linspace(0, 5, 50), alpha=0.0)
    sample = buffer.sample(5000, beta=1.0)
    np.testing.assert_array_equal(sample["weights"], 1.0)
    assert abs(np.mean(sample["indexes"] < 25) - 0.5) < 0.03


# ---------------------------------------------------------------------------------------------- goal distribution
def test_the_adapter_samples_exactly_what_the_engine_samples():
    """The adapter only translates: same seed, same transitions, same batch from the engine used directly."""
    length, k = 10, 4
    adapter = make(HindsightReplayBuffer, seed=11)
    box = spaces.Box(-np.inf, np.inf, (1,), np.float32)
    engine = HerReplayBuffer(
        1000, spaces.Dict(observation=spaces.Box(-np.inf, np.inf, (2,), np.float32), achieved_goal=box, desired_goal=box),
        spaces.Box(0, 255, (1,), np.uint8), device="cpu", n_sampled_goal=k, online_sampling=False,
        max_episode_length=20, seed=11, reward_context=("action", "next_observation"),
        compute_reward=lambda achieved_goal, desired_goal, info: reward_func(info["next_observation"], info["action"], desired_goal),
    )
    for episode in range(4):
        add_episode(adapter, length, episode)
        for t in range(length):
            obs = {"observation": np.array([[t, episode]], np.float32), "achieved_goal": np.array([[t]], np.float32),
                   "desired_goal": np.array([[NO_GOAL]], np.float32)}
            next_obs = {**obs, "observation": obs["observation"] + [[1, 0]], "achieved_goal": obs["achieved_goal"] + 1}
            reward = reward_func(next_obs["observation"], np.array([[t % 3]]), obs["desired_goal"])
            engine.add(obs, next_obs, np.array([[t % 3]]), reward, terminated=[False], truncated=[t == length - 1])
    ours, direct = adapter.sample(1000), engine.sample(1000)
    np.testing.assert_array_equal(ours["goal"], direct.observations["desired_goal"].numpy())
    np.testing.assert_array_equal(ours["rew"], direct.rewards.numpy())


def test_future_goals_have_the_same_distribution_as_cpprbs():
    """Fraction relabeled k/(k+1), offsets uniform over the transition's own and later next states."""
    length, n = 10, 40_000
    histograms = []
    for cls in (HindsightReplayBuffer, cpprb.HindsightReplayBuffer):
        buffer = make(cls, size=50_000, **({"seed": 5} if cls is HindsightReplayBuffer else {}))
        for episode in range(500):  # goals are drawn once per stored copy: 20,000 draws
            add_episode(buffer, length, episode)
        sample = buffer.sample(n)
        relabeled, offsets = future_offsets(sample)
        assert abs(relabeled.mean() - 4 / 5) < 0.01
        assert offsets.min() == 0 and offsets.max() == length - 1
        steps = sample["obs"][relabeled, 0].astype(int)
        histograms.append(np.histogram2d(steps, offsets, bins=length, range=[[0, length], [0, length]])[0] / len(steps))
    # exact: step t is drawn with probability 1/T and its offset uniformly from 0..T-1-t
    t, j = np.meshgrid(np.arange(length), np.arange(length), indexing="ij")
    expected = np.where(j < length - t, 1 / (length * (length - t)), 0.0)
    for histogram in histograms:
        # total variation distance; sampling noise alone gives about 0.025 here, while rounded
        # offsets (end points at half probability) would give about 0.1
        assert 0.5 * np.abs(histogram - expected).sum() < 0.05


def test_random_goals_come_from_the_whole_store_as_in_cpprb():
    """Episode e's goals are drawn from every stored next state, its own copy stored first included:
    its own states are then T of (k+1)·T·e + T stored rows."""
    n_episodes, length = 100, 5
    expected = np.mean([1 / (5 * e + 1) for e in range(n_episodes)])
    for cls in (HindsightReplayBuffer, cpprb.HindsightReplayBuffer):
        buffer = cls(10_000, ENV_DICT, max_episode_len=length, reward_func=reward_func, strategy="random",
                     prioritized=False, **({"seed": 2} if cls is HindsightReplayBuffer else {}))
        for episode in range(n_episodes):
            for t in range(length):
                buffer.add(obs=[t, episode], act=0, next_obs=[t + 1, episode])
            buffer.on_episode_end([NO_GOAL, NO_GOAL])
        sample = buffer.sample(20_000)
        relabeled = sample["goal"][:, 0] != NO_GOAL
        assert abs(relabeled.mean() - 4 / 5) < 0.01
        own = sample["goal"][relabeled, 1] == sample["obs"][relabeled, 1]
        assert abs(own.mean() - expected) < 0.015  # 2,000 goal draws: standard deviation 0.005
        assert sample["goal"][relabeled, 1].max() <= n_episodes - 1
        assert len(np.unique(sample["goal"][relabeled, 1])) > n_episodes // 2
