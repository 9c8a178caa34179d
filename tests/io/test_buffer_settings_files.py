"""The replay buffer in model files: a class of the user's (a subclass of herl's) named by module and class, found again
where its module is imported, and never replaced by a plain ReplayBuffer (which would train a HER model without HER)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest
from gymnasium.wrappers import TimeLimit

from herl import DQN, HerReplayBuffer, ReplayBuffer, evaluate_policy
from herl.envs import BitFlippingEnv
from herl.errors import ClassNotLoadedError
from herl.io.model import read_model

SMALL = dict(learning_starts=20, batch_size=8, buffer_size=400, policy_kwargs=dict(net_arch=[8]), seed=0)


def bits() -> TimeLimit:
    return TimeLimit(BitFlippingEnv(n_bits=4), 4)


@pytest.fixture
def user_module():
    """A module ``my_buffers`` holding ``Counting``, a HerReplayBuffer that counts its samples and takes a setting of
    its own; removed after the test (a fresh process that never imported it)."""
    module = types.ModuleType("my_buffers")

    class Counting(HerReplayBuffer):
        samples = 0

        def __init__(self, *args, window: int = 3, **kwargs):
            super().__init__(*args, **kwargs)
            self.window = window

        def sample(self, *args, **kwargs):
            Counting.samples += 1
            return super().sample(*args, **kwargs)

    Counting.__module__, Counting.__qualname__ = "my_buffers", "Counting"
    module.Counting = Counting
    sys.modules["my_buffers"] = module
    yield Counting
    sys.modules.pop("my_buffers", None)


def trained(cls: type, path: Path) -> DQN:
    model = DQN("MultiInputPolicy", bits(), replay_buffer_class=cls,
                replay_buffer_kwargs=dict(n_sampled_goal=2, window=1), **SMALL)
    model.learn(40)
    model.save(path)
    return model


def test_the_class_is_named_by_module_and_found_again_where_it_is_imported(user_module, tmp_path: Path) -> None:
    trained(user_module, tmp_path / "model.zip")
    meta, _ = read_model(tmp_path / "model.zip")
    assert meta["replay_buffer_class"] == "my_buffers:Counting"
    assert meta["replay_buffer_kwargs"] == {"n_sampled_goal": 2, "window": 1}
    model = DQN.load(tmp_path / "model.zip", env=bits())
    assert model.replay_buffer_class is user_module and type(model.replay_buffer) is user_module
    assert model.replay_buffer.window == 1 and model.replay_buffer.n_sampled_goal == 2
    before = user_module.samples
    model.learn(20)
    assert user_module.samples > before  # the subclass samples, with HER


def test_herls_own_classes_keep_their_names(tmp_path: Path) -> None:
    for cls in (HerReplayBuffer, ReplayBuffer):
        model = DQN("MultiInputPolicy", bits(), replay_buffer_class=cls, **SMALL)
        model.save(tmp_path / "model.zip")
        assert read_model(tmp_path / "model.zip")[0]["replay_buffer_class"] == cls.__name__
        assert DQN.load(tmp_path / "model.zip", env=bits()).replay_buffer_class is cls


def test_where_the_module_is_not_imported_the_model_predicts_and_refuses_to_build_the_buffer(
        user_module, tmp_path: Path) -> None:
    saved = trained(user_module, tmp_path / "model.zip")
    sys.modules.pop("my_buffers")
    model = DQN.load(tmp_path / "model.zip")
    observation = bits().reset(seed=0)[0]
    assert np.array_equal(model.predict(observation, deterministic=True)[0],
                          saved.predict(observation, deterministic=True)[0])
    evaluate_policy(model, bits(), n_eval_episodes=2)
    assert model.replay_buffer_class is not user_module and model.replay_buffer_class.__name__ == "Counting"
    model.save(tmp_path / "again.zip")  # saved again under the same name and settings: nothing lost
    meta, _ = read_model(tmp_path / "again.zip")
    assert meta["replay_buffer_class"] == "my_buffers:Counting"
    assert meta["replay_buffer_kwargs"] == {"n_sampled_goal": 2, "window": 1}
    fix = (r"the replay buffer class 'my_buffers:Counting' is not loaded: import its module \(my_buffers\) before "
           r"loading the model, or pass replay_buffer_class=TheClass to load")
    with pytest.raises(ClassNotLoadedError, match=fix):
        DQN.load(tmp_path / "model.zip", env=bits())
    with pytest.raises(ClassNotLoadedError, match=fix):
        model.set_env(bits())
    assert model.env is None and model.replay_buffer is None  # the failed set_env left the model as it was
    with pytest.raises(ValueError, match="this model has no env to learn from"):
        model.learn(10)


def test_the_class_passed_to_load_stands_in_for_one_not_imported(user_module, tmp_path: Path) -> None:
    trained(user_module, tmp_path / "model.zip")
    sys.modules.pop("my_buffers")
    model = DQN.load(tmp_path / "model.zip", env=bits(), replay_buffer_class=user_module)
    assert type(model.replay_buffer) is user_module and model.replay_buffer.window == 1
    model.learn(20)


def test_numpy_typed_settings_are_kept_and_code_is_named_at_save(tmp_path: Path) -> None:
    """NumPy numbers and arrays (a sweep's values) were dropped from the file silently, and so were functions; now the
    first are kept as Python's, and saving names the second."""
    def dense(achieved_goal, desired_goal, info):
        return -np.abs(achieved_goal - desired_goal).sum(-1).astype(np.float32)

    kwargs = dict(n_sampled_goal=np.int64(8), desired_goal_share=np.float32(0.5),
                  goal_selection_strategy=np.str_("final"), info_keys=np.array(["is_success"]), compute_reward=dense)
    model = DQN("MultiInputPolicy", bits(), replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=kwargs, **SMALL)
    with pytest.warns(UserWarning, match=r"replay_buffer_kwargs 'compute_reward' hold code or objects .*pass them "
                                         r"again on load with replay_buffer_kwargs=dict"):
        model.save(tmp_path / "model.zip")
    meta, _ = read_model(tmp_path / "model.zip")
    assert meta["replay_buffer_kwargs"] == {"n_sampled_goal": 8, "desired_goal_share": 0.5,
                                            "goal_selection_strategy": "final", "info_keys": ["is_success"]}
    loaded = DQN.load(tmp_path / "model.zip", env=bits(), replay_buffer_kwargs=dict(compute_reward=dense))
    assert loaded.replay_buffer.n_sampled_goal == 8 and loaded.replay_buffer.desired_goal_share == 0.5


def test_a_subclass_s_own_settings_come_back_with_the_models_buffer(user_module, tmp_path: Path) -> None:
    """The buffer file keeps herl's settings; load_replay_buffer built the subclass with its own at their defaults
    (window 3 where the model's was 1), silently. Now the model's are passed, and load takes them too."""
    model = trained(user_module, tmp_path / "model.zip")
    model.save_replay_buffer(tmp_path / "buffer.zip")
    loaded = DQN.load(tmp_path / "model.zip", env=bits())
    loaded.load_replay_buffer(tmp_path / "buffer.zip")
    assert type(loaded.replay_buffer) is user_module and loaded.replay_buffer.window == 1
    assert user_module.load(tmp_path / "buffer.zip", env=bits(), window=2).window == 2
    with pytest.raises(ValueError, match=r"buffer\.zip keeps \['n_sampled_goal'\] itself: load takes only settings the "
                                         r"file does not keep"):
        user_module.load(tmp_path / "buffer.zip", env=bits(), n_sampled_goal=3)
