"""Features extractors: a network between the observations and an actor, critic or Q-network (SB3's
``features_extractor_class``), for image observations above all.

herl's networks read one flat float vector per observation (:class:`herl.nn.policies.ObservationEncoder`); an
extractor reads the observation in its own form instead. :class:`ExtractorInput` turns the flat rows back into that
form, as Stable-Baselines3 preprocesses them:

- a Box entry gets its shape back; an image (a ``uint8`` Box of three axes with bounds 0 and 255) is scaled to
  [0, 1] when ``normalize_images`` is on (the default), and one stored channels-last ``(H, W, C)`` is transposed to
  channels-first ``(C, H, W)``, the layout convolutions take (SB3 wraps the env in ``VecTransposeImage`` for this;
  herl transposes inside the network, so observations, the replay buffer and ``predict`` keep the env's layout);
- a Discrete entry becomes a one-hot vector, a MultiDiscrete entry one one-hot vector per dimension, a MultiBinary
  entry its bits as floats;
- a Dict observation becomes a dict of those tensors, with the entries the networks read (all of them unless
  ``policy_kwargs`` ``input_keys`` chooses: see :func:`herl.nn.policies.input_keys`).

The extractor is built for the space of that form (:attr:`ExtractorInput.space`: images channels-first), so an
extractor written for SB3 (a subclass of SB3's ``BaseFeaturesExtractor``, or of :class:`BaseFeaturesExtractor`
here) works unchanged: ``cls(observation_space, **features_extractor_kwargs)`` with a ``features_dim`` attribute.

The extractors here are SB3's (the same layers, and arguments of the same names and defaults): :class:`NatureCNN`
(``CnnPolicy``'s), :class:`CombinedExtractor` (``MultiInputPolicy``'s when a Dict observation holds images) and
:class:`FlattenExtractor`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from herl.errors import ClassNotLoadedError
from herl.utils import loaded_class


class ImageSpaceError(ValueError, AssertionError):
    """An image network was given an observation that is not an image it can read (an AssertionError too, as SB3's
    check is an assertion)."""


def is_image_space(space: spaces.Space, *, normalized_image: bool = False) -> bool:
    """Whether ``space`` is an image: a Box of three axes, ``uint8`` with bounds 0 and 255 unless ``normalized_image``
    (then any Box of three axes), as SB3 decides."""
    if not isinstance(space, spaces.Box) or len(space.shape) != 3:
        return False
    if normalized_image:
        return True
    return space.dtype == np.uint8 and bool(np.all(space.low == 0)) and bool(np.all(space.high == 255))


def has_images(observation_space: spaces.Space, keys: tuple[str, ...]) -> bool:
    """Whether an entry the networks read is an image: one of ``keys`` of a Dict space, or the whole space."""
    if isinstance(observation_space, spaces.Dict):
        return any(is_image_space(observation_space[k]) for k in keys)
    return is_image_space(observation_space)


def is_channels_first(space: spaces.Box) -> bool:
    """SB3's rule: an image whose first axis is its smallest is channels-first."""
    return int(np.argmin(space.shape)) == 0


def _transposed(space: spaces.Box) -> spaces.Box:
    return spaces.Box(low=np.transpose(space.low, (2, 0, 1)), high=np.transpose(space.high, (2, 0, 1)),
                      dtype=space.dtype)


class BaseFeaturesExtractor(nn.Module):
    """Base of a features extractor (SB3's): ``__init__(observation_space, features_dim)``; subclasses define
    ``forward`` from the observation (a tensor, or a dict of tensors for a Dict space) to ``(batch, features_dim)``."""

    def __init__(self, observation_space: spaces.Space, features_dim: int = 0) -> None:
        super().__init__()
        if features_dim <= 0:
            raise ValueError(f"features_dim must be > 0, got {features_dim}")
        self._observation_space = observation_space
        self._features_dim = int(features_dim)

    @property
    def features_dim(self) -> int:
        return self._features_dim


def _flat_dim(space: spaces.Space) -> int:
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    return int(np.prod(space.shape))


class FlattenExtractor(BaseFeaturesExtractor):
    """The observation flattened (SB3's ``FlattenExtractor``)."""

    def __init__(self, observation_space: spaces.Space) -> None:
        if isinstance(observation_space, spaces.Dict):
            raise ValueError(f"FlattenExtractor flattens one array, and the observations are dicts with the entries "
                             f"{list(observation_space.spaces)}: leave features_extractor_class out (herl's networks "
                             "read the entries flat), or use CombinedExtractor (one extractor per entry, as SB3's "
                             "MultiInputPolicy)")
        super().__init__(observation_space, _flat_dim(observation_space))
        self.flatten = nn.Flatten()

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.flatten(observations)


