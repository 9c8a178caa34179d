"""Stable-Baselines3's own callback objects drive a herl model's training, as they drive SB3's.

herl never imports SB3: it takes them by their hooks, and gives them what they read from the model under SB3's
names (``get_env()`` as a VecEnv, ``num_timesteps``, ``logger``, ``locals["dones"]``, ...).
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from herl import DQN, CallbackList, EvalCallback, HerReplayBuffer
from herl.envs import BitFlippingEnv

sb3_callbacks = pytest.importorskip("stable_baselines3.common.callbacks")
Monitor = pytest.importorskip("stable_baselines3.common.monitor").Monitor
DummyVecEnv = pytest.importorskip("stable_baselines3.common.vec_env").DummyVecEnv

SMALL = dict(learning_starts=16, batch_size=16, buffer_size=1000, policy_kwargs=dict(net_arch=[16]), seed=0)
pytestmark = pytest.mark.filterwarnings("ignore:Training and eval env are not of the same type")


def dqn(env=None, **kwargs) -> DQN:
    env = BitFlippingEnv(n_bits=4) if env is None else env
    return DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, **{**SMALL, **kwargs})


def eval_env():
    return Monitor(BitFlippingEnv(n_bits=4))


def test_checkpoint_callback_saves_loadable_models(tmp_path):
    model = dqn()
    model.learn(30, callback=sb3_callbacks.CheckpointCallback(save_freq=10, save_path=str(tmp_path),
                                                              save_replay_buffer=True))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert [n for n in names if n.endswith(".zip")] == [f"rl_model_{n}_steps.zip" for n in (10, 20, 30)]
    assert "rl_model_replay_buffer_20_steps.pkl" in names
    assert DQN.load(tmp_path / "rl_model_20_steps.zip").num_timesteps == 20


@pytest.mark.parametrize("n_envs", [1, 2])
def test_stop_training_on_max_episodes(n_envs):
    env = SyncVectorEnv([lambda: BitFlippingEnv(n_bits=4) for _ in range(n_envs)],
                        autoreset_mode=AutoresetMode.SAME_STEP) if n_envs > 1 else None
    model = dqn(env)
    stop = sb3_callbacks.StopTrainingOnMaxEpisodes(max_episodes=3)
    model.learn(10_000, callback=stop)
    assert stop._total_max_episodes == 3 * n_envs  # it read training_env.num_envs: model.get_env() is a VecEnv
    assert 3 * n_envs <= stop.n_episodes == model._episode_num < 4 * n_envs


def test_eval_callback_with_stop_on_no_model_improvement(tmp_path):
    stop = sb3_callbacks.StopTrainingOnNoModelImprovement(max_no_improvement_evals=0)
    evaluation = sb3_callbacks.EvalCallback(eval_env(), n_eval_episodes=2, eval_freq=8, callback_after_eval=stop,
                                            best_model_save_path=str(tmp_path), log_path=str(tmp_path), verbose=0)
    model = dqn(learning_starts=10_000)  # a frozen policy: an evaluation soon brings no new best
    model.learn(2000, callback=evaluation)
    assert model.num_timesteps < 2000 and stop.no_improvement_evals == 1
    assert len(evaluation.evaluations_results) == stop.n_calls >= 2
    assert evaluation.best_mean_reward > -np.inf
    assert (tmp_path / "best_model.zip").exists() and (tmp_path / "evaluations.npz").exists()
    assert DQN.load(tmp_path / "best_model.zip").num_timesteps > 0


def test_sb3_callback_list_of_sb3_callbacks(tmp_path):
    stop = sb3_callbacks.StopTrainingOnMaxEpisodes(max_episodes=2)
    evaluation = sb3_callbacks.EvalCallback(eval_env(), n_eval_episodes=1, eval_freq=3, verbose=0,
                                            callback_on_new_best=sb3_callbacks.StopTrainingOnRewardThreshold(10.0))
    checkpoints = sb3_callbacks.CheckpointCallback(save_freq=4, save_path=str(tmp_path))
    model = dqn()
    model.learn(10_000, callback=sb3_callbacks.CallbackList([checkpoints, evaluation, stop]))
    assert stop.n_episodes == 2 and model._episode_num == 2
    assert evaluation.n_calls == checkpoints.n_calls == model.num_timesteps
    assert (evaluation.last_mean_reward > -np.inf) == (model.num_timesteps >= 3)  # it evaluated at step 3


def test_herl_and_sb3_callbacks_mix_in_either_list():
    stop = sb3_callbacks.StopTrainingOnMaxEpisodes(max_episodes=2)
    model = dqn()
    model.learn(10_000, callback=CallbackList([sb3_callbacks.EveryNTimesteps(5, sb3_callbacks.ConvertCallback(None)),
                                               stop]))
    assert stop.n_episodes == 2
    one = sb3_callbacks.StopTrainingOnMaxEpisodes(max_episodes=1)
    model.learn(10_000, callback=[one])  # a plain list, SB3 objects inside
    assert one.n_episodes == 1


def test_sb3_stop_callback_under_herl_eval_callback_reads_its_best_mean_reward():
    stop = sb3_callbacks.StopTrainingOnNoModelImprovement(max_no_improvement_evals=0)
    evaluation = EvalCallback(BitFlippingEnv(n_bits=4), n_eval_episodes=2, eval_freq=8, callback_after_eval=stop,
                              verbose=0)
    model = dqn(learning_starts=10_000)
    model.learn(2000, callback=evaluation)
    assert stop.parent is evaluation and model.num_timesteps < 2000 and stop.no_improvement_evals == 1


@pytest.mark.filterwarnings("ignore::tqdm.TqdmExperimentalWarning")  # SB3's bar uses tqdm.rich
def test_progress_bar_callback():
    pytest.importorskip("rich")
    bar = sb3_callbacks.ProgressBarCallback()
    dqn().learn(12, callback=bar)
    assert bar.pbar.n == 12


class SB3StyleCallback(sb3_callbacks.BaseCallback):
    """A user's callback written for SB3: reads the locals, the training env and the logger."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        self.successes = 0

    def _on_training_start(self) -> None:
        self.events.append("training_start")
        assert self.locals["total_timesteps"] == 20

    def _on_rollout_start(self) -> None:
        self.events.append("rollout_start")

    def _on_step(self) -> bool:
        assert self.training_env.num_envs == len(self.locals["dones"]) == len(self.locals["infos"])
        assert self.locals["rewards"].shape == (1,) and self.locals["new_obs"]["observation"].shape == (1, 4)
        self.successes += sum(bool(info.get("is_success")) for info, done in zip(self.locals["infos"],
                                                                                 self.locals["dones"]) if done)
        self.logger.record("custom/successes", self.successes)
        return True

    def _on_training_end(self) -> None:
        self.events.append("training_end")


def test_a_users_sb3_callback_subclass():
    callback = SB3StyleCallback()
    model = dqn(train_freq=4)
    model.learn(20, callback=callback)
    assert callback.n_calls == callback.num_timesteps == 20
    assert callback.events[0] == "training_start" and callback.events[-1] == "training_end"
    assert callback.events.count("rollout_start") == 5


def test_get_env_returns_the_users_sb3_vec_env_itself():
    venv = DummyVecEnv([lambda: BitFlippingEnv(n_bits=4)])
    model = dqn(venv)
    assert model.get_env() is venv
    stop = sb3_callbacks.StopTrainingOnMaxEpisodes(max_episodes=1)
    model.learn(100, callback=stop)
    assert stop.n_episodes == 1
