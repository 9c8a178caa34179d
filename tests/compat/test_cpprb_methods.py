"""The rest of cpprb's public HindsightReplayBuffer methods, checked against cpprb itself:
``get_all_transitions``, ``get_max_priority``, ``get_stored_size``, ``get_buffer_size``, ``clear``."""

import numpy as np
import pytest

from herl.compat.cpprb import HindsightReplayBuffer

cpprb = pytest.importorskip("cpprb")

ENV_DICT = {"obs": {"shape": 2}, "act": {"shape": 1, "dtype": np.ubyte}, "next_obs": {"shape": 2}, "done": {},
            "mask": {"shape": (2, 2), "dtype": np.int32}}


def reward_func(next_states, actions, goals):
    return 100.0 * next_states[:, 0] + 10.0 * actions[:, 0] - goals[:, 0]


def both(size=1000, **kwargs):
    kwargs = {"goal_func": lambda s: s[:, :1], "goal_shape": (1,), "prioritized": False, "strategy": "final", **kwargs}
    return [cls(size, ENV_DICT, max_episode_len=20, reward_func=reward_func, **kwargs)
            for cls in (HindsightReplayBuffer, cpprb.HindsightReplayBuffer)]


def add_episode(buffer, length, episode):
    for t in range(length):
        buffer.add(obs=[t, episode], act=t % 3, next_obs=[t + 1, episode], done=float(t == length - 1),
                   mask=np.full((2, 2), 10 * episode + t))
    buffer.on_episode_end([-1.0])


@pytest.mark.parametrize("size", [1000, 12])  # 12: the store wraps around, and both keep storage order
def test_get_all_transitions_equals_cpprbs(size):
    ours, theirs = both(size)
    for episode, length in enumerate([4, 3, 5]):
        for buffer in (ours, theirs):
            add_episode(buffer, length, episode)
    mine, reference = ours.get_all_transitions(), theirs.get_all_transitions()
    assert list(mine) == list(reference)
    for key in reference:
        assert (key, mine[key].shape, mine[key].dtype) == (key, reference[key].shape, reference[key].dtype)
        np.testing.assert_allclose(mine[key], reference[key], err_msg=key)
    assert ours.get_stored_size() == theirs.get_stored_size() == len(mine["obs"])
    assert ours.get_buffer_size() == theirs.get_buffer_size() == size


def test_get_all_transitions_shuffled_is_a_permutation_and_empty_when_nothing_is_stored():
    ours, _ = both(seed=0)
    assert ours.get_all_transitions()["obs"].shape == (0, 2)
    add_episode(ours, 6, 0)
    ordered, shuffled = ours.get_all_transitions(), ours.get_all_transitions(shuffle=True)
    key = lambda d: sorted(map(tuple, np.concatenate([d["obs"], d["goal"], d["rew"]], axis=1).tolist()))
    assert key(ordered) == key(shuffled)
    assert not np.array_equal(ordered["obs"], shuffled["obs"])


def test_get_max_priority_follows_cpprbs():
    ours, theirs = both(prioritized=True, eps=1e-4)
    for buffer in (ours, theirs):
        add_episode(buffer, 5, 0)
    assert ours.get_max_priority() == theirs.get_max_priority() == 1.0
    for buffer in (ours, theirs):
        indexes = buffer.sample(2)["indexes"]
        buffer.update_priorities(indexes, np.array([4.0, 0.5]))
    assert ours.get_max_priority() == pytest.approx(theirs.get_max_priority(), rel=1e-3)  # cpprb's 4, herl's 4 + eps
    for buffer in (ours, theirs):
        buffer.clear()
    assert ours.get_max_priority() == theirs.get_max_priority() == 1.0
    assert ours.get_stored_size() == theirs.get_stored_size() == 0


def test_get_max_priority_needs_prioritization_as_in_cpprb():
    ours, theirs = both(prioritized=False)
    with pytest.raises(ValueError):
        theirs.get_max_priority()
    with pytest.raises(ValueError, match="prioritized=True"):
        ours.get_max_priority()


def test_cpprbs_own_stored_size_test_with_the_argument_spelled_right():
    """cpprb's HER test, with "additonal_goals" spelled right: cpprb ignores the typo (and keeps k=4); herl names it."""
    kwargs = dict(size=10, env_dict={"obs": {}, "act": {}, "next_obs": {}}, max_episode_len=2,
                  reward_func=lambda s, a, g: -1 * (s == g), prioritized=False)
    with pytest.raises(TypeError, match="'additonal_goals' \\(did you mean 'additional_goals'\\?\\)"):
        HindsightReplayBuffer(**kwargs, additonal_goals=1)
    hrb = HindsightReplayBuffer(**kwargs, additional_goals=1)
    assert hrb.get_buffer_size() == 10 and hrb.get_stored_size() == 0
    hrb.add(obs=0, act=0, next_obs=0)
    assert hrb.get_stored_size() == 0  # the running episode is not counted
    hrb.on_episode_end(1)
    assert hrb.get_stored_size() == 2  # once as it happened, once relabeled
    hrb.on_episode_end(1)
    assert hrb.get_stored_size() == 2
    hrb.clear()
    assert hrb.get_stored_size() == 0