class NatureCNN(BaseFeaturesExtractor):
    """The convolutional network of DQN's Nature paper (Mnih et al. 2015) for channels-first images, then a linear
    layer to ``features_dim`` features with ReLU (SB3's ``NatureCNN``)."""

    def __init__(self, observation_space: spaces.Space, features_dim: int = 512, normalized_image: bool = False) -> None:
        if not is_image_space(observation_space, normalized_image=normalized_image):
            raise ImageSpaceError(
                f"NatureCNN (CnnPolicy's network) reads images, and the observation space is {observation_space}: "
                + ("use MlpPolicy or MultiInputPolicy for observations that are not images"
                   if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 3 else
                   "an image of uint8 values in [0, 255] is scaled to [0, 1] by the network; for images already "
                   "scaled or normalized (VecNormalize, float images), pass policy_kwargs=dict(normalize_images=False)"))
        super().__init__(observation_space, features_dim)
        self.cnn = nn.Sequential(
            nn.Conv2d(observation_space.shape[0], 32, kernel_size=8, stride=4, padding=0), nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2, padding=0), nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1, padding=0), nn.ReLU(),
            nn.Flatten(),
        )
        height, width = observation_space.shape[1:]
        if min(height, width) < 36:
            raise ImageSpaceError(f"NatureCNN needs images of at least 36x36 pixels (its three convolutions shrink "
                                  f"them by 8, 4 and 3), got {height}x{width}: pass a features_extractor_class of your "
                                  "own for smaller images")
        with torch.no_grad():
            n_flatten = self.cnn(torch.zeros(1, *observation_space.shape)).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(observations))


