"""reset() forgets everything, in every store."""

import numpy as np
import pytest

from herl import HerReplayBuffer
from herl.envs import BitFlippingEnv


@pytest.mark.parametrize("online", [True, False])
def test_reset_empties_every_store(online):
    env = BitFlippingEnv(4, max_steps=4)
    buffer = HerReplayBuffer(200, env.observation_space, env.action_space, env=env, online_sampling=online, seed=0, device="cpu")
    obs, _ = env.reset(seed=0)
    for t in range(20):
        next_obs, reward, terminated, truncated, _ = env.step(t % 4)
        buffer.add(obs, next_obs, np.array(t % 4), reward, terminated=terminated, truncated=truncated)
        obs = env.reset()[0] if terminated or truncated else next_obs
    assert len(buffer) > 0
    buffer.reset()
    assert len(buffer) == 0
    with pytest.raises(ValueError, match="no transition"):
        buffer.sample(4)
