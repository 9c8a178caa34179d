"""A training run's configuration: frozen dataclasses, resolved from defaults, a preset, flags and ``--set key=value``.

Every setting has one dotted key, the same in a preset file and on the command line:

- ``timesteps``, ``n_envs``, ``vector_env``, ``env_processes``, ``device``, ``threads``, ``log_interval``, ``workers``, ``broadcast_every``: the run;
- any hyperparameter of the algorithm (``learning_rate``, ``batch_size``, ...; validated by the algorithm's config);
- ``env.NAME``: an argument of the env's constructor (``env.n_bits=15``);
- ``her.enabled`` (``auto``: on for goal envs), ``her.strategy``, ``her.n_sampled_goal``, ``her.desired_goal_share``,
  ``her.online_sampling``, ``her.copy_info_dict``;
- ``policy.net_arch``, ``policy.activation_fn``, ``policy.precision``, ``policy.layer_norm``, ``policy.n_critics``;
  TQC's ``policy.n_quantiles``; DQN's ``policy.dueling``; CrossQ's ``policy.batch_norm_momentum``,
  ``policy.batch_norm_eps``, ``policy.renorm_warmup_steps``; ``policy.features_extractor`` and its
  ``policy.features_extractor_kwargs``, ``policy.share_features_extractor``, ``policy.normalize_images``;
- ``noise.type`` (``auto``, ``none``, ``normal``, ``ornstein-uhlenbeck``), ``noise.sigma``: exploration noise;
- ``eval.freq``, ``eval.episodes``, ``eval.deterministic``, ``eval.on_workers``; ``checkpoint.freq``, ``checkpoint.keep``;
- ``demos.path`` (``--demos``), ``demos.batch_ratio``: demonstrations in the HER buffer (``bc_loss_weight`` weighs the
  behaviour-cloning loss on them);
- ``batched.updates_per_step``, ``batched.collect_steps``: how a run on a batched env (``herl/BatchedPointReach-v0``,
  :mod:`herl.batched`) collects and updates; ``n_envs`` is then the number of envs stepped as one batch of tensors.

Later layers win: defaults, then the preset's common settings, its section for the algorithm, the flags, ``--set``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from herl.run.errors import CLIError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ALGOS = ("dqn", "ddpg", "td3", "sac", "tqc", "crossq")
DEMO_ALGOS = ("ddpg", "td3", "sac", "tqc")
DEFAULT_BC_LOSS_WEIGHT = 1.0
"""``--demos``' bc_loss_weight: Nair et al. 2018's weights (0.0078 on the BC loss summed over 128 demo rows, 0.001 on
-Q summed over 1024 rows) are 1:1 on herl's means over demo rows and over the batch."""
NOISE_TYPES = ("auto", "none", "normal", "ornstein-uhlenbeck")


@dataclass(frozen=True)
class HerSettings:
    """Hindsight relabeling (the arguments of :class:`herl.HerReplayBuffer`)."""

    strategy: str = "future"
    """Goal selection strategy: future, final, episode or random."""
    n_sampled_goal: int = 4
    """k: relabeled goals per real transition (a fraction k/(k+1) of each batch is relabeled)."""
    desired_goal_share: float = 0.0
    """The share of relabeled transitions given the desired goal of another stored transition (ProtoGE's "actual"
    goals) instead of the strategy's; 0: none."""
    online_sampling: bool = True
    """Relabel at sampling time (False: store k relabeled copies when an episode ends)."""
    copy_info_dict: bool = False
    """Store the numeric info entries for compute_reward (for rewards that read info)."""


