"""A goal selection strategy of one's own: ``HerReplayBuffer.goal_steps``, overridden, picks the step of the episode
whose outcome relabels each transition, online and offline; SB3's internals, overridden, are refused with it named."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from herl import HerReplayBuffer

BOX = spaces.Box(0.0, 1000.0, (1,), np.float32)
OBS = spaces.Dict({"observation": BOX, "achieved_goal": BOX, "desired_goal": BOX})


class WithinThree(HerReplayBuffer):
    """'future' within 3 steps: the step j in t .. min(t + 3, L) - 1."""

    def goal_steps(self, steps, lengths):
        return steps + self.rng.integers(0, np.minimum(3, lengths - steps))


def filled(cls: type, **kwargs) -> HerReplayBuffer:
    """Episodes of 12 steps whose achieved goal counts the steps taken; the desired goal is 100, never reached."""
    buffer = cls(2_000, OBS, spaces.Box(-1.0, 1.0, (1,), np.float32), n_sampled_goal=4, seed=0, device="cpu",
                 compute_reward=lambda a, d, i: -(np.abs(a - d).sum(-1) > 0.5).astype(np.float32), **kwargs)
    for _ in range(8):
        for t in range(12):
            obs = {"observation": np.array([[t]], np.float32), "achieved_goal": np.array([[t]], np.float32),
                   "desired_goal": np.array([[100.0]], np.float32)}
            next_obs = {**obs, "achieved_goal": np.array([[t + 1]], np.float32)}
            buffer.add(obs, next_obs, np.zeros((1, 1), np.float32), np.array([-1.0]), terminated=np.array([False]),
                       truncated=np.array([t == 11]))
    return buffer


@pytest.mark.parametrize("online", [True, False], ids=["online", "offline"])
def test_an_overridden_goal_steps_picks_the_relabeling_goals(online):
    batch = filled(WithinThree, online_sampling=online).sample(4_000)
    start, goal = batch.observations["achieved_goal"].numpy(), batch.observations["desired_goal"].numpy()
    relabeled = goal != 100.0
    ahead = (goal - start)[relabeled]
    assert relabeled.mean() > 0.7 and set(np.unique(ahead)) == {1.0, 2.0, 3.0}  # within three steps, each drawn
    # and the default 'future' reaches further
    default = filled(HerReplayBuffer, online_sampling=online).sample(4_000)
    further = (default.observations["desired_goal"] - default.observations["achieved_goal"]).numpy()
    assert further[default.observations["desired_goal"].numpy() != 100.0].max() > 3


def test_steps_outside_the_episode_are_refused_naming_the_method():
    class Beyond(HerReplayBuffer):
        def goal_steps(self, steps, lengths):
            return lengths  # one past the last step

    with pytest.raises(ValueError, match=r"Beyond\.goal_steps must return one whole number per transition, each within "
                                         r"its episode \(0 <= step < length\)"):
        filled(Beyond).sample(64)


@pytest.mark.parametrize("hook", ["_sample_goals", "_get_virtual_samples"])
def test_a_subclass_written_for_sb3s_internals_is_refused(hook):
    SB3Style = type("SB3Style", (HerReplayBuffer,), {hook: lambda self, *args: None, "__module__": "users_code"})
    with pytest.raises(TypeError, match=rf"SB3Style overrides {hook}, Stable-Baselines3's HerReplayBuffer internals, "
                                        r"which herl's HerReplayBuffer never calls: override goal_steps"):
        filled(SB3Style)
