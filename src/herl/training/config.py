"""Hyperparameters as frozen dataclasses: the shared off-policy ones here, each algorithm's own in its file.

Users pass them as keyword arguments with Stable-Baselines3's names (``SAC(..., learning_rate=1e-3)``);
the model keeps them as a frozen config, saved as JSON with the model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import nn

from herl.errors import (BOOL, NON_NEGATIVE_INT, POSITIVE_INT, ClassNotLoadedError, ConfigError, Rule, check, check_fields,
                         did_you_mean, integer, number)
from herl.nn.extractors import BUILTIN_EXTRACTORS, extractor_class, extractor_name
from herl.nn.mlp import ACTIVATIONS, AUTO_PRECISION, PRECISIONS


SDE_REFUSAL = (
    "use_sde=True (gSDE, generalized state-dependent exploration) is not implemented in herl: leave it False (SB3's "
    "default; SAC then explores with its own Gaussian policy); for smoother, temporally correlated exploration use TD3 "
    "or DDPG with action_noise=OrnsteinUhlenbeckActionNoise(...), and for more exploration random_action_prob=p"
)


@dataclass(frozen=True)
class OffPolicyConfig:
    """Hyperparameters every off-policy algorithm shares."""

    learning_rate: float = 3e-4
    """Adam's step size for every network (a float here: the model takes a schedule, see ``lr_schedule``)."""
    buffer_size: int = 1_000_000
    """Transitions the replay buffer holds."""
    learning_starts: int = 100
    """Env steps of uniformly random actions before the first update."""
    batch_size: int = 256
    """Transitions per gradient step."""
    tau: float = 0.005
    """Polyak coefficient of the target networks (1.0: hard copy; 0: they stay as they are, SB3 allows it to freeze
    them)."""
    gamma: float = 0.99
    """Discount factor."""
    train_freq: tuple[int, str] = (1, "step")
    """Update after this many env steps (``(n, "step")``, or an int) or episodes (``(n, "episode")``)."""
    gradient_steps: int = 1
    """Gradient steps after each collection; -1: as many as env steps collected."""
    n_steps: int = 1
    """n-step returns (SB3's argument): each sampled transition's reward is the discounted sum of up to n rewards
    of its episode (stopping at its end), and the target bootstraps from the state reached, discounted by gamma^m.
    With HER, the rewards of the later steps are recomputed for the transition's (relabeled) goal."""
    normalize_observations: bool | None = None
    """Running mean/std normalization of the network inputs; None: on for goal envs, off otherwise."""
    clip_observations: float = 5.0
    """Normalized inputs are clipped to ``±clip_observations`` (HER's baselines use 5)."""
    clip_target: bool | tuple[float, float] = False
    """Clip TD targets: True for [-1/(1-gamma), 0] (the range of returns of -1/0 goal rewards), or (low, high)."""
    stats_window_size: int = 100
    """Episodes averaged in ``rollout/ep_rew_mean`` and ``rollout/success_rate``."""
    compile: bool = False
    """Run each gradient step through ``torch.compile`` as one function: the loss, its gradients, gradient clipping,
    Adam's step and the target networks' Polyak averaging (on CUDA in ``"reduce-overhead"`` mode: one CUDA graph
    replayed per step). An optimizer other than Adam gets the loss alone compiled, forward and backward, and its own
    step. The compiled update computes what the eager one does, to float rounding (fused kernels round in their own
    order); CrossQ refuses it. Compiling takes seconds to a minute, paid at the first update and reported; where it
    cannot compile (no C++ compiler for the CPU backend, say) the model warns and stays eager."""

    # Defaults that changed, with the value they had: a saved config without the field gets the old one.
    former_defaults: ClassVar[Mapping[str, Any]] = {}

    # What each field allows, checked at construction (one validation path for the Python API, --set,
    # presets and model files). A subclass adds its own fields' rules in its own ``field_rules``; a field with no
    # rule is checked against its default's type (a float field takes a finite number, ...).
    field_rules: ClassVar[Mapping[str, Rule | None]] = {
        "learning_rate": number(0.0, low_open=True, note="a constant here: a schedule goes to the model, e.g. "
                                "SAC(..., learning_rate=fn), or is set as model.lr_schedule"),
        "buffer_size": POSITIVE_INT,
        "learning_starts": NON_NEGATIVE_INT,
        "batch_size": POSITIVE_INT,
        "tau": number(0.0, 1.0, note="0 keeps the target networks as they are"),
        "gamma": number(0.0, 1.0),
        "gradient_steps": integer(-1, note="-1: as many as env steps collected"),
        "n_steps": POSITIVE_INT,
        "normalize_observations": Rule("bool", also=(None,)),
        # the normalizer clips in float32: a bound past its largest value would overflow there
        "clip_observations": number(0.0, 3.4e38, low_open=True),
        "stats_window_size": POSITIVE_INT,
        "compile": BOOL,
        "train_freq": None,  # checked in validate: an int or (n, unit)
        "clip_target": None,  # a bool or (low, high)
    }

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def owner(cls) -> str:
        """The algorithm's name, for messages ("SAC learning_rate=...")."""
        return cls.__name__[:-6] if cls.__name__.endswith("Config") and cls.__name__ != "Config" else cls.__name__

    @classmethod
    def rules(cls) -> dict[str, Rule | None]:
        out: dict[str, Rule | None] = {}
        for klass in reversed(cls.__mro__):
            out.update(vars(klass).get("field_rules", {}))
        return out

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> OffPolicyConfig:
        """Build from keyword arguments, with errors that name the unknown ones and the known ones."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - set(fields))
        if unknown:
            raise TypeError(f"{cls.owner()} got unknown argument(s) {unknown}{did_you_mean(unknown, fields)}; known "
                            f"hyperparameters: {sorted(fields)}")
        values = {name: _plain(value, fields[name].default) for name, value in kwargs.items()}
        if "train_freq" in values:
            values["train_freq"] = _train_freq(values["train_freq"], cls.owner())
        if isinstance(values.get("clip_target"), list):
            values["clip_target"] = tuple(values["clip_target"])
        return cls(**values)  # __post_init__ validates

    @classmethod
    def with_former_defaults(cls, saved: Mapping[str, Any]) -> dict[str, Any]:
        """``saved`` (a config read from a file) with :attr:`former_defaults` filled in where it lacks them: a file
        written before a field existed, or before its default changed, keeps training as it did."""
        return {**cls.former_defaults, **saved}

    def validate(self) -> None:
        """Check every field (raises :class:`herl.errors.ConfigError` naming the field, the value and what is allowed)."""
        owner = self.owner()
        if callable(self.learning_rate):
            raise ConfigError(owner, "learning_rate", self.learning_rate, "a finite number > 0 (a schedule goes to the model, "
                              "e.g. SAC(..., learning_rate=fn), or is set as model.lr_schedule)")
        check_fields(owner, self, self.rules())
        _train_freq(self.train_freq, owner)
        clip = self.clip_target
        if not isinstance(clip, bool) and clip is not None:
            ok = isinstance(clip, (tuple, list)) and len(clip) == 2 and all(
                number().accepts(v) or v in (float("inf"), float("-inf")) for v in clip) and clip[0] < clip[1]
            if not ok:
                raise ConfigError(owner, "clip_target", clip, "true, false, or [low, high] with low < high")

    def target_bounds(self) -> tuple[float, float] | None:
        """The (low, high) clipping range of TD targets, or None."""
        if self.clip_target is True:
            return (-1.0 / (1.0 - self.gamma) if self.gamma < 1 else float("-inf"), 0.0)
        if self.clip_target is False or self.clip_target is None:
            return None
        low, high = self.clip_target
        return float(low), float(high)

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def _plain(value: Any, default: Any) -> Any:
    """NumPy scalars as Python numbers, and whole floats (``1e6``) as ints for integer fields."""
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()
    if isinstance(default, int) and not isinstance(default, bool) and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


_TRAIN_FREQ = "a positive integer, or (n, 'step') / (n, 'episode') with n a positive integer"


def _train_freq(value: Any, owner: str = "") -> tuple[int, str]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = (value, "step")
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ConfigError(owner, "train_freq", value, _TRAIN_FREQ)
    n, unit = value
    if unit not in ("step", "episode") or not POSITIVE_INT.accepts(_plain(n, 1)):
        raise ConfigError(owner, "train_freq", value, _TRAIN_FREQ)
    return (int(n), unit)


AUTO_EXTRACTOR = "auto"
FEATURES_KWARGS = ("features_extractor_class", "features_extractor_kwargs", "share_features_extractor",
                   "normalize_images")


@dataclass(frozen=True)
class PolicyConfig:
    """The networks' shape, from SB3's ``policy_kwargs``."""

    actor_arch: tuple[int, ...] = (256, 256)
    """Hidden layers of the actor (``net_arch=dict(pi=[...])``)."""
    critic_arch: tuple[int, ...] = (256, 256)
    """Hidden layers of each critic or Q-network (``net_arch=dict(qf=[...])``)."""
    activation: str = "relu"
    """Activation between layers: a name, or ``activation_fn=nn.ReLU`` etc."""
    n_critics: int = 2
    """Critics in the ensemble (TD3/SAC's clipped double Q uses 2)."""
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The algorithm's own policy kwargs (TQC's ``n_quantiles``, CrossQ's batch renormalization settings),
    with its defaults filled in."""
    precision: str = "float32"
    """Dtype of the hidden-to-hidden matmuls of the actor and critics: ``"float32"``, or ``"bfloat16"`` (mixed
    precision: weights, gradients, optimizer state, inputs and outputs stay float32; 2-4x faster matmuls
    on CPUs with AVX512-BF16/AMX and on recent GPUs, slower where bfloat16 is emulated), or ``"auto"``:
    bfloat16 where the model's device has it in hardware, else float32 (the model resolves it when it is made,
    and saves what it chose)."""
    layer_norm: bool | str = False
    """Layer norm before each hidden activation (:mod:`herl.nn.mlp`): ``True`` in the actor and the critics (Stable-
    Baselines' ``LnMlpPolicy``), ``"critic"`` in the critics (Q-networks) only, ``False`` nowhere."""
    features_extractor: str | None = AUTO_EXTRACTOR
    """The features extractor class by name (:mod:`herl.nn.extractors`: ``"NatureCNN"``, ``"CombinedExtractor"``,
    ``"FlattenExtractor"``, or ``"module:qualname"`` for one of the user's), None for herl's flat inputs (no
    extractor), or ``"auto"``: the model picks as SB3 does (``CnnPolicy``: NatureCNN; ``MultiInputPolicy`` on a Dict
    observation with an image entry: CombinedExtractor; else the flat inputs) and saves what it picked."""
    features_extractor_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the extractor (e.g. ``features_dim``, ``cnn_output_dim``): JSON values."""
    share_features_extractor: bool = False
    """One extractor for the actor and the critics (trained by the actor's loss, as in SB3), instead of one each."""
    normalize_images: bool = True
    """An extractor reads ``uint8`` images scaled to [0, 1]."""
    optimizer_class: str | None = None
    """The optimizer by name (:mod:`herl.training.optimizers`: a ``torch.optim`` class such as ``"AdamW"``, or
    ``"module:qualname"`` for one of the user's), or None for herl's Adam (one fused kernel per step where the device
    has it). SB3's ``optimizer_class`` may be given as the class."""
    optimizer_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the optimizer beside its step size (``learning_rate``), e.g. ``weight_decay``: JSON
    values."""
    input_keys: tuple[str, ...] | None = None
    """The entries of a Dict observation the networks read, in order; None: all of them (SB3's MultiInputPolicy),
    which the model resolves when it is made and saves. ``("observation", "desired_goal")`` feeds a goal policy the
    state and the goal only, as OpenAI baselines did (models saved before this setting existed read so)."""

    @property
    def actor_layer_norm(self) -> bool:
        return self.layer_norm is True

    @property
    def critic_layer_norm(self) -> bool:
        return self.layer_norm is True or self.layer_norm == "critic"

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any] | None, default_arch: Sequence[int] | Mapping[str, Sequence[int]],
                    default_n_critics: int = 2, option_defaults: Mapping[str, Any] | None = None) -> PolicyConfig:
        """``option_defaults``: the policy kwargs an algorithm reads beyond the shared ones, with their defaults
        (their types are checked against the defaults')."""
        kwargs = dict(kwargs or {})
        option_defaults = dict(option_defaults or {})
        options = {}
        for name, default in option_defaults.items():
            value = kwargs.pop(name, default)
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise TypeError(f"policy_kwargs {name} must be True or False, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(default, int) and int(value) != value):
                kind = "an integer" if isinstance(default, int) else "a number"
                raise TypeError(f"policy_kwargs {name} must be {kind}, got {value!r}")
            options[name] = type(default)(value)
        if isinstance(default_arch, Mapping):
            default_actor, default_critic = default_arch["pi"], default_arch["qf"]
        else:
            default_actor = default_critic = default_arch
        arch = kwargs.pop("net_arch", None)
        if arch is None:
            actor, critic = default_actor, default_critic
        elif isinstance(arch, Mapping):
            actor, critic = arch.get("pi", default_actor), arch.get("qf", arch.get("q", default_critic))
        else:
            actor = critic = arch
        activation = kwargs.pop("activation_fn", kwargs.pop("activation", "relu"))
        if isinstance(activation, type) and issubclass(activation, nn.Module):
            names = {v: k for k, v in ACTIVATIONS.items()}
            if activation not in names:
                raise ValueError(f"activation_fn {activation.__name__} is not supported: use one of {sorted(ACTIVATIONS)}")
            activation = names[activation]
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}: use one of {sorted(ACTIVATIONS)}")
        n_critics = _plain(kwargs.pop("n_critics", default_n_critics), 1)
        precision = kwargs.pop("precision", "float32")
        layer_norm = kwargs.pop("layer_norm", False)
        features = _features_settings(kwargs)
        optimizer = _optimizer_settings(kwargs)
        keys = kwargs.pop("input_keys", None)
        if keys is not None:
            if isinstance(keys, str) or not isinstance(keys, Sequence) or not all(isinstance(k, str) for k in keys):
                raise TypeError(f"policy_kwargs input_keys must be a list of observation keys, got {keys!r}")
            keys = tuple(keys)
        if kwargs.pop("use_sde", False):  # SB3 writes use_sde=False into policy_kwargs; only True is unsupported
            raise ValueError(SDE_REFUSAL)
        if kwargs:
            known = ["net_arch", "activation_fn", "n_critics", "precision", "layer_norm", *FEATURES_KWARGS,
                     "optimizer_class", "optimizer_kwargs", "input_keys", *option_defaults]
            raise TypeError(f"unsupported policy_kwargs {sorted(kwargs)}: this algorithm reads {', '.join(known)}")
        return cls(_arch(actor, "net_arch"), _arch(critic, "net_arch"), activation, n_critics, options, precision,
                   layer_norm, **features, **optimizer, input_keys=keys)

    def __post_init__(self) -> None:
        for name in ("actor_arch", "critic_arch"):
            _arch(getattr(self, name), name)
        check("policy_kwargs", "n_critics", self.n_critics, POSITIVE_INT)
        if self.precision not in (*PRECISIONS, AUTO_PRECISION):
            raise ConfigError("policy_kwargs", "precision", self.precision, f"one of {sorted(PRECISIONS)} (the "
                              "dtype of the hidden layers' matmuls; weights and optimizer state stay float32), or "
                              f"{AUTO_PRECISION!r} (bfloat16 where the device has it in hardware)")
        if not (isinstance(self.layer_norm, bool) or self.layer_norm == "critic"):
            raise ConfigError("policy_kwargs", "layer_norm", self.layer_norm, "True (actor and critics), 'critic' "
                              "(critics only) or False")
        for name in ("share_features_extractor", "normalize_images"):
            check("policy_kwargs", name, getattr(self, name), BOOL)

    def to_policy_kwargs(self) -> dict[str, Any]:
        return {"net_arch": {"pi": list(self.actor_arch), "qf": list(self.critic_arch)},
                "activation_fn": self.activation, "n_critics": self.n_critics, "precision": self.precision,
                "layer_norm": self.layer_norm, "features_extractor_class": self.features_extractor,
                "features_extractor_kwargs": dict(self.features_extractor_kwargs),
                "share_features_extractor": self.share_features_extractor, "normalize_images": self.normalize_images,
                # herl's Adam leaves no entry, so files of models that keep it read as before
                **({"optimizer_class": self.optimizer_class, "optimizer_kwargs": dict(self.optimizer_kwargs)}
                   if self.optimizer_class is not None or self.optimizer_kwargs else {}),
                **({"input_keys": list(self.input_keys)} if self.input_keys is not None else {}),
                **self.options}


def _features_settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop SB3's features extractor policy kwargs from ``kwargs``, as :class:`PolicyConfig` fields. The class may be
    given as a class (remembered by name, see :func:`herl.nn.extractors.extractor_name`), a name, or None (herl's
    flat inputs)."""
    out: dict[str, Any] = {}
    if "features_extractor_class" in kwargs:
        given = kwargs.pop("features_extractor_class")
        if isinstance(given, type):
            if not issubclass(given, nn.Module):
                raise TypeError(f"policy_kwargs features_extractor_class must be a torch.nn.Module subclass "
                                f"(e.g. a subclass of SB3's BaseFeaturesExtractor), got {given!r}")
            name = extractor_name(given)
        elif given is None or given == AUTO_EXTRACTOR:
            name = given
        elif isinstance(given, str):
            try:
                extractor_class(given)
            except LookupError as err:
                error = ClassNotLoadedError if isinstance(err, ClassNotLoadedError) else ValueError
                raise error(f"policy_kwargs features_extractor_class={given!r}: {err}; herl's own are "
                            f"{sorted(BUILTIN_EXTRACTORS)}") from None
            name = given
        else:
            raise TypeError(f"policy_kwargs features_extractor_class must be a class, a class name or None, got {given!r}")
        out["features_extractor"] = name
    if "features_extractor_kwargs" in kwargs:
        out["features_extractor_kwargs"] = _json_kwargs(kwargs, "features_extractor_kwargs")
    for name in ("share_features_extractor", "normalize_images"):
        if name in kwargs:
            out[name] = _plain(kwargs.pop(name), True)
    return out


def remember_classes(policy_kwargs: Mapping[str, Any]) -> None:
    """Name the classes ``policy_kwargs`` give (a features extractor's, an optimizer's), so that a model file naming
    them finds them in this process: ``load(path, policy_kwargs=dict(optimizer_class=TheClass))``."""
    from herl.training.optimizers import optimizer_name

    for key, name in (("features_extractor_class", extractor_name), ("optimizer_class", optimizer_name)):
        given = policy_kwargs.get(key)
        if isinstance(given, type):
            name(given)


def _optimizer_settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop SB3's ``optimizer_class`` (a class, remembered by name, or a name; None: herl's Adam) and
    ``optimizer_kwargs`` (JSON values; None: none) from ``kwargs``, as :class:`PolicyConfig` fields."""
    from herl.training.optimizers import optimizer_class, optimizer_name

    out: dict[str, Any] = {}
    if "optimizer_class" in kwargs:
        given = kwargs.pop("optimizer_class")
        if given is None or isinstance(given, str):
            if given is not None:
                try:
                    optimizer_class(given)
                except LookupError as err:
                    error = ClassNotLoadedError if isinstance(err, ClassNotLoadedError) else ValueError
                    raise error(f"policy_kwargs optimizer_class={given!r}: {err}") from None
            out["optimizer_class"] = given
        else:
            out["optimizer_class"] = optimizer_name(given)
    if "optimizer_kwargs" in kwargs:
        extra = _json_kwargs(kwargs, "optimizer_kwargs")
        for name, fix in (("lr", "learning_rate="), ("params", "nothing: the model passes its parameters")):
            if name in extra:
                raise ValueError(f"policy_kwargs optimizer_kwargs holds {name!r}: give {fix} instead")
        out["optimizer_kwargs"] = dict(extra)
    return out


def _json_kwargs(kwargs: dict[str, Any], key: str) -> dict[str, Any]:
    """Pop ``kwargs[key]``: keyword arguments a model file keeps, so JSON values (None: none)."""
    extra = kwargs.pop(key)
    extra = {} if extra is None else extra
    if not isinstance(extra, Mapping) or not all(isinstance(k, str) for k in extra) or not _is_json(extra):
        raise TypeError(f"policy_kwargs {key} must be a dict of JSON values (numbers, strings, lists, dicts): the "
                        f"model file keeps them; got {extra!r}")
    return dict(extra)


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False



_ARCH = "a list of positive layer sizes (e.g. [64, 64]; [] for no hidden layer), or dict(pi=[...], qf=[...])"


def _arch(value: Any, name: str) -> tuple[int, ...]:
    """Hidden layer sizes as a tuple of ints; a string (``"64"`` would become layers [6, 4]) or a size < 1 is refused."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError("policy_kwargs", name, value, _ARCH)
    sizes = tuple(_plain(x, 1) for x in value)
    if not all(POSITIVE_INT.accepts(x) for x in sizes):
        raise ConfigError("policy_kwargs", name, value, _ARCH)
    return sizes