@dataclass(frozen=True)
class PolicySettings:
    """The networks' shape (SB3's ``policy_kwargs``)."""

    net_arch: tuple[int, ...] | Mapping[str, tuple[int, ...]] | None = None
    """Hidden layers of actor and critics, or of each: {pi = [...], qf = [...]} (a part left out keeps the algorithm's
    default); None: the algorithm's default."""
    activation_fn: str = "relu"
    """Activation between layers."""
    precision: str = "float32"
    """Dtype of the hidden-to-hidden matmuls: float32, or bfloat16 (mixed precision; weights stay float32)."""
    layer_norm: bool | str | None = None
    """Layer norm before each hidden activation: true (actor and critics), "critic" (critics only) or false; None: off."""
    n_critics: int | None = None
    """Critics in the ensemble; None: the algorithm's default (DDPG 1, TD3/SAC 2)."""
    n_quantiles: int | None = None
    """TQC: atoms per critic; None: 25."""
    dueling: bool | None = None
    """DQN: a dueling Q-network (value and advantage streams); None: off."""
    batch_norm_momentum: float | None = None
    """CrossQ: rate at which batch renormalization's running statistics move; None: 0.01."""
    batch_norm_eps: float | None = None
    """CrossQ: added to the variance before batch renormalization divides by its square root; None: 0.001."""
    renorm_warmup_steps: int | None = None
    """CrossQ: updates that normalize with batch statistics only, before the running ones take over; None: 100,000."""
    features_extractor: str | None = None
    """A features extractor before the networks, by name: NatureCNN (image observations), CombinedExtractor (Dict
    observations with images), FlattenExtractor; None: herl's choice (CombinedExtractor when a Dict entry the
    networks read is an image, else the flat inputs)."""
    features_extractor_kwargs: Mapping[str, Any] | None = None
    """The extractor's arguments, e.g. {features_dim = 256} for NatureCNN, {cnn_output_dim = 64} for CombinedExtractor."""
    share_features_extractor: bool | None = None
    """One extractor for the actor and the critics; None: one each."""
    normalize_images: bool | None = None
    """The extractor reads uint8 images scaled to [0, 1]; None: yes."""
    input_keys: tuple[str, ...] | None = None
    """The entries of a Dict observation the networks read, e.g. ["observation", "desired_goal"] (a goal policy fed
    the state and the goal, as OpenAI baselines did); None: all of them, as SB3's MultiInputPolicy."""

    def to_policy_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"activation_fn": self.activation_fn, "precision": self.precision}
        if isinstance(self.net_arch, Mapping):
            kwargs["net_arch"] = {part: list(sizes) for part, sizes in self.net_arch.items()}
        elif self.net_arch is not None:
            kwargs["net_arch"] = list(self.net_arch)
        for name in ("layer_norm", "n_critics", "n_quantiles", "dueling", "batch_norm_momentum", "batch_norm_eps",
                     "renorm_warmup_steps", "features_extractor_kwargs", "share_features_extractor", "normalize_images",
                     "input_keys"):
            if getattr(self, name) is not None:
                kwargs[name] = dict(getattr(self, name)) if name == "features_extractor_kwargs" else getattr(self, name)
        if self.features_extractor is not None:
            kwargs["features_extractor_class"] = self.features_extractor
        return kwargs


@dataclass(frozen=True)
class NoiseSettings:
    """Exploration noise added to deterministic actions (DDPG, TD3), in the policy's [-1, 1] scale."""

    type: str = "auto"
    """none, normal, ornstein-uhlenbeck, or auto: normal for DDPG and TD3 (deterministic policies explore only
    through it), none for DQN and SAC."""
    sigma: float = 0.1
    """Standard deviation, the same for every action dimension."""


@dataclass(frozen=True)
class EvalSettings:
    """Periodic evaluation on a separate env; logged as ``eval/success_rate``, ``eval/mean_reward``."""

    freq: int = 10_000
    """Env steps between evaluations (and one at step 0 and one at the end); 0: none."""
    episodes: int = 20
    """Episodes per evaluation."""
    deterministic: bool = True
    """Act with the deterministic policy."""
    on_workers: bool = False
    """With ``workers``: play the evaluation episodes on the Ray actors, split among them, instead of in the learner
    (the evaluations before the first step and after the last stay in the learner: the actors are not up then)."""


@dataclass(frozen=True)
class CheckpointSettings:
    """Periodic checkpoints (everything :func:`herl.run.checkpoint.write_checkpoint` saves)."""

    freq: int = 10_000
    """Env steps between checkpoints (and one at the end); 0: only at the end."""
    keep: int = 2
    """How many checkpoints to keep on disk."""


