"""The rest of Stable-Baselines3's callbacks, with SB3's counting, and SB3's names in ``locals``."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from herl import (
    DQN,
    SAC,
    BaseCallback,
    CallbackList,
    ConvertCallback,
    EvalCallback,
    EveryNTimesteps,
    HerReplayBuffer,
    LogEveryNTimesteps,
    ProgressBarCallback,
    StopTrainingOnMaxEpisodes,
    StopTrainingOnNoModelImprovement,
    StopTrainingOnRewardThreshold,
    configure,
)
from herl.envs import BitFlippingEnv

SMALL = dict(learning_starts=16, batch_size=16, buffer_size=1000, policy_kwargs=dict(net_arch=[16]), seed=0)


def dqn(env=None, **kwargs) -> DQN:
    env = BitFlippingEnv(n_bits=4) if env is None else env
    return DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, **{**SMALL, **kwargs})


def bit_envs(n: int) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: BitFlippingEnv(n_bits=4) for _ in range(n)], autoreset_mode=AutoresetMode.SAME_STEP)


def test_both_namespaces_export_them():
    import herl
    import herl.training

    for name in ("StopTrainingOnMaxEpisodes", "StopTrainingOnNoModelImprovement", "EveryNTimesteps",
                 "LogEveryNTimesteps", "ProgressBarCallback", "ConvertCallback", "EventCallback"):
        assert getattr(herl, name) is getattr(herl.training, name)


@pytest.mark.parametrize("n_envs", [1, 2])
def test_stop_on_max_episodes_counts_every_envs_episodes(n_envs):
    model = dqn(bit_envs(n_envs) if n_envs > 1 else None)
    stop = StopTrainingOnMaxEpisodes(max_episodes=3)
    model.learn(10_000, callback=stop)
    # as SB3: max_episodes per env, so 3 * n_envs in all, stopping at the step that reaches it
    assert stop._total_max_episodes == 3 * n_envs
    assert 3 * n_envs <= stop.n_episodes == model._episode_num < 3 * n_envs + n_envs
    assert model.num_timesteps < 10_000


class Recorder(BaseCallback):
    def __init__(self) -> None:
        super().__init__()
        self.timesteps: list[int] = []

    def _on_step(self) -> bool:
        assert "dones" in self.locals  # a child of an event callback sees the step too, as in SB3
        self.timesteps.append(self.num_timesteps)
        return True


def test_every_n_timesteps_fires_once_n_steps_have_passed():
    child = Recorder()
    trigger = EveryNTimesteps(n_steps=5, callback=child)
    dqn(bit_envs(2)).learn(20, callback=trigger)
    assert child.timesteps == [6, 12, 18]  # 2 steps per call: the first count >= 5 past the last trigger
    assert child.n_calls == 3 and child.parent is trigger


def test_log_every_n_timesteps_writes_the_logs(tmp_path):
    model = dqn()
    model.set_logger(configure(tmp_path, ["csv"]))
    model.learn(40, log_interval=None, callback=LogEveryNTimesteps(n_steps=10))
    with open(tmp_path / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["time/total_timesteps"]) for r in rows] == [10, 20, 30, 40]
    assert "rollout/ep_rew_mean" in rows[-1] and "time/fps" in rows[-1]


def test_progress_bar_callback_counts_the_steps_of_this_learn_call():
    pytest.importorskip("tqdm")
    model = dqn(bit_envs(2))
    model.learn(10)
    bar = ProgressBarCallback()
    model.learn(20, callback=bar, reset_num_timesteps=False)
    assert bar.pbar.total == 20 and bar.pbar.n == 20


def test_convert_callback_stops_on_false_and_none_goes_on():
    calls = []
    model = dqn()
    model.learn(1000, callback=ConvertCallback(lambda locals_, globals_: calls.append(1) or len(calls) < 7))
    assert model.num_timesteps == 7
    model.learn(5, callback=ConvertCallback(None))
    assert model.num_timesteps == 5


def fake_eval_parent(rewards):
    """An EvalCallback stand-in whose best_mean_reward follows ``rewards``, one per evaluation."""
    parent = SimpleNamespace(best_mean_reward=-np.inf)
    for r in rewards:
        parent.best_mean_reward = max(parent.best_mean_reward, r)
        yield parent


def test_stop_on_no_model_improvement_counts_evaluations_as_sb3():
    stop = StopTrainingOnNoModelImprovement(max_no_improvement_evals=2, min_evals=1)
    stop.init_callback(SimpleNamespace(num_timesteps=0))
    go_on = []
    for parent in fake_eval_parent([1, 1, 2, 2, 2, 2, 3]):
        stop.parent = parent
        go_on.append(stop.on_step())
    # eval 1 is within min_evals; eval 2 no gain (1); 3 gains (0); 4, 5 no gain (1, 2); 6 is the third in a row
    assert go_on == [True, True, True, True, True, False, True]


def test_stop_on_no_model_improvement_under_eval_callback_stops_training():
    stop = StopTrainingOnNoModelImprovement(max_no_improvement_evals=0)
    evaluation = EvalCallback(BitFlippingEnv(n_bits=4), n_eval_episodes=2, eval_freq=8, callback_after_eval=stop,
                              verbose=0)
    model = dqn(learning_starts=10_000)  # the policy never changes: soon an evaluation brings no new best
    model.learn(2000, callback=evaluation)
    assert model.num_timesteps < 2000 and stop.no_improvement_evals == 1
    assert evaluation.last_mean_reward <= evaluation.best_mean_reward
    assert stop.n_calls == len(evaluation.evaluations_results)


def test_stop_callbacks_need_an_eval_callback():
    with pytest.raises(RuntimeError, match="callback_after_eval"):
        dqn().learn(10, callback=StopTrainingOnNoModelImprovement(3))
    with pytest.raises(RuntimeError, match="EvalCallback"):
        dqn().learn(10, callback=StopTrainingOnRewardThreshold(0.0))


def test_a_callback_list_given_to_an_eval_callback_passes_the_parent_on():
    stop = StopTrainingOnRewardThreshold(reward_threshold=-10.0)
    evaluation = EvalCallback(BitFlippingEnv(n_bits=4), n_eval_episodes=1, eval_freq=5,
                              callback_after_eval=CallbackList([stop]), verbose=0)
    model = dqn()
    model.learn(1000, callback=evaluation)
    assert stop.parent is evaluation and model.num_timesteps == 5


class LocalsReader(BaseCallback):
    def _on_step(self) -> bool:
        loc = self.locals
        for name in ("new_obs", "rewards", "dones", "infos", "actions", "buffer_actions", "num_collected_steps",
                     "num_collected_episodes", "total_timesteps", "tb_log_name", "callback", "log_interval", "env",
                     "self", "replay_buffer", "learning_starts"):
            assert name in loc, name
        assert loc["self"] is self.model and loc["env"] is self.model.get_env() is self.training_env
        # actions as the env got them; buffer_actions in the policy's [-1, 1] scale
        np.testing.assert_allclose(loc["actions"], self.model._unscale(loc["buffer_actions"]))
        assert np.abs(loc["buffer_actions"]).max() <= 1.0
        assert loc["num_collected_steps"] >= 1
        return True


def test_locals_carry_sb3s_names():
    env = gym.wrappers.RescaleAction(gym.make("herl/PointReach-v0", max_episode_steps=5),
                                     np.full(2, -3.0, np.float32), np.full(2, 3.0, np.float32))
    reader = LocalsReader()
    SAC("MultiInputPolicy", env, **{**SMALL, "learning_starts": 4}).learn(10, callback=reader)
    assert reader.n_calls == 10


@pytest.mark.parametrize("bad", [42, "eval", BaseCallback])
def test_refusals_name_what_is_accepted(bad):
    with pytest.raises(TypeError, match="a function .*locals_, globals_") as err:
        dqn().learn(10, callback=bad)
    assert "Stable-Baselines3" in str(err.value)
    if bad is BaseCallback:
        assert "pass an instance" in str(err.value)
