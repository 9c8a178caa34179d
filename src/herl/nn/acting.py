"""``model.actor.predict(obs)`` and ``model.q_net.predict(obs)``, as Stable-Baselines3 users call them.

In SB3 an actor or a Q-network is itself a policy that predicts; in herl it is a plain module, and the model holds
what predicting also needs (the observation normalizer, the action space's bounds, the device). So the network a
model acts with is bound to that model, and its ``predict`` is the model's policy's (``model.policy.predict``).

The binding is a weak reference kept out of ``state_dict()``, pickling and ``copy.deepcopy`` (the algorithms copy
their networks into target networks with it): a copy is a network of no model, whose ``predict`` says so.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import IO, Any, ClassVar

_BOUND = "_acting_for"
_LOADED_WITH = "_loaded_with"  # the model a network read by ``load`` came with, held: nothing else holds it


class ActingNetwork:
    """Mixin of the networks a model can act with (actors, Q-networks): ``predict`` once a model binds them."""

    def bind_model(self, model: Any, name: str) -> None:
        """Make ``predict`` act through ``model``, whose ``policy[name]`` is this network."""
        self.__dict__[_BOUND] = (weakref.ref(model), name)

    model_loader: ClassVar[Callable[..., Any] | None] = None
    """Reads a model file (``OffPolicyAlgorithm.load``): set by herl.training.base, as this floor sits below it."""

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[Any, Any]:
        """Actions for one observation or a batch, in the env's action space, and ``state`` as given: the model's
        ``policy.predict`` (SB3's ``actor.predict`` / ``q_net.predict``)."""
        return self._model("predicting").policy.predict(observation, state, episode_start, deterministic)

    def save(self, path: str | os.PathLike | IO[bytes]) -> None:
        """Write the model this network acts for (SB3's ``actor.save`` / ``q_net.save``): a herl model file, small
        (no replay buffer), which :meth:`load` reads back as this network and ``Algo.load`` as the whole model."""
        self._model("saving").save(path)

    @classmethod
    def load(cls, path: str | os.PathLike | IO[bytes], device: Any = "auto") -> ActingNetwork:
        """The network of this class that the model saved at ``path`` acts with (SB3's ``Actor.load(path)``), on
        ``device``; it predicts without an env."""
        model = ActingNetwork.model_loader(path, device=device)
        for name in ("actor", "q_net"):
            network = model.policy[name] if name in model.policy else None
            if isinstance(network, cls):
                network.__dict__[_LOADED_WITH] = model
                return network
        raise TypeError(f"the {type(model).__name__} model in {path} acts with no {cls.__name__}: load it with "
                        f"{type(model).__name__}.load")

    def _model(self, doing: str) -> Any:
        bound = self.__dict__.get(_BOUND)
        model = bound[0]() if bound is not None else None
        if model is None or model.policy[bound[1]] is not self:
            raise RuntimeError(
                f"this {type(self).__name__} is not the network a model acts with (a copy, a target network, or one "
                f"built on its own): {doing} needs the model's observation normalizer and action bounds, so call the "
                "model's (model.predict(obs), model.save(path)) or its policy's"
            )
        return model

    def __getstate__(self) -> dict[str, Any]:
        state = dict(super().__getstate__())  # type: ignore[misc]
        state.pop(_BOUND, None)  # a copy or a pickled network belongs to no model
        state.pop(_LOADED_WITH, None)
        return state