@dataclass(frozen=True)
class DemoSettings:
    """Demonstrations in the HER buffer's own store (``--demos``); the algorithm's ``bc_loss_weight`` weighs the
    behaviour-cloning loss on them."""

    path: str = ""
    """The dataset folder (``herl record``) or local Minari id; ``--demos`` records it as an absolute path, which
    ``--resume`` reads again."""
    batch_ratio: float = 0.125
    """Fraction of each batch drawn from the demonstrations (Nair et al. 2018: 128 of 1024)."""


@dataclass(frozen=True)
class BatchedLoopSettings:
    """How a run on a batched env collects and updates (:class:`herl.batched.trainer.BatchedTrainer`'s settings; the
    HER ones come from ``her.*``). Only batched env ids take them."""

    updates_per_step: float = 1 / 64
    """Gradient steps per env step, counting every env's steps (the update-to-data ratio): with 1,024 envs, 1/64 makes
    16 updates after each step of all envs."""
    collect_steps: int = 1
    """Steps of every env between two rounds of updates."""


DEFAULT_BATCHED_ENVS = 256
"""``n_envs`` of a run on a batched env whose settings name none."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines one training run (one seed); written to the run folder as ``config.json``."""

    algo: str
    """dqn, ddpg, td3, sac, tqc or crossq."""
    env: str
    """Gymnasium env id."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Arguments of the env's constructor."""
    seed: int = 0
    """Seeds the networks, exploration, replay sampling and the env."""
    timesteps: int = 100_000
    """Env steps to train for, over all envs."""
    n_envs: int = 1
    """Envs stepped together."""
    vector_env: str = "sync"
    """How ``n_envs > 1`` envs step: ``"sync"``, one after another in the training process, or ``"async"``, split over
    ``env_processes`` processes that step their shares at once (:class:`~herl.envs.sharded.ShardedVectorEnv`)."""
    env_processes: int = 0
    """With ``vector_env="async"``: the processes the envs are split over (0: one per core of the machine; never more
    than one per env). The run is the same, bit for bit, whatever the number."""
    device: str = "auto"
    """Torch device (auto: CUDA when available)."""
    threads: int = 1
    """Torch CPU threads. One is fastest for herl's small networks, and robust on a busy machine (measured on 2
    cores under load: a DQN update took 6 ms with 1 thread, 170 ms with 2); a resumed run uses the same number, as
    float sums may differ with another."""
    log_interval: int = 10
    """Episodes between two rows of rollout statistics in progress.csv."""
    workers: int = 0
    """Ray actors that collect episodes for the learner (herl[ray]; docs/scaling.md); 0: the envs are stepped in the
    training process, and Ray is not imported."""
    broadcast_every: int = 50
    """With workers: updates between two broadcasts of the acting weights to them."""
    her: HerSettings | None = HerSettings()
    """Hindsight relabeling, or None for plain replay."""
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    """Arguments of the algorithm's config (learning_rate, batch_size, ...)."""
    policy: PolicySettings = PolicySettings()
    """Network shape."""
    noise: NoiseSettings = NoiseSettings()
    """Exploration noise."""
    eval: EvalSettings = EvalSettings()
    """Periodic evaluation."""
    checkpoint: CheckpointSettings = CheckpointSettings()
    """Periodic checkpoints."""
    demos: DemoSettings | None = None
    """Demonstrations to learn from, or None."""
    batched: BatchedLoopSettings | None = None
    """How a run on a batched env collects and updates; None for every other env."""
    preset: str | None = None
    """The preset the settings came from, if any."""
    notes: tuple[str, ...] = ()
    """What herl chose that the settings did not say (e.g. the buffer_size), repeated in the run's summary."""

    def to_json(self) -> dict[str, Any]:
        return _jsonable(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "the run's config.json") -> TrainConfig:
        data = dict(data)
        her = data.pop("her", None)
        if isinstance(her, Mapping):  # a run started before some HER options were removed
            from herl.buffers.her import drop_removed_options

            her = {key[len("her."):]: value for key, value in drop_removed_options(
                {f"her.{key}": value for key, value in her.items()}, source, prefix="her.").items()}
        demos = data.pop("demos", None)
        batched = data.pop("batched", None)
        policy = dict(data.pop("policy", {}))
        if isinstance(policy.get("net_arch"), Mapping):
            policy["net_arch"] = {part: tuple(sizes) for part, sizes in policy["net_arch"].items()}
        elif policy.get("net_arch") is not None:
            policy["net_arch"] = tuple(policy["net_arch"])
        return cls(
            her=None if her is None else HerSettings(**her),
            demos=None if demos is None else DemoSettings(**demos),
            batched=None if batched is None else BatchedLoopSettings(**batched),
            policy=PolicySettings(**policy),
            noise=NoiseSettings(**data.pop("noise", {})),
            eval=EvalSettings(**data.pop("eval", {})),
            checkpoint=CheckpointSettings(**data.pop("checkpoint", {})),
            notes=tuple(data.pop("notes", ())),
            **data,
        )


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------------------------------
# Dotted keys

