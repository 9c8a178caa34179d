"""``action_l2``: OpenAI baselines' penalty on the actor's squared actions (its HER DDPG uses 1.0), taken by DDPG and
TD3. The fetch_push, fetch_pick_and_place, fetch_slide and panda_push presets set it in their ``[algos.ddpg]``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from herl import DDPG, TD3, HerReplayBuffer
from herl.envs import PointReachEnv
from herl.run.config import build_config
from herl.run.presets import load_presets


def trained(algo: type, action_l2: float) -> DDPG:
    model = algo("MultiInputPolicy", PointReachEnv(), replay_buffer_class=HerReplayBuffer, learning_starts=100,
                 batch_size=64, action_l2=action_l2, policy_kwargs={"net_arch": [32, 32]}, seed=0)
    return model.learn(600)


def squared_actions(model: DDPG) -> float:
    """Mean squared deterministic action over 200 fixed observations."""
    rng = np.random.default_rng(0)
    obs = {key: rng.uniform(-1, 1, (200, *space.shape)).astype(np.float32)
           for key, space in model.observation_space.spaces.items()}
    actions, _ = model.predict(obs, deterministic=True)
    return float(np.mean(np.square(actions)))


@pytest.mark.parametrize("algo", [DDPG, TD3])
def test_the_penalty_pulls_the_actors_actions_towards_zero(algo: type) -> None:
    """Same seed, same data until the first actor update: only the penalty differs. Without it the actor chases the
    critic to the edges of the action box; with a heavy one it stays near the middle. If the setting stopped
    reaching the actor's loss, the two runs would be the same run."""
    free, penalized = trained(algo, 0.0), trained(algo, 20.0)
    assert penalized.config.action_l2 == 20.0
    assert squared_actions(penalized) < 0.25 * squared_actions(free)
    assert squared_actions(penalized) < 0.05


def test_it_is_saved_with_the_model_and_trains_on_identically(tmp_path) -> None:
    model = trained(DDPG, 1.0)
    model.save(tmp_path / "model.zip")
    loaded = DDPG.load(tmp_path / "model.zip", env=PointReachEnv())
    assert loaded.config.action_l2 == 1.0
    for name, module in model.nets.items():
        for (key, a), b in zip(module.state_dict().items(), loaded.nets[name].state_dict().values()):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"{name}.{key}")


def test_the_presets_that_set_it_hand_it_to_ddpg() -> None:
    presets = {name: preset for name, preset in load_presets().items()
               if "action_l2" in preset.per_algo.get("ddpg", {})}
    assert {"fetch_push", "fetch_pick_and_place", "fetch_slide", "panda_push"} <= set(presets)
    for preset in presets.values():
        config = build_config(algo="ddpg", env="X-v0", seed=0, layers=preset.layers("ddpg"), goal_env=True,
                              preset=preset.name)
        assert config.hyperparameters["action_l2"] == 1.0
        assert DDPG.config_class.from_kwargs(config.hyperparameters).action_l2 == 1.0
