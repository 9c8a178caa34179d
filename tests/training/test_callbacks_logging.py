"""Callbacks fire with SB3's hooks and can stop training; logs carry the namespaced keys."""

from __future__ import annotations

import csv

import pytest

from herl import (
    DQN,
    BaseCallback,
    CallbackList,
    CheckpointCallback,
    EvalCallback,
    HerReplayBuffer,
    StopTrainingOnSuccessThreshold,
    configure,
)
from herl.envs import BitFlippingEnv

SMALL = dict(learning_starts=16, batch_size=16, buffer_size=1000, policy_kwargs=dict(net_arch=[16, 16]),
             replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=dict(n_sampled_goal=2), seed=0)


def make_model(**kwargs) -> DQN:
    return DQN("MultiInputPolicy", BitFlippingEnv(n_bits=4), **{**SMALL, **kwargs})


class Recorder(BaseCallback):
    def __init__(self, stop_after: int | None = None) -> None:
        super().__init__()
        self.events: list[str] = []
        self.stop_after = stop_after

    def _on_training_start(self) -> None:
        self.events.append("training_start")

    def _on_rollout_start(self) -> None:
        self.events.append("rollout_start")

    def _on_step(self) -> bool:
        assert self.locals["rewards"].shape == (1,)  # the read-only training state
        assert self.model.num_timesteps == self.num_timesteps == self.n_calls
        return self.stop_after is None or self.n_calls < self.stop_after

    def _on_rollout_end(self) -> None:
        self.events.append("rollout_end")

    def _on_training_end(self) -> None:
        self.events.append("training_end")


def test_hooks_fire_in_order():
    recorder = Recorder()
    make_model(train_freq=4).learn(20, callback=recorder)
    assert recorder.n_calls == 20
    assert recorder.events[0] == "training_start" and recorder.events[-1] == "training_end"
    assert recorder.events.count("rollout_start") == recorder.events.count("rollout_end") == 5
    with pytest.raises(TypeError):
        recorder.locals["rewards"] = 0  # callbacks see the state read-only


def test_callback_stops_training():
    model = make_model()
    model.learn(1000, callback=Recorder(stop_after=25))
    assert model.num_timesteps == 25


def test_function_callback_stops_training():
    calls = []

    def callback(locals_, globals_):
        calls.append(locals_["dones"])
        return len(calls) < 10

    model = make_model()
    model.learn(1000, callback=callback)
    assert model.num_timesteps == 10


def test_callback_list_and_checkpoints(tmp_path):
    recorder = Recorder()
    model = make_model()
    model.learn(30, callback=CallbackList([recorder, CheckpointCallback(10, tmp_path, name_prefix="ckpt")]))
    assert recorder.n_calls == 30
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"ckpt_{n}_steps.zip" for n in (10, 20, 30)]
    assert DQN.load(tmp_path / "ckpt_20_steps.zip").num_timesteps == 20


def test_eval_callback_reports_success_and_stops_on_threshold(tmp_path):
    stop = StopTrainingOnSuccessThreshold(threshold=0.0)  # any success rate reaches 0: stops at the first eval
    eval_cb = EvalCallback(BitFlippingEnv(n_bits=4), n_eval_episodes=4, eval_freq=20, callback_after_eval=stop,
                           best_model_save_path=tmp_path, log_path=tmp_path, verbose=0)
    model = make_model()
    model.learn(1000, callback=eval_cb)
    assert model.num_timesteps == 20
    assert 0.0 <= eval_cb.last_success_rate <= 1.0
    assert (tmp_path / "best_model.zip").exists() and (tmp_path / "evaluations.npz").exists()


def test_csv_and_stdout_logs_have_namespaced_keys(tmp_path, capsys):
    model = make_model(verbose=1)
    model.set_logger(configure(tmp_path, ["stdout", "csv"]))
    model.learn(64, log_interval=4)
    with open(tmp_path / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for key in ("rollout/success_rate", "rollout/ep_rew_mean", "time/fps", "train/loss", "train/n_updates"):
        assert key in rows[-1], key
    assert "success_rate" in capsys.readouterr().out


def test_tensorboard_log(tmp_path):
    pytest.importorskip("tensorboard")
    model = make_model(tensorboard_log=str(tmp_path))
    model.learn(64, log_interval=4)
    model.learn(32, log_interval=4)
    runs = sorted(p.name for p in tmp_path.iterdir())
    assert runs == ["DQN_1", "DQN_2"]
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "DQN_1").iterdir())


def test_a_new_learn_call_closes_the_running_episodes():
    model = make_model()
    model.learn(2)
    assert int(model.replay_buffer.storage.open_len.sum()) == 2  # a 4-bit episode, 2 steps in (seeded: no early success)
    model.learn(1)  # resets the env: the running episode ends in the buffer instead of continuing across the reset
    assert int(model.replay_buffer.storage.open_len.sum()) == 1


def test_configure_takes_sb3s_formats_defaults_and_exclusions(tmp_path, capsys):
    """SB3's configure(folder): stdout, log.txt and progress.csv by default; "json" too; record(..., exclude=...)
    keeps a value from the formats named; objects that are no numbers or text go to TensorBoard alone."""
    from herl.training.logger import configure

    logger = configure(tmp_path / "logs")
    logger.record("train/loss", 1.5)
    logger.record("train/hidden", 2.0, exclude=("stdout", "log"))
    logger.record("train/figure", object(), exclude=("stdout", "log", "csv", "json"))
    logger.record("train/unexcluded_object", object())
    logger.dump(7)
    logger.info("a message")
    logger.set_level(logger.WARN)
    logger.info("not shown")
    logger.close()
    out = capsys.readouterr().out
    assert "loss" in out and "hidden" not in out and "a message" in out and "not shown" not in out
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["log.txt", "progress.csv"]
    assert (tmp_path / "logs" / "progress.csv").read_text().splitlines() == ["train/hidden,train/loss", "2.0,1.5"]
    text = (tmp_path / "logs" / "log.txt").read_text()
    assert "loss" in text and "hidden" not in text and "object" not in text
    assert logger.output_formats is logger.outputs
    json_logger = configure(tmp_path / "json", ["json"])
    json_logger.record("k", 3)
    json_logger.dump(0)
    json_logger.close()
    assert (tmp_path / "json" / "progress.json").read_text() == '{"k": 3}\n'
    with pytest.raises(ValueError, match="'log', 'csv', 'json'"):
        configure(tmp_path, ["xml"])