RUN_KEYS = {"timesteps": int, "n_envs": int, "vector_env": str, "env_processes": int, "device": str, "threads": int,
            "log_interval": int, "workers": int, "broadcast_every": int}
SECTIONS: dict[str, type] = {
    "her": HerSettings, "policy": PolicySettings, "noise": NoiseSettings, "eval": EvalSettings,
    "checkpoint": CheckpointSettings, "demos": DemoSettings, "batched": BatchedLoopSettings,
}


def hyperparameter_names(algo: str) -> list[str]:
    return sorted(f.name for f in dataclasses.fields(algorithm_class(algo).config_class))


def algorithm_class(algo: str) -> type:
    from herl.algorithms import ALGORITHMS

    if algo not in ALGOS:
        raise CLIError(f"unknown algorithm {algo!r}: use one of {', '.join(ALGOS)}")
    return {name.lower(): cls for name, cls in ALGORITHMS.items()}[algo]


def valid_keys(algo: str) -> list[str]:
    """Every key ``--set`` accepts for ``algo`` (``env.NAME`` stands for the env's arguments)."""
    keys = [*RUN_KEYS, "env.NAME", "her.enabled"]
    own = algorithm_class(algo).policy_options  # the policy options of one algorithm (TQC's atoms) are its alone
    keys += [f"{section}.{f.name}" for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)
             if not (section == "policy" and f.name in ALGORITHM_POLICY_OPTIONS and f.name not in own)]
    return keys + hyperparameter_names(algo)


def _algorithm_policy_options() -> set[str]:
    """The ``policy.*`` keys that one algorithm reads (TQC's, DQN's, CrossQ's ``policy_options``): ``--set`` takes
    each for its algorithm only."""
    from herl.algorithms import ALGORITHMS

    fields = {f.name for f in dataclasses.fields(PolicySettings)}
    return {name for cls in ALGORITHMS.values() for name in cls.policy_options} & fields


ALGORITHM_POLICY_OPTIONS = _algorithm_policy_options()