class CombinedExtractor(BaseFeaturesExtractor):
    """A Dict observation's entries side by side: each image through its own :class:`NatureCNN` (``cnn_output_dim``
    features), every other entry flattened (SB3's ``CombinedExtractor``)."""

    def __init__(self, observation_space: spaces.Dict, cnn_output_dim: int = 256, normalized_image: bool = False) -> None:
        if not isinstance(observation_space, spaces.Dict):
            raise TypeError(f"CombinedExtractor reads Dict observations, got {observation_space}: use NatureCNN or "
                            "FlattenExtractor")
        super().__init__(observation_space, features_dim=1)
        extractors: dict[str, nn.Module] = {}
        total = 0
        for key, subspace in observation_space.spaces.items():
            if is_image_space(subspace, normalized_image=normalized_image):
                extractors[key] = NatureCNN(subspace, features_dim=cnn_output_dim, normalized_image=normalized_image)
                total += cnn_output_dim
            else:
                extractors[key] = nn.Flatten()
                total += _flat_dim(subspace)
        self.extractors = nn.ModuleDict(extractors)
        self._features_dim = total

    def forward(self, observations: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([extractor(observations[key]) for key, extractor in self.extractors.items()], dim=1)


BUILTIN_EXTRACTORS: dict[str, type[nn.Module]] = {
    cls.__name__: cls for cls in (NatureCNN, CombinedExtractor, FlattenExtractor)}
"""The extractors a model file names by their class name alone."""


SEEN_EXTRACTORS: dict[str, type[nn.Module]] = {}
"""The users' extractor classes named in this process, by :func:`extractor_name` (a class defined inside a function
is in no module, so a model of it loads again only by this)."""


def extractor_name(cls: type) -> str:
    """How a model file names an extractor class: its name for herl's own, ``module:qualname`` for any other (which
    :func:`extractor_class` then finds in this process)."""
    if BUILTIN_EXTRACTORS.get(cls.__name__) is cls:
        return cls.__name__
    name = f"{cls.__module__}:{cls.__qualname__}"
    SEEN_EXTRACTORS[name] = cls
    return name


def extractor_class(name: str) -> type[nn.Module]:
    """The class a model file names (see :func:`extractor_name`). A class of the user's is one given to a model in
    this process, or looked up among the modules already imported, never imported here: reading a file runs no code
    it names."""
    if name in BUILTIN_EXTRACTORS:
        return BUILTIN_EXTRACTORS[name]
    if name in SEEN_EXTRACTORS:
        return SEEN_EXTRACTORS[name]
    found = loaded_class(name, nn.Module)
    if found is None:
        raise ClassNotLoadedError(
            f"the features extractor class {name!r} is not loaded: import its module ({name.partition(':')[0]}) before "
            "loading the model, or pass policy_kwargs=dict(features_extractor_class=TheClass) to load (model files hold "
            "no code, so herl does not import it for you)")
    return found


class ExtractorInput:
    """herl's flat network inputs ``(batch, dim)`` back in an observation's own form (see the module docstring).

    Args:
        observation_space: the model's observation space.
        keys: the Dict entries the networks read, in the flat vector's order (ignored for other spaces).
        normalize_images: scale ``uint8`` images to [0, 1].
    """

    def __init__(self, observation_space: spaces.Space, keys: tuple[str, ...], *, normalize_images: bool) -> None:
        self.dict_obs = isinstance(observation_space, spaces.Dict)
        entries = {k: observation_space[k] for k in keys} if self.dict_obs else {"obs": observation_space}
        self.parts: list[tuple[str, int, str, Any]] = []  # (key, flat width, how, shape or size)
        out_spaces: dict[str, spaces.Space] = {}
        self.images = has_images(observation_space, keys)
        """Whether an entry the networks read is an image."""
        for key, space in entries.items():
            image = is_image_space(space)
            if isinstance(space, spaces.Discrete):
                self.parts.append((key, 1, "onehot", (int(space.n), int(space.start))))
                out_spaces[key] = space
            elif isinstance(space, spaces.MultiDiscrete):
                self.parts.append((key, int(np.prod(space.shape)), "multi_onehot", [int(n) for n in space.nvec.ravel()]))
                out_spaces[key] = space
            elif image and not is_channels_first(space):
                self.parts.append((key, int(np.prod(space.shape)), "image_last", tuple(space.shape)))
                out_spaces[key] = _transposed(space)
            else:
                self.parts.append((key, int(np.prod(space.shape)), "image" if image else "box", tuple(space.shape)))
                out_spaces[key] = space
        self.normalize_images = normalize_images
        self.space: spaces.Space = spaces.Dict(out_spaces) if self.dict_obs else out_spaces["obs"]
        """The space of what the extractor reads: images channels-first."""

    def __call__(self, x: torch.Tensor) -> Any:
        out: dict[str, torch.Tensor] = {}
        start, n = 0, x.shape[0]
        for key, width, how, info in self.parts:
            part = x[:, start:start + width]
            start += width
            if how == "onehot":
                size, first = info
                out[key] = nn.functional.one_hot((part[:, 0].long() - first).clamp(0, size - 1), size).float()
            elif how == "multi_onehot":
                out[key] = torch.cat([nn.functional.one_hot(part[:, i].long().clamp(0, size - 1), size).float()
                                      for i, size in enumerate(info)], dim=1)
            else:
                part = part.reshape(n, *info)
                if how == "image_last":
                    part = part.permute(0, 3, 1, 2)
                if how != "box" and self.normalize_images:
                    part = part / 255.0  # SB3's division, to the bit
                out[key] = part
        return out if self.dict_obs else out["obs"]


def make_extractor(cls: type[nn.Module], kwargs: Mapping[str, Any], observation_space: spaces.Space,
                   keys: tuple[str, ...], normalize_images: bool) -> tuple[nn.Module, ExtractorInput]:
    """Build ``cls`` for what it will read, and the :class:`ExtractorInput` that feeds it."""
    feed = ExtractorInput(observation_space, keys, normalize_images=normalize_images)
    kwargs = dict(kwargs)
    if not normalize_images and cls in (NatureCNN, CombinedExtractor):
        kwargs.setdefault("normalized_image", True)  # SB3: no dtype or bounds check on images scaled already
    extractor = cls(feed.space, **kwargs)
    features_dim = getattr(extractor, "features_dim", None)
    if not isinstance(features_dim, (int, np.integer)) or isinstance(features_dim, bool) or features_dim <= 0:
        raise TypeError(f"the features extractor {cls.__name__} has no features_dim > 0 (got {features_dim!r}): a "
                        "features extractor says how many features it outputs, as SB3's BaseFeaturesExtractor does")
    return extractor, feed


class ReadsFeatures:
    """Mixin of the networks an extractor can feed (actors, critics, Q-networks): :meth:`features` is the identity
    until :meth:`attach_features` gives the network a ``features_extractor`` (a submodule, so its weights are the
    network's, and a copy of the network, such as a target network, has its own copy)."""

    def attach_features(self, extractor: nn.Module, feed: ExtractorInput) -> None:
        self.features_extractor = extractor
        self.features_input = feed

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The extractor's features of the flat inputs ``x``, or ``x`` for a network without one."""
        extractor = self._modules.get("features_extractor")  # type: ignore[attr-defined]
        return x if extractor is None else extractor(self.features_input(x))


def has_features(network: nn.Module) -> bool:
    return network._modules.get("features_extractor") is not None
