"""Goal functions get goals shaped ``(batch, *the goal space's shape)`` whatever the space: a Discrete goal (shape
()) is stored as one column but passed as ``(batch,)``, as check_goal_env and the buffer's probe pass it."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from herl import HerReplayBuffer


def test_a_discrete_goal_reaches_compute_reward_as_a_vector_of_the_batch():
    cell = spaces.Discrete(9)
    obs_space = spaces.Dict({"observation": spaces.Box(0, 8, (1,), np.float32), "achieved_goal": cell,
                             "desired_goal": cell})
    shapes: set[tuple[int, ...]] = set()

    def reward(achieved_goal, desired_goal, info):
        shapes.add(np.shape(achieved_goal))
        shapes.add(np.shape(desired_goal))
        # (batch, 1) + (batch,) would broadcast to (batch, batch): the shape error the form caused
        return (achieved_goal == desired_goal).astype(np.float32) - 1.0 + 0.0 * np.arange(len(achieved_goal))

    buffer = HerReplayBuffer(200, obs_space, spaces.Discrete(2), compute_reward=reward,
                             compute_terminated=lambda a, d, i: a == d, n_sampled_goal=4, seed=0, device="cpu")
    for t in range(30):
        position, goal = t % 9, 4
        obs = {"observation": np.array([[position]], np.float32), "achieved_goal": np.array([position]),
               "desired_goal": np.array([goal])}
        next_obs = {**obs, "achieved_goal": np.array([(t + 1) % 9])}
        reached = (t + 1) % 9 == goal
        buffer.add(obs, next_obs, np.array([1]), np.array([float(reached) - 1.0]), terminated=np.array([reached]),
                   truncated=np.array([t % 10 == 9 and not reached]))
    batch = buffer.sample(64)
    assert shapes and all(len(shape) == 1 for shape in shapes), shapes  # (batch,), never (batch, 1)
    achieved, desired = batch.next_observations["achieved_goal"], batch.observations["desired_goal"]
    expected = (achieved == desired).float().reshape(-1) - 1.0
    assert np.array_equal(batch.rewards.reshape(-1).numpy(), expected.numpy())
    assert np.array_equal(batch.dones.reshape(-1).numpy() > 0, (achieved == desired).reshape(-1).numpy())
