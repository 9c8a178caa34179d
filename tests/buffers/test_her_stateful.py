"""A stateful test of the HER buffer: add, sample, save, load, truncate and reset in random orders, checked
at every step against the plain-Python model of :mod:`her_world` (which episodes are stored, which may be sampled,
where each relabeled goal may come from). Bounded to a few seconds."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from her_world import IdWorld, assert_same_arrays, id_reward, id_spaces
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from herl import HerReplayBuffer


class BufferMachine(RuleBasedStateMachine):
    @initialize(n_envs=st.integers(1, 2), rows=st.integers(6, 24), share=st.booleans(), online=st.booleans(),
                strategy=st.sampled_from(["future", "final", "episode", "random"]), k=st.integers(0, 3),
                lengths=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=3), min_size=2, max_size=2),
                seed=st.integers(0, 3))
    def build(self, n_envs, rows, share, online, strategy, k, lengths, seed):
        self.config = dict(n_envs=n_envs, rows=rows, share=share and online, online=online, strategy=strategy, k=k,
                           lengths=lengths[:n_envs], seed=seed)
        self.folder = Path(tempfile.mkdtemp())
        self.world = self._fresh_world()

    def _fresh_world(self) -> IdWorld:
        c = self.config
        obs_space, action_space = id_spaces()
        buffer = HerReplayBuffer(
            c["rows"] * c["n_envs"], obs_space, action_space, device="cpu", n_envs=c["n_envs"],
            optimize_memory_usage=c["share"], n_sampled_goal=c["k"], goal_selection_strategy=c["strategy"],
            compute_reward=id_reward, online_sampling=c["online"],
            max_episode_length=max(max(ls) for ls in c["lengths"]), seed=c["seed"],
        )
        return IdWorld(buffer, c["lengths"], rows=c["rows"], share=c["share"], online=c["online"])

    @rule(n=st.integers(1, 12))
    def add(self, n):
        self.world.run(n)

    @precondition(lambda self: len(self.world.buffer) > 0)
    @rule(batch=st.sampled_from([1, 7, 32]))
    def sample(self, batch):
        self.world.check(self.world.buffer.sample(batch), self.config["strategy"])

    @rule()
    def save_and_load(self):
        path = self.folder / "buffer.zip"
        before = snapshot(self.world.buffer)
        self.world.buffer.save(path)
        loaded = HerReplayBuffer.load(path, compute_reward=id_reward, device="cpu")
        assert_same_arrays(before, snapshot(loaded))
        self.world = self.world.clone_with(loaded)

    @rule()
    def truncate(self):
        self.world.truncate_last_trajectory()

    @rule()
    def reset(self):
        self.world.buffer.reset()
        assert len(self.world.buffer) == 0
        buffer = self.world.buffer
        self.world = self._fresh_world()
        self.world.buffer = buffer  # the same object, emptied: it must behave as a new one

    @invariant()
    def holds_what_the_model_says(self):
        if not hasattr(self, "world"):
            return
        if self.config["online"]:
            expected = sum(self.world.stored_length(ep) for ep in self.world.sampleable())
            assert len(self.world.buffer) == expected


def snapshot(buffer) -> dict:
    """The buffer's contents: the rows written since the last reset (rows past them are never read, and reset()
    leaves their old bytes in place)."""
    return {f"{name}/{k}": v.copy() for name, storage in buffer._storages().items()
            for k, v in storage.arrays(written_only=True).items()}


TestBufferMachine = BufferMachine.TestCase
# HERL_FUZZ_EXAMPLES=1000 for a long sweep with fresh random cases
TestBufferMachine.settings = settings(max_examples=int(os.environ.get("HERL_FUZZ_EXAMPLES", 0)) or 30,
                                     stateful_step_count=25, deadline=None,
                                     derandomize="HERL_FUZZ_EXAMPLES" not in os.environ)

