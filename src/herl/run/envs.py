"""Environments for the command line: env ids that say what is wrong, and envs whose state a checkpoint can restore.

An env id is checked before anything is built: ids from an optional package (gymnasium-robotics, panda-gym) import
that package, or name the extra that installs it; unknown ids get close matches. Training envs are wrapped in
:class:`ReplayableEnv`, which remembers how the running episode came about (the env's random generator at its reset
and the actions since), so a fresh process can bring a fresh env to the same state by replaying them: the only way
to restore an arbitrary gymnasium env (MuJoCo's or pybullet's state is not a gymnasium concept) that needs nothing
of the env beyond being deterministic given its seed.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import importlib
import importlib.util
import inspect
import io
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from herl.envs.shared_models import make_envs_sharing_models
from herl.envs.sharded import ShardedVectorEnv
from herl.run.errors import CLIError, MissingExtraError
from herl.training.envs import is_goal_space


@dataclass(frozen=True)
class Provider:
    """An optional package that registers env ids when imported."""

    module: str
    """Module to import."""
    package: str
    """Its name on PyPI."""
    extra: str
    """The herl extra that installs it."""
    prefixes: tuple[str, ...]
    """Env ids it registers start with one of these."""


PROVIDERS = (
    Provider("gymnasium_robotics", "gymnasium-robotics", "robotics",
             ("Fetch", "HandReach", "HandManipulate", "AdroitHand", "PointMaze", "AntMaze", "FrankaKitchen")),
    Provider("panda_gym", "panda-gym", "panda", ("Panda",)),
)


# Env ids registered by packages herl does not know otherwise, to suggest the module:Id form for them.
THIRD_PARTY = tuple((prefix.lower(), module) for module, prefixes in {
    "highway_env": ("highway-", "highway-fast-", "merge-", "roundabout-", "parking-", "intersection-", "racetrack-",
                    "u-turn-", "two-way-", "exit-", "lane-keeping-"),
    "minigrid": ("MiniGrid-", "BabyAI-"),
    "ale_py": ("ALE/",),
    "gymnasium_robotics": ("Maze", "AntMaze", "PointMaze"),
}.items() for prefix in prefixes)


def _provider_for(env_id: str) -> Provider | None:
    return next((p for p in PROVIDERS if env_id.startswith(p.prefixes)), None)


def load_provider(provider: Provider, env_id: str | None = None) -> None:
    """Import ``provider`` so that its env ids are registered; MissingExtraError (naming ``env_id``) when it is not
    installed."""
    try:
        # gymnasium-robotics prints a notice about AdroitHand v1 rewards on import, whatever env is used:
        # keep it out of the CLI's output.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            module = importlib.import_module(provider.module)
    except ImportError as err:
        if err.name is not None and err.name != provider.module and not provider.module.startswith(err.name):
            raise  # the package is there but broken: show the real error
        what = env_id or f"the {'/'.join(provider.prefixes)} envs"
        raise MissingExtraError(what, provider.package, provider.extra) from err
    if provider.module == "gymnasium_robotics":
        gym.register_envs(module)


def resolve_env_id(env_id: str) -> str:
    """Check that ``env_id`` is registered with gymnasium, importing the optional package that provides it.

    ``module:EnvId`` (gymnasium's syntax) first imports ``module``, which registers ``EnvId``: the way to train an env
    of one's own from the command line. The id is returned as given, so ``gym.make`` imports the module again in
    each process that makes the env.
    """
    module, colon, bare_id = env_id.rpartition(":")
    if colon:
        _import_env_module(module, env_id)
        if bare_id not in gym.envs.registry:
            _refuse_unregistered(module, bare_id)
        resolve_env_id(bare_id)
        return env_id
    if env_id in gym.envs.registry:
        return env_id
    provider = _provider_for(env_id)
    if provider is not None:
        load_provider(provider, env_id)
        if env_id in gym.envs.registry:
            return env_id
    for other in PROVIDERS:  # so that close matches include their ids
        with contextlib.suppress(MissingExtraError):
            load_provider(other)
    known = list(gym.envs.registry)
    by_lower = {k.lower(): k for k in known}
    matches = [by_lower[m] for m in difflib.get_close_matches(env_id.lower(), list(by_lower), n=5, cutoff=0.75)]
    module = next((m for prefix, m in THIRD_PARTY if env_id.lower().startswith(prefix)), None)
    if module is not None:  # check-env parking-v0 suggested CarRacing-v3
        matches = [f"{module}:{env_id}"]
    hint = f"; did you mean {', '.join(matches)}?" if matches else ""
    hint += ("\n  (an env that a package registers when imported is named module:Id, e.g. highway_env:parking-v0: "
             "herl imports the module first)")
    missing = [p for p in PROVIDERS if not _importable(p.module)]
    extras = "".join(f"\n  ({'/'.join(p.prefixes)} envs need pip install 'herl[{p.extra}]')" for p in missing)
    raise CLIError(f"unknown env id {env_id!r}{hint}\n  (`herl list` shows the envs with a preset){extras}")


_MODULE_IDS: dict[str, list[str]] = {}
"""The env ids that importing each module of a ``module:EnvId`` registered, where herl imported it first."""


def _import_env_module(module: str, env_id: str) -> None:
    """Import the ``module`` of ``env_id`` (``module:EnvId``), noting the env ids it registers; a CLIError saying
    whether the module is not found, a package it imports is missing, or its own code failed."""
    before = None if module in sys.modules else set(gym.envs.registry)
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is None or err.name == module or module.startswith(f"{err.name}."):
            raise CLIError(f"cannot import {module!r} for the env id {env_id!r} ({err}): is it on PYTHONPATH?") from err
        raise CLIError(f"{module!r} (for the env id {env_id!r}) was found, but it imports {err.name!r}, which is not "
                       f"installed: pip install the package that provides it") from err
    except Exception as err:  # the module's own code: a SyntaxError, or any error raised while it runs
        raise CLIError(f"importing {module!r} for the env id {env_id!r} raised {raised(err)}: the module's own code "
                       f"failed (python -c 'import {module}' shows the traceback)") from err
    if before is not None:
        _MODULE_IDS[module] = [name for name in gym.envs.registry if name not in before]


def _registered_by(module: str) -> list[str]:
    """The env ids ``module`` registers: those its import added, and those whose entry point is in it."""
    ids = list(_MODULE_IDS.get(module, []))
    for name, spec in gym.envs.registry.items():
        entry = spec.entry_point
        where = entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", None)
        if where is not None and (where == module or where.startswith(f"{module}.")) and name not in ids:
            ids.append(name)
    return ids


def _refuse_unregistered(module: str, name: str) -> None:
    """``module:Name`` where ``module`` registers no id ``Name``: a CLIError naming the ids it does register, as
    ``module:Id`` to paste (those of its class ``Name``, where ``Name`` is an env class; how to register it where
    the module registers none). Returns where the module registers nothing and ``Name`` is no env class of it (then
    ``Name`` is looked up as a plain id)."""
    ids = _registered_by(module)
    obj = getattr(sys.modules.get(module), name, None)
    if isinstance(obj, type) and issubclass(obj, gym.Env):
        own = [i for i in ids if gym.envs.registry[i].entry_point in (obj, f"{module}:{name}")]
        if own:
            raise CLIError(f"{module!r} defines the env class {name} and registers it as {', '.join(own)}: "
                           f"`--env module:EnvId` names a registered id, not a class: use "
                           f"--env {' or --env '.join(f'{module}:{i}' for i in own)}")
        raise CLIError(
            f"{module!r} defines the env class {name} but registers no env id {name!r}: `--env module:EnvId` names "
            f"an id that the module registers when imported\n  (add to {module}: gymnasium.register({name!r}, "
            f"entry_point={name}, max_episode_steps=N), then use --env {module}:{name})"
            + (f"\n  (the ids it registers: {', '.join(f'{module}:{i}' for i in ids)})" if ids else ""))
    if ids and _provider_for(name) is None:  # a provider's id is looked up as a plain one: its package is imported
        by_lower = {i.lower(): i for i in ids}
        close = [by_lower[m] for m in difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)]
        named = close or ids
        raise CLIError(f"unknown env id {name!r}: {module!r} registers no such id; "
                       f"{'did you mean' if close else 'it registers'} {', '.join(f'{module}:{i}' for i in named)}"
                       f"{'?' if close else ''}")


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


ENDLESS_EPISODE_STEPS = 100_000
"""How many steps one evaluation episode may run, in an env that gymnasium sets no time limit for, before the
evaluation stops with an error: an episode that never ends would hold ``herl train`` or ``herl eval`` forever."""

TIME_LIMIT_FIX = "give it a time limit: register it with max_episode_steps=N, or --set env.max_episode_steps=N"


def _has_time_limit(env: gym.Env) -> bool:
    return env.spec is not None and env.spec.max_episode_steps is not None


def _endless(what: str, env_id: str) -> CLIError:
    return CLIError(f"{what} of {env_id} ran {ENDLESS_EPISODE_STEPS:,} steps without ending, and gymnasium sets the "
                    f"env no time limit: {TIME_LIMIT_FIX}")


def endless_episode_guard(env: gym.Env, env_id: str) -> Callable[[dict[str, Any], dict[str, Any]], None] | None:
    """For an env without a registered time limit, a callback for :func:`herl.training.evaluation.evaluate_policy`
    that raises a ``CLIError`` once an episode has run :data:`ENDLESS_EPISODE_STEPS` steps; None for an env with one."""
    if _has_time_limit(env):
        return None

    def guard(locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
        if int(np.max(locals_["current_lengths"])) >= ENDLESS_EPISODE_STEPS:
            raise _endless("an evaluation episode", env_id)
    return guard


class _EndlessEpisodeStop(gym.Wrapper):
    """Stops with a ``CLIError`` once one episode has run :data:`ENDLESS_EPISODE_STEPS` steps."""

    def __init__(self, env: gym.Env, env_id: str, what: str) -> None:
        super().__init__(env)
        self._env_id, self._what, self._steps = env_id, what, 0

    @property
    def spec(self) -> Any:  # the env's own: a dataset stores it, and this stop is no part of the env
        return self.env.spec

    def reset(self, **kwargs: Any) -> Any:
        self._steps = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        if self._steps >= ENDLESS_EPISODE_STEPS:
            raise _endless(self._what, self._env_id)
        self._steps += 1
        return self.env.step(action)


def stop_endless_episodes(env: gym.Env, env_id: str, what: str) -> gym.Env:
    """``env`` for a command that plays whole episodes (``herl record``): for an env without a registered time limit,
    wrapped to stop with :data:`TIME_LIMIT_FIX` once an episode (``what``: "a recorded episode") has run
    :data:`ENDLESS_EPISODE_STEPS` steps; an env with one as it is."""
    return env if _has_time_limit(env) else _EndlessEpisodeStop(env, env_id, what)


ACTION_REPEAT = "action_repeat"
"""``env.action_repeat=k``: not an argument of the env (unless its constructor takes one) but herl's
:class:`~herl.envs.ActionRepeat` around it, in every env a run makes (training, evaluation, ``herl eval``, workers)."""


def action_repeat(env_kwargs: Mapping[str, Any]) -> int:
    """The env steps each counted step of a run with ``env_kwargs`` holds: its ``action_repeat`` (1 without, or for
    a value that is not a repeat, which :func:`make_env` refuses). The last decision of an episode may hold fewer,
    so steps times this is an upper bound (17 decisions make Fetch's 50 steps)."""
    repeat = env_kwargs.get(ACTION_REPEAT, 1)
    return repeat if isinstance(repeat, int) and not isinstance(repeat, bool) and repeat >= 1 else 1


TIME_FEATURE = "time_feature"
"""``env.time_feature=true``: not an argument of the env (unless its constructor takes one) but herl's
:class:`~herl.envs.TimeFeature` around it (inside any action repeat), in every env a run makes."""


GRASPED_START = "grasped_start"
"""``env.grasped_start=p``: not an argument of the env but herl's :class:`~herl.envs.GraspedStart` around a
*training* env (a share ``p`` of its episodes start with the object in the gripper); evaluation envs never have it."""

CONTACT_START = "contact_start"
"""``env.contact_start=p``: herl's :class:`~herl.envs.ContactStart` around a *training* env (a share ``p`` of its
episodes start with the object beside the gripper); evaluation envs never have it, as for :data:`GRASPED_START`."""

START_AIDS = {GRASPED_START: "with the object in the gripper", CONTACT_START: "with the object beside the gripper"}
"""The training-only start distributions: the ``env.NAME`` entry and how its episodes start."""


def make_env(env_id: str, env_kwargs: dict[str, Any] | None = None, *, render_mode: str | None = None,
             training: bool = False) -> gym.Env:
    """``gym.make(env_id, **env_kwargs)``, with an error naming the accepted arguments when one is wrong; an
    ``action_repeat`` entry wraps the env in :class:`~herl.envs.ActionRepeat` instead (see :data:`ACTION_REPEAT`),
    a ``time_feature`` entry in :class:`~herl.envs.TimeFeature` (see :data:`TIME_FEATURE`). A ``grasped_start`` or
    ``contact_start`` entry wraps it in :class:`~herl.envs.GraspedStart` or :class:`~herl.envs.ContactStart` when
    ``training`` (see :data:`START_AIDS`), and is checked and left out otherwise."""
    env_id = resolve_env_id(env_id)
    kwargs = dict(env_kwargs or {})
    limit = kwargs.get("max_episode_steps")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise CLIError(f"env.max_episode_steps is the time limit of an episode, a whole number >= 1 of env steps; got "
                       f"{limit!r} (leave it out for the env's own)")
    repeat, time_feature, starts = 1, False, {}
    own = constructor_arguments(env_id) if {ACTION_REPEAT, TIME_FEATURE, *START_AIDS} & set(kwargs) else []
    for key, what in START_AIDS.items():
        if key in kwargs and key not in own:
            share = kwargs.pop(key)
            if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
                raise CLIError(f"env.{key} is the share of training episodes that start {what}, a number from 0 to 1 "
                               f"(0: off); got {share!r}")
            if share:
                starts[key] = share
    if len(starts) > 1:
        raise CLIError(f"env.{GRASPED_START} and env.{CONTACT_START} both set: an episode has one start; "
                       f"set one of them (grasped_start for FetchPickAndPlace, contact_start for FetchPush and "
                       f"FetchSlide) and the other to 0 (a preset's is turned off so: --set env.NAME=0)")
    if ACTION_REPEAT in kwargs and ACTION_REPEAT not in own:
        repeat = kwargs.pop(ACTION_REPEAT)
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise CLIError(f"env.{ACTION_REPEAT} must be an integer >= 1 (each action applied for that many env "
                           f"steps; 1: off), got {repeat!r}")
    if TIME_FEATURE in kwargs and TIME_FEATURE not in own:
        time_feature = kwargs.pop(TIME_FEATURE)
        if not isinstance(time_feature, bool):
            raise CLIError(f"env.{TIME_FEATURE} must be true or false (append the share of the time limit left to "
                           f"the observation), got {time_feature!r}")
    env_kwargs = kwargs.copy()
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    try:
        env = gym.make(env_id, **kwargs)
    except Exception as err:  # the env's own code: a wrong argument's value fails anywhere in its constructor
        if isinstance(err, (CLIError, ImportError)):  # a missing package's ImportError names what to install
            raise
        if not env_kwargs:
            raise CLIError(f"{env_id} could not be made: {raised(err)} (python -c \"import gymnasium as gym; "
                           f"gym.make('{env_id}')\" shows the traceback)") from err
        params = constructor_arguments(env_id)
        if "argument" not in str(err):
            given = ", ".join(f"env.{k}={v!r}" for k, v in env_kwargs.items())
            raise CLIError(f"{env_id} could not be made with {given} ({type(err).__name__}: {err}); check the values "
                           f"(--set env.NAME=VALUE reads numbers, true/false and [lists]; text otherwise); its "
                           f"constructor takes: {', '.join(params) or 'no arguments'}") from err
        read = _constructor_parameters(env_id)  # none where the constructor cannot be read: then no guess
        takes_any = any(p.kind == p.VAR_KEYWORD for p in read)
        unknown = [k for k in env_kwargs if k not in params] if read and not takes_any else []
        if unknown:  # name the settings the constructor lacks, not the valid ones given beside them
            hints = "".join(f" (did you mean env.{close[0]}?)" if (close := difflib.get_close_matches(k, params, 1)) else ""
                            for k in unknown[:1])
            raise CLIError(f"{env_id} takes no {', '.join(f'env.{k}' for k in unknown)}{hints}; its constructor "
                           f"takes: {', '.join(params) or 'no arguments'} (set them with --set env.NAME=VALUE)") from err
        given = ", ".join(f"env.{k}" for k in env_kwargs or {})
        raise CLIError(
            f"{env_id} rejected {given or 'its arguments'} ({err}); its constructor takes: "
            f"{', '.join(params) or 'no arguments'} (set them with --set env.NAME=VALUE)"
        ) from err
    for key, share in starts.items():
        from herl.envs import ContactStart, GraspedStart

        try:
            wrapped = {GRASPED_START: GraspedStart, CONTACT_START: ContactStart}[key](env, share)
        except ValueError as err:
            env.close()
            raise CLIError(f"env.{key}={share} on {env_id}: {err} (--set env.{key}=0 turns it off, e.g. where a "
                           f"preset for another task set it)") from err
        if training:
            env = wrapped
    if time_feature:
        from herl.envs.time_feature import TimeFeature

        try:
            env = TimeFeature(env)
        except ValueError as err:
            env.close()
            raise CLIError(f"env.{TIME_FEATURE}=true on {env_id}: {err} (on the command line: --set "
                           f"env.max_episode_steps=N)") from err
    if repeat == 1:
        return env
    from herl.envs.action_repeat import ActionRepeat

    return ActionRepeat(env, repeat)


def _constructor_parameters(env_id: str) -> list[inspect.Parameter]:
    """The parameters of ``env_id``'s constructor, or none where they cannot be read."""
    spec = gym.spec(env_id.rpartition(":")[2])
    try:
        creator = spec.entry_point
        if isinstance(creator, str):
            creator = gym.envs.registration.load_env_creator(creator)
        return list(inspect.signature(creator).parameters.values())
    except (ValueError, TypeError, ImportError, AttributeError):
        return []


def constructor_arguments(env_id: str) -> list[str]:
    """Names of the keyword arguments of ``env_id``'s constructor (and gym.make's ``max_episode_steps``)."""
    params = _constructor_parameters(env_id)
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]
    return [*names, "max_episode_steps"] if "max_episode_steps" not in names else names


def is_goal_env(env: gym.Env) -> bool:
    return is_goal_space(env.observation_space)


def check_her_env(env_id: str, env_kwargs: dict[str, Any] | None = None, copy_info_dict: bool | None = None) -> None:
    """Raise a CLIError saying what is missing if ``env_id`` cannot be trained with HER, or if its own code raises
    (``copy_info_dict``: the run's ``her.copy_info_dict``, None where it is not known: then a reward that reads
    ``info`` passes)."""
    from herl.envs import GoalEnvError, check_goal_env

    env = make_env(env_id, env_kwargs)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        check_goal_env(env, n_steps=10, warn=False, copy_info_dict=copy_info_dict)
    except GoalEnvError as err:
        if is_goal_env(env):
            advice = (f"Fix what it names (`herl check-env {env_id}` runs the full check; docs/envs.md says what HER "
                      "needs)" + ("; only as a last resort train it without HER (--no-her), which gives up the "
                                  "relabeled goals" if err.without_her else ""))
        else:
            advice = ("Train it without HER (--no-her), or make it a goal env (see docs/envs.md; `herl check-env ID` "
                      "runs the full check)")
        raise CLIError(f"{env_id} cannot be trained with HER: {err}.\n  {advice}") from err
    except CLIError:
        raise
    except Exception as err:  # the env's own code: its reset, step or compute_reward
        raise env_code_error(env_id, err) from err
    finally:
        env.close()


def env_code_error(env_id: str, err: BaseException) -> CLIError:
    """The CLIError for an error that ``env_id``'s own code raised: where, and how to see the traceback."""
    return CLIError(f"{env_id}'s own code raised {raised(err)}; `herl check-env {env_id}` shows the traceback")


def raised(err: BaseException) -> str:
    """``TYPE: MESSAGE (FILE, line N, in FUNCTION)`` for an error an env's code raised: where, the innermost frame of
    its traceback outside herl, the installed packages and the standard library (none where there is none); for a
    SyntaxError, where it is."""
    if isinstance(err, SyntaxError):
        return f"SyntaxError: {err.msg} ({err.filename}, line {err.lineno})"
    library = [os.path.dirname(os.path.dirname(__file__)),
               *{sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}]
    frames = [frame for frame in traceback.extract_tb(err.__traceback__)
              if not frame.filename.startswith("<") and not any(
                  os.path.abspath(frame.filename).startswith(os.path.join(path, "")) for path in library)]
    where = f" ({frames[-1].filename}, line {frames[-1].lineno}, in {frames[-1].name})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"


# ---------------------------------------------------------------------------------------------------------------------
# Envs a checkpoint can restore


class ReplayMismatch(RuntimeError):
    """Replaying an episode did not lead where the original did (the env is not deterministic given its seed)."""


class ReplayableEnv(gym.Wrapper):
    """Records the running episode's start (the reset seed, or the env's generator state before an unseeded reset)
    and its actions, so that :meth:`restore` can rebuild the same state in a fresh env.

    Put it outermost, around gymnasium's ``TimeLimit``, so that replaying also counts the steps towards the limit.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.reset_seed: int | None = None
        self.reset_rng_state: dict[str, Any] | None = None
        self.actions: list[np.ndarray] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if options:
            raise ValueError("ReplayableEnv does not record reset options; reset without them")
        self.reset_seed = seed
        self.reset_rng_state = None if seed is not None else copy.deepcopy(self.unwrapped.np_random.bit_generator.state)
        self.actions = []
        return self.env.reset(seed=seed)

    def step(self, action: Any):
        self.actions.append(np.array(action, copy=True))
        return self.env.step(action)

    def snapshot(self) -> tuple[dict[str, Any], np.ndarray]:
        """``(meta, actions)``: JSON-able record of the episode's start, and its actions stacked."""
        space = self.action_space
        shape = () if isinstance(space, gym.spaces.Discrete) else space.shape
        actions = np.stack(self.actions) if self.actions else np.zeros((0, *shape), dtype=space.dtype or np.int64)
        return {"reset_seed": self.reset_seed, "reset_rng_state": self.reset_rng_state}, actions

    def restore(self, meta: dict[str, Any], actions: np.ndarray) -> Any:
        """Replay the recorded episode in this env; returns the observation it ends at."""
        if meta["reset_seed"] is not None:
            obs, _ = self.env.reset(seed=meta["reset_seed"])
        else:
            self.unwrapped.np_random.bit_generator.state = meta["reset_rng_state"]
            obs, _ = self.env.reset()
        for action in actions:
            obs, _, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated:
                raise ReplayMismatch("the replayed episode ended early: the env is not deterministic given its seed")
        self.reset_seed, self.reset_rng_state = meta["reset_seed"], meta["reset_rng_state"]
        self.actions = [np.array(a, copy=True) for a in actions]
        return obs

    pending_restore: tuple[dict[str, Any], np.ndarray] | None = None
    """What :meth:`restore_pending` replays: set by the process that holds this env in another one's vector env."""

    def restore_pending(self) -> tuple[bool, Any]:
        """:meth:`restore` of :attr:`pending_restore`, as ``(replayed exactly, observation)``: an env in another
        process answers, so that every env reports whether it replayed exactly."""
        meta, actions = self.pending_restore
        self.pending_restore = None
        try:
            return True, self.restore(meta, actions)
        except ReplayMismatch:
            return False, None


VECTOR_ENVS = ("sync", "async")
"""How ``n_envs > 1`` envs step: one after another in the training process, or in processes of their own."""


def env_processes(n_envs: int, processes: int = 0) -> int:
    """The processes ``vector_env="async"`` steps ``n_envs`` envs in: ``processes``, or this machine's cores where
    it is 0, and never more than one per env."""
    return max(1, min(n_envs, processes or os.cpu_count() or 1))


def make_training_env(env_id: str, env_kwargs: dict[str, Any] | None, n_envs: int,
                      vector_env: str = "sync", processes: int = 0) -> gym.Env | SyncVectorEnv | ShardedVectorEnv:
    """A :class:`ReplayableEnv`, or ``n_envs`` of them in a SAME_STEP vector env (the loop stores true final states):
    stepped one after another (``vector_env="sync"``), or split over :func:`env_processes` processes that step their
    shares at once (``"async"``: a :class:`~herl.envs.sharded.ShardedVectorEnv`, one process per env where there are
    cores enough). Fetch envs of one process share one MuJoCo model (see :mod:`herl.envs.shared_models`)."""
    if vector_env not in VECTOR_ENVS:
        raise CLIError(f"vector_env={vector_env!r}: use one of {list(VECTOR_ENVS)}")
    if n_envs == 1:
        return ReplayableEnv(make_env(env_id, env_kwargs, training=True))
    make_env(env_id, env_kwargs).close()  # report a bad id or argument once, here, not from inside the vector env
    fns = [lambda: ReplayableEnv(make_env(env_id, env_kwargs, training=True)) for _ in range(n_envs)]
    if vector_env == "async":
        return ShardedVectorEnv(fns, env_processes(n_envs, processes))
    envs = make_envs_sharing_models(fns)
    return SyncVectorEnv([lambda env=env: env for env in envs], autoreset_mode=AutoresetMode.SAME_STEP)


def recorders(env: gym.Env | SyncVectorEnv) -> list[ReplayableEnv]:
    """The :class:`ReplayableEnv` of each env of a training env in this process."""
    envs = env.envs if isinstance(env, SyncVectorEnv) else [env]
    if not all(isinstance(e, ReplayableEnv) for e in envs):
        raise TypeError("checkpoints need envs made by make_training_env (wrapped in ReplayableEnv)")
    return list(envs)


def snapshot_envs(env: Any) -> list[tuple[dict[str, Any], np.ndarray]]:
    """Each env's :meth:`ReplayableEnv.snapshot`, in this process or in its vector env's workers."""
    if isinstance(env, ShardedVectorEnv):
        return list(env.call("snapshot"))
    return [recorder.snapshot() for recorder in recorders(env)]


def restore_envs(env: Any, records: list[dict[str, Any]], actions: list[np.ndarray]) -> list[Any]:
    """Replay each env's recorded episode (:meth:`ReplayableEnv.restore`); returns their observations, or raises
    :class:`ReplayMismatch` if one did not replay exactly."""
    if isinstance(env, ShardedVectorEnv):
        env.set_attr("pending_restore", list(zip(records, actions)))
        results = env.call("restore_pending")
        if not all(exact for exact, _ in results):
            raise ReplayMismatch("a replayed episode ended early: the env is not deterministic given its seed")
        return [obs for _, obs in results]
    return [recorder.restore(record, a) for recorder, record, a in zip(recorders(env), records, actions)]


def reset_envs(env: Any) -> list[Any]:
    """Start a new episode in each env (unseeded); returns the first observations."""
    if isinstance(env, ShardedVectorEnv):
        return [obs for obs, _ in env.call("reset")]
    return [recorder.reset()[0] for recorder in recorders(env)]