def parse_assignment(text: str) -> tuple[str, Any]:
    """``key=value`` to ``(key, value)``; the value is read as a TOML value (``1e-3``, ``true``, ``[64, 64]``,
    ``"text"``), falling back to the plain text (so ``her.strategy=final`` needs no quotes)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise CLIError(f"--set takes key=value (e.g. --set learning_rate=1e-3), got {text!r}")
    return key, parse_value(raw.strip())


def parse_value(raw: str) -> Any:
    try:
        try:
            return tomllib.loads(f"value = {raw}")["value"]
        except tomllib.TOMLDecodeError:
            pass
        lowered = raw.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered in ("none", "null"):
            return None
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    except ValueError as err:  # Python's limit on a whole number's digits, whose message says to raise it
        if "integer string conversion" not in str(err):
            raise
        raise CLIError(f"{raw[:12]}... ({len(raw):,} characters) holds a whole number of more than "
                       f"{sys.get_int_max_str_digits():,} digits; no setting takes one that large") from None


def check_key(key: str, algo: str, source: str) -> None:
    """Raise a CLIError listing the valid keys if ``key`` is not one."""
    section, dot, name = key.partition(".")
    if dot and section == "env" and name:
        return
    keys = valid_keys(algo)
    if key in keys:
        return
    if section == "policy" and name in ALGORITHM_POLICY_OPTIONS:
        from herl.algorithms import ALGORITHMS

        readers = [cls.__name__ for cls in ALGORITHMS.values() if name in cls.policy_options]
        raise CLIError(f"{key} in {source} is read by {' and '.join(readers)} only, not {algo}: leave it out, or "
                       f"train with --algo {' or --algo '.join(r.lower() for r in readers)}")
    close = difflib.get_close_matches(key, keys, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    raise CLIError(f"unknown key {key!r} in {source}{hint}; valid keys for {algo}: {', '.join(keys)}")


def build_config(*, algo: str, env: str, seed: int, layers: list[tuple[str, Mapping[str, Any]]], goal_env: bool,
                 preset: str | None) -> TrainConfig:
    """The config from layers of dotted settings ``(source, {key: value})``, later layers winning.

    ``goal_env`` resolves ``her.enabled = "auto"``.
    """
    flat: dict[str, Any] = {}
    sources: dict[str, str] = {}
    notes: list[str] = []
    for source, settings in layers:
        for key, value in settings.items():
            check_key(key, algo, source)
            if key == "demos.path" and sources.get(key, "").startswith("preset") and value != flat[key]:
                notes.append(_replaced_demos_note(value, source, flat[key], sources[key]))
            flat[key] = value
            sources[key] = source
    sections: dict[str, dict[str, Any]] = {name: {} for name in [*SECTIONS, "env"]}
    run: dict[str, Any] = {}
    hyperparameters: dict[str, Any] = {}
    defaults = dataclasses.asdict(algorithm_class(algo).config_class())
    for key, value in flat.items():
        section, dot, name = key.partition(".")
        if dot:
            sections[section][name] = value
        elif key in RUN_KEYS:
            run[key] = _coerce(value, RUN_KEYS[key](), key)
        else:
            hyperparameters[key] = _coerce(value, defaults[key], key)
    her_enabled = sections["her"].pop("enabled", "auto")
    if her_enabled not in ("auto", True, False):
        raise CLIError(f"her.enabled must be auto, true or false, got {her_enabled!r}")
    her_on = goal_env if her_enabled == "auto" else bool(her_enabled)
    settings = {name: _section(cls, sections[name], name) for name, cls in SECTIONS.items()}
    if settings["noise"].type not in NOISE_TYPES:
        raise CLIError(f"noise.type must be one of {', '.join(NOISE_TYPES)}, got {settings['noise'].type!r}")
    if settings["noise"].type == "auto":
        noise_type = "normal" if algo in ("ddpg", "td3") else "none"
        settings["noise"] = dataclasses.replace(settings["noise"], type=noise_type)
    _check_algorithm_settings(algo, hyperparameters, settings["policy"])
    notes += _unused_settings_notes(flat, sources, algo=algo, her_on=her_on, noise_type=settings["noise"].type)
    batched = None
    if _is_batched_env(env):
        batched = settings["batched"]
        if "n_envs" not in run:
            run["n_envs"] = DEFAULT_BATCHED_ENVS
            notes.append(f"n_envs={DEFAULT_BATCHED_ENVS} batched envs, chosen by herl: set --n-envs N to choose")
    else:  # a preset's batched table is for its batched envs (as its [algos.X] tables for X): others leave it out
        given = sorted(key for key in flat if key.startswith("batched.") and not sources[key].startswith("preset"))
        if given:
            raise CLIError(_batched_only_message(env, given))
    demos = settings["demos"] if sections["demos"] else None
    if demos is not None and not demos.path:
        raise CLIError("demos.batch_ratio is set but no demonstrations are: give them with --demos DIR")
    if demos is not None and algo not in DEMO_ALGOS:
        raise CLIError(f"demonstrations train an actor with a behaviour-cloning loss: use --algo "
                       f"{', '.join(DEMO_ALGOS)} (not {algo})")
    if demos is not None and not her_on:
        if sources["demos.path"].startswith("preset"):
            raise CLIError(f"{sources['demos.path'].partition(' [')[0]} learns from demonstrations "
                           f"(demos.path={demos.path}), which live in the HER buffer's own store: it needs HER "
                           "(leave out --no-her, or choose a preset without demonstrations)")
        raise CLIError("demonstrations live in the HER buffer's own store: --demos needs HER (leave out --no-her)")
    config = TrainConfig(
        algo=algo, env=env, env_kwargs=sections["env"], seed=seed, preset=preset, hyperparameters=hyperparameters,
        her=settings["her"] if her_on else None, policy=settings["policy"], noise=settings["noise"],
        eval=settings["eval"], checkpoint=settings["checkpoint"], demos=demos, batched=batched, notes=tuple(notes),
        **run,
    )
    validate_config(config)
    return config


def _unused_settings_notes(flat: Mapping[str, Any], sources: Mapping[str, str], *, algo: str, her_on: bool,
                           noise_type: str) -> list[str]:
    """Notes for settings the user gave (not a preset's, whose tables cover every algorithm) that this run never
    reads: HER's with HER off, the noise's with no noise. Accepted, as a preset's are, but said."""
    given = sorted(key for key in flat if not sources[key].startswith("preset"))
    notes = []
    her_keys = [key for key in given if key.startswith("her.") and key != "her.enabled"]
    if her_keys and not her_on:
        notes.append(f"{', '.join(her_keys)} set, but this run trains without HER: "
                     f"{'they have' if len(her_keys) > 1 else 'it has'} no effect")
    noise_keys = [key for key in given if key.startswith("noise.") and key != "noise.type"]
    if noise_keys and noise_type == "none":
        notes.append(f"{', '.join(noise_keys)} set, but {algo} explores without added noise here (noise.type=none): "
                     f"no effect" + ("" if algo == "dqn" else "; set noise.type=normal to add it"))
    return notes


def _is_batched_env(env_id: str) -> bool:
    from herl.batched.registry import is_batched_env

    return is_batched_env(env_id)


def _batched_only_message(env_id: str, keys: list[str]) -> str:
    from herl.batched.registry import BATCHED_ENVS

    return (f"{', '.join(keys)}: the batched.* settings are for batched envs ({', '.join(BATCHED_ENVS)}), and "
            f"{env_id} is not one: drop them, or train a batched env")


def _check_batched(config: TrainConfig) -> None:
    """Refuse the settings that mean nothing on a batched env, saying what to do instead: its envs are stepped as
    one batch of tensors in the training process, and its HER buffer (:class:`herl.batched.buffer.BatchedHerBuffer`)
    relabels at sampling time with goals of the same episode, from goals alone."""
    if config.batched is None:
        raise CLIError(f"{config.env} is a batched env, but the settings have no batched table: start the run with "
                       "`herl train`, which fills it in")
    refusals = []
    if config.workers:
        refusals.append(f"workers={config.workers}: a batched env steps all its envs as one batch in the training "
                        "process, so there is nothing for Ray workers to collect; leave workers at 0 and raise "
                        "--n-envs instead")
    if config.demos is not None:
        refusals.append(f"demos.path={config.demos.path}: the batched HER buffer has no store for demonstrations; "
                        "drop --demos, or learn from them on the envs stepped one at a time (herl/PointReach-v0)")
    if config.noise.type == "ornstein-uhlenbeck":
        refusals.append("noise.type=ornstein-uhlenbeck: its noise keeps a state per env, which batched runs do not "
                        "keep; use noise.type=normal")
    her = config.her
    if her is not None:
        if her.strategy == "random":
            refusals.append("her.strategy=random: the batched HER buffer relabels with goals of the same episode; "
                            "use future, final or episode")
        if her.online_sampling is False:
            refusals.append("her.online_sampling=false: the batched HER buffer relabels when it samples, never when "
                            "it stores; leave her.online_sampling true")
        if her.desired_goal_share:
            refusals.append(f"her.desired_goal_share={her.desired_goal_share}: the batched HER buffer relabels with "
                            "achieved goals only; set it to 0")
        if her.copy_info_dict:
            refusals.append("her.copy_info_dict=true: batched envs compute their rewards from the goals alone, "
                            "without info dicts; leave it false")
    if refusals:
        raise CLIError(f"{config.env} is a batched env, where these settings do not apply:\n  " + "\n  ".join(refusals))


def _replaced_demos_note(path: Any, source: str, preset_path: Any, preset_source: str) -> str:
    """What a run says when the command line's demonstrations replace a preset's (a ``*_demos`` preset's scripted
    expert): the command line wins, as everywhere, and a preset's recipe measured with other demonstrations is
    worth a word."""
    flag = "--demos" if source == "the command-line flags" else "--set demos.path"

    def described(value: Any) -> str:
        if isinstance(value, str) and value.partition(":")[0] == "scripted":
            count = value.partition(":")[2] or "100"
            return f"{count} episodes of herl's scripted expert, recorded in the run"
        return str(value)

    return (f"demonstrations: {described(path)}, from {flag}, not those of {preset_source.partition(' [')[0]} "
            f"({described(preset_path)}): the command line wins over a preset")


def _section(cls: type, values: dict[str, Any], name: str) -> Any:
    defaults = cls()
    coerced = {k: _coerce(v, getattr(defaults, k), f"{name}.{k}") for k, v in values.items()}
    if coerced.get("net_arch") is not None:
        from herl.training.config import _arch

        arch = coerced["net_arch"]
        try:
            if isinstance(arch, Mapping):
                unknown = sorted(set(arch) - {"pi", "qf"})
                if unknown:
                    raise CLIError(f"{name}.net_arch has parts {unknown}: a table of net_arch takes pi (the actor's "
                                   "hidden layers) and qf (each critic's), e.g. {pi = [256, 256], qf = [512, 512]}")
                coerced["net_arch"] = {part: _arch(sizes, f"{name}.net_arch.{part}") for part, sizes in arch.items()}
            else:
                coerced["net_arch"] = _arch(arch, f"{name}.net_arch")
        except ValueError as err:
            raise CLIError(str(err)) from None
    return cls(**coerced)


def _check_algorithm_settings(algo: str, hyperparameters: Mapping[str, Any], policy: PolicySettings) -> None:
    """Validate the hyperparameters and the network settings now, by the algorithm's own configs (the path the
    Python API and model files take), so that a bad value stops the command before any env is built."""
    from herl.training.config import PolicyConfig

    cls = algorithm_class(algo)
    try:
        cls.config_class.from_kwargs(hyperparameters)
        cls.check_policy_config(PolicyConfig.from_kwargs(policy.to_policy_kwargs(), cls.default_net_arch,
                                                         cls.default_n_critics, cls.policy_options))
    except (ValueError, TypeError) as err:
        raise CLIError(str(err)) from None


def _coerce(value: Any, default: Any, key: str) -> Any:
    """Make a value read from text or TOML the type of the setting's default where that is unambiguous."""
    if isinstance(default, bool):
        if isinstance(value, list):  # clip_target = [low, high]
            return tuple(value)
        if not isinstance(value, bool):
            raise CLIError(f"{key} must be true or false, got {value!r}")
        return value
    if isinstance(default, int) and isinstance(value, float) and value.is_integer():
        return int(value)  # 1e6 steps
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(default, tuple) and isinstance(value, list):
        return tuple(value)
    if isinstance(default, (int, float)) and not isinstance(value, (int, float)):
        raise CLIError(f"{key} must be a number, got {value!r}")
    return value


def validate_config(config: TrainConfig) -> None:
    """Raise a CLIError naming the first setting of ``config`` that is not allowed (also for a config.json read back)."""
    from herl.buffers.strategies import KEY_TO_GOAL_STRATEGY

    if not isinstance(config.algo, str) or not isinstance(config.env, str) or not isinstance(config.env_kwargs, Mapping) \
            or not isinstance(config.hyperparameters, Mapping) or type(config.seed) is not int:
        raise CLIError("algo and env must be names, env_kwargs and hyperparameters mappings, seed a whole number")
    _check_algorithm_settings(config.algo, config.hyperparameters, config.policy)

    from herl.errors import BOOL, NON_NEGATIVE_INT, POSITIVE_INT, ConfigError, check, number, one_of

    rules = [("timesteps", config.timesteps, POSITIVE_INT), ("n_envs", config.n_envs, POSITIVE_INT),
             ("vector_env", config.vector_env, one_of("sync", "async")),
             ("env_processes", config.env_processes, NON_NEGATIVE_INT),
             ("threads", config.threads, POSITIVE_INT), ("log_interval", config.log_interval, POSITIVE_INT),
             ("workers", config.workers, NON_NEGATIVE_INT), ("broadcast_every", config.broadcast_every, POSITIVE_INT),
             ("noise.type", config.noise.type, one_of(*NOISE_TYPES[1:])), ("noise.sigma", config.noise.sigma, number(0.0)),
             ("eval.freq", config.eval.freq, NON_NEGATIVE_INT), ("eval.episodes", config.eval.episodes, POSITIVE_INT),
             ("eval.deterministic", config.eval.deterministic, BOOL), ("eval.on_workers", config.eval.on_workers, BOOL),
             ("checkpoint.freq", config.checkpoint.freq, NON_NEGATIVE_INT),
             ("checkpoint.keep", config.checkpoint.keep, POSITIVE_INT)]
    if config.her is not None:
        from herl.buffers.her import DESIRED_GOAL_SHARE

        rules += [("her.strategy", config.her.strategy, one_of(*KEY_TO_GOAL_STRATEGY)),
                  ("her.n_sampled_goal", config.her.n_sampled_goal, NON_NEGATIVE_INT),
                  ("her.desired_goal_share", config.her.desired_goal_share, DESIRED_GOAL_SHARE),
                  ("her.online_sampling", config.her.online_sampling, BOOL),
                  ("her.copy_info_dict", config.her.copy_info_dict, BOOL)]
    if config.batched is not None:
        rules += [("batched.updates_per_step", config.batched.updates_per_step, number(0.0)),
                  ("batched.collect_steps", config.batched.collect_steps, POSITIVE_INT)]
    if config.demos is not None:
        from herl.buffers.her import DEMO_BATCH_RATIO

        if not isinstance(config.demos.path, str) or not config.demos.path:
            raise CLIError(f"demos.path must name a dataset folder, got {config.demos.path!r}")
        rules.append(("demos.batch_ratio", config.demos.batch_ratio, DEMO_BATCH_RATIO))
    try:
        for name, value, rule in rules:
            check("", name, value, rule)
        if _is_batched_env(config.env):
            _check_batched(config)
        elif config.batched is not None:
            raise CLIError(_batched_only_message(config.env, ["batched"]))
        if config.env_processes and config.vector_env != "async":
            raise CLIError(f"env_processes={config.env_processes} splits the envs over processes only with "
                           f"vector_env=async: add --set vector_env=async, or leave env_processes at 0")
        if config.vector_env == "async" and (config.workers or _is_batched_env(config.env)):
            raise CLIError("vector_env=async steps the n_envs envs in processes of the training machine; "
                           + ("workers already step their envs in processes of their own: leave vector_env at sync"
                              if config.workers else "a batched env steps its envs as one batch of tensors: leave "
                              "vector_env at sync"))
        if config.workers and config.n_envs != 1:
            raise CLIError(f"with workers, each worker steps one env: use n_envs=1 (got {config.n_envs}) and more "
                           "workers")
        if config.eval.on_workers and not config.workers:
            raise CLIError("eval.on_workers plays the evaluations on the Ray actors of --workers N: give workers >= 1, "
                           "or leave eval.on_workers off to evaluate in the training process")
        if not isinstance(config.device, str):
            raise CLIError(f"device must be a torch device name such as auto, cpu or cuda, got {config.device!r}")
    except ConfigError as err:
        raise CLIError(str(err)) from None


def parse_her(text: str) -> dict[str, Any]:
    """``--her STRATEGY[:K]`` to dotted settings."""
    from herl.buffers.strategies import KEY_TO_GOAL_STRATEGY

    strategy, _, k = text.partition(":")
    strategy = strategy.strip().lower()
    if strategy not in KEY_TO_GOAL_STRATEGY:
        raise CLIError(f"--her takes STRATEGY:K with STRATEGY one of {', '.join(KEY_TO_GOAL_STRATEGY)} (e.g. future:4), "
                       f"got {text!r}")
    settings: dict[str, Any] = {"her.enabled": True, "her.strategy": strategy}
    if k:
        if not k.isdigit():
            raise CLIError(f"--her takes STRATEGY:K with K a whole number of relabeled goals (e.g. future:4), got {text!r}")
        settings["her.n_sampled_goal"] = int(k)
    return settings
