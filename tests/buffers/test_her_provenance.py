"""Property tests of HER goal provenance on the id-stamped world (see her_world.py).

For every sampled transition: it is a stored transition of an episode that may be sampled (never a
partly overwritten one), its new goal comes from the place its strategy says (same env and
episode; future: next states t..T-1 of the episode, its last state included; final: the last
state; episode: any next state; random: any complete episode), its reward is compute_reward of the
returned batch, its done flag is the stored termination, and sampling leaves storage untouched.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from her_world import IdWorld, assert_same_arrays, id_reward, id_spaces, snapshot
from herl.buffers import HerReplayBuffer

STRATEGIES = ["future", "final", "episode", "random"]


@st.composite
def scenarios(draw):
    n_envs = draw(st.integers(1, 3))
    share = draw(st.booleans())
    online = draw(st.booleans())
    rows = draw(st.integers(3, 12))
    max_len = rows - share  # an episode must fit in its env's column
    lengths = [draw(st.lists(st.integers(1, max_len), min_size=1, max_size=5)) for _ in range(n_envs)]
    return dict(
        n_envs=n_envs,
        share=share,
        online=online,
        rows=rows,
        lengths=lengths,
        buffer_size=rows * n_envs + draw(st.integers(0, n_envs - 1)),  # split across envs with floor division
        strategy=draw(st.sampled_from(STRATEGIES)),
        k=draw(st.integers(1, 4)),
        n_adds=draw(st.integers(1, 45)),
        sample_every=draw(st.integers(1, 9)),
        keyword_form=draw(st.booleans()),
        terminated_every=draw(st.integers(1, 3)),
        truncate_at_end=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
        storage_device=draw(st.sampled_from([None, "cpu"])),  # NumPy or torch-resident storage
        handle_timeout_termination=draw(st.booleans()),
    )


def make_world(sc) -> IdWorld:
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(
        sc["buffer_size"], obs_space, action_space, device="cpu", n_envs=sc["n_envs"],
        optimize_memory_usage=sc["share"], n_sampled_goal=sc["k"], goal_selection_strategy=sc["strategy"],
        compute_reward=id_reward, online_sampling=sc["online"],
        max_episode_length=max(max(ls) for ls in sc["lengths"]), seed=sc["seed"], storage_device=sc["storage_device"],
        handle_timeout_termination=sc["handle_timeout_termination"],
    )
    return IdWorld(buffer, sc["lengths"], rows=sc["rows"], share=sc["share"], online=sc["online"],
                   keyword_form=sc["keyword_form"], terminated_every=sc["terminated_every"])


def sample_and_check(world: IdWorld, strategy: str, batch_size: int = 48) -> dict[str, int]:
    before = snapshot(world.buffer)
    samples = world.buffer.sample(batch_size)
    counts = world.check(samples, strategy)
    assert_same_arrays(before, snapshot(world.buffer))  # sampling never mutates storage
    return counts


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_goal_provenance(sc):
    world = make_world(sc)
    done_adds = 0
    while done_adds < sc["n_adds"]:
        chunk = min(sc["sample_every"], sc["n_adds"] - done_adds)
        world.run(chunk)
        done_adds += chunk
        sample_and_check(world, sc["strategy"])
    if sc["truncate_at_end"]:
        world.truncate_last_trajectory()
        sample_and_check(world, sc["strategy"])
        world.run(3)  # and the buffer keeps working after it
        sample_and_check(world, sc["strategy"])


@pytest.mark.parametrize("storage_device", [None, "cpu"])
@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_goal_provenance_long_run(strategy, share, online, storage_device):
    """Many wrap-arounds with three envs ending at different steps; large batches."""
    rows = 23
    lengths = [[5, 1, 7, 3], [2, 9, 4], [6, 6, 2, 8, 1]]
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(
        rows * 3, obs_space, action_space, device="cpu", n_envs=3, optimize_memory_usage=share,
        n_sampled_goal=4, goal_selection_strategy=strategy, compute_reward=id_reward, online_sampling=online,
        max_episode_length=9, seed=3, storage_device=storage_device,
    )
    world = IdWorld(buffer, lengths, rows=rows, share=share, online=online)
    seen = set()
    for _ in range(25):
        world.run(7)
        counts = sample_and_check(world, strategy, batch_size=400)
        assert counts["relabeled"] > 0
        samples = buffer.sample(400)
        world.check(samples, strategy)
        seen.update(map(tuple, samples.observations["observation"][:, :2].numpy().astype(int).tolist()))
    # episodes of every env were sampled
    assert {e for e, _ in seen} == {0, 1, 2}


def test_sampling_before_any_episode_ended_uses_the_stored_part():
    """SB3 raises here; herl relabels with goals from the stored part of the running episodes."""
    obs_space, action_space = id_spaces()
    for strategy in STRATEGIES:
        buffer = HerReplayBuffer(40, obs_space, action_space, device="cpu", n_envs=2, goal_selection_strategy=strategy,
                                 compute_reward=id_reward, seed=0)
        world = IdWorld(buffer, [[15], [12]], rows=20, share=False)
        world.run(4)
        counts = sample_and_check(world, strategy, batch_size=300)
        assert counts["relabeled"] > 150
        final = buffer.sample(300)
        world.check(final, strategy)
        if strategy == "final":  # the last stored state of the running episode
            relabeled = final.observations["desired_goal"][:, 2] >= 0
            assert (final.observations["desired_goal"][relabeled, 2] == 4).all()


def test_sampling_an_empty_buffer_says_so():
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(20, obs_space, action_space, device="cpu", compute_reward=id_reward)
    with pytest.raises(ValueError, match="add transitions first"):
        buffer.sample(4)
