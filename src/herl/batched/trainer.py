"""Training on batched goal envs: collect from every env at once, store the block on the device, update at scale.

A :class:`BatchedTrainer` joins a herl model (any off-policy algorithm), a :class:`~herl.batched.env.BatchedGoalEnv`
and a :class:`~herl.batched.buffer.BatchedHerBuffer` on one device. A round steps all envs ``collect_steps`` times
(actions from the model's exploration, computed as tensors: nothing leaves the device), stores each step of all
envs with one ``add``, then runs the updates that the update-to-data ratio gives for the env steps just collected
(JaxGCRL and brax's SAC train this way: thousands of envs, few updates per env step, large batches). The model's
``_update`` is the same one ``learn`` uses, so every algorithm and its settings carry over unchanged.

Exact resume: :meth:`BatchedTrainer.save` writes the model, and beside it the buffer, the envs' state and the
loop's counters; :meth:`BatchedTrainer.load` continues bit-identically on the CPU.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from herl.batched.buffer import BatchedHerBuffer
from herl.batched.env import BatchedGoalEnv
from herl.errors import POSITIVE_INT, ConfigError, check, integer, number
from herl.io.archive import read_archive, write_archive
from herl.io.atomic import atomic_folder

TRAINER_KIND = "batched-trainer"
TRAINER_VERSION = 1
MODEL_FILE, STATE_FILE = "model.zip", "trainer.zip"


@dataclass(frozen=True)
class BatchedSettings:
    """How a :class:`BatchedTrainer` collects and updates."""

    collect_steps: int = 1
    """Steps of every env between rounds of updates (a round stores ``collect_steps * n_envs`` transitions)."""
    updates_per_step: float = 1 / 64
    """Gradient steps per env step (counting every env's steps): the update-to-data ratio. With 1,024 envs and
    ``collect_steps=1``, 1/64 gives 16 updates a round."""
    n_sampled_goal: int = 4
    """Relabeled goals per real one: a share k/(k+1) of each batch is relabeled (0: plain replay)."""
    goal_selection_strategy: str = "future"
    """Where relabeled goals come from: ``"future"``, ``"final"`` or ``"episode"``."""
    buffer_size: int | None = None
    """Transitions the buffer holds (all envs together); None: the model's ``buffer_size``."""

    def validate(self) -> None:
        owner = "BatchedTrainer"
        check(owner, "collect_steps", self.collect_steps, POSITIVE_INT)
        check(owner, "updates_per_step", self.updates_per_step, number(0.0))
        check(owner, "n_sampled_goal", self.n_sampled_goal, integer(0))
        if self.goal_selection_strategy not in ("future", "final", "episode"):
            raise ConfigError(owner, "goal_selection_strategy", self.goal_selection_strategy,
                              "'future', 'final' or 'episode'")
        if self.buffer_size is not None:
            check(owner, "buffer_size", self.buffer_size, POSITIVE_INT)


class BatchedTrainer:
    """Train ``model`` on the batched goal env ``env``.

    The model must have been built for the env's single spaces (``observation_space=env.single_observation_space,
    action_space=env.single_action_space``, no env) on the env's device; its hyperparameters (batch size, learning
    rate, ``learning_starts`` counted in env steps of all envs together, ...) apply as in ``learn``.

    Example::

        env = BatchedPointReach(n_envs=512)
        model = SAC("MultiInputPolicy", observation_space=env.single_observation_space,
                    action_space=env.single_action_space, batch_size=1024, learning_starts=10_000, seed=0)
        trainer = BatchedTrainer(model, env, updates_per_step=1 / 32)
        trainer.learn(500_000)
        print(trainer.evaluate())
    """

    def __init__(self, model: Any, env: BatchedGoalEnv, *, seed: int | None = None, **settings: Any) -> None:
        try:
            self.settings = BatchedSettings(**settings)
        except TypeError:
            known = [f.name for f in dataclasses.fields(BatchedSettings)]
            unknown = sorted(set(settings) - set(known))
            raise TypeError(f"BatchedTrainer got unknown settings {unknown}: it takes {known}") from None
        self.settings.validate()
        _check_pair(model, env)
        self.model, self.env = model, env
        self.seed = model.seed if seed is None else seed
        check("BatchedTrainer", "seed", self.seed, integer(0, also=(None,)))
        size = self.settings.buffer_size or model.config.buffer_size
        self.buffer = BatchedHerBuffer(
            capacity=size, n_envs=env.n_envs, observation_space=env.single_observation_space,
            action_space=env.single_action_space, compute_reward=env.compute_reward,
            compute_terminated=env.compute_terminated, max_episode_steps=env.max_episode_steps,
            n_sampled_goal=self.settings.n_sampled_goal, goal_selection_strategy=self.settings.goal_selection_strategy,
            device=env.device, seed=None if self.seed is None else self.seed + 1)
        self.obs: dict[str, torch.Tensor] | None = None
        self.update_credit = 0.0  # updates owed by the env steps collected, carried between rounds
        # episodes ended and succeeded, since the start and since the last log line, counted on the device (reading
        # them is a sync: done at log time only)
        self._ended = torch.zeros(2, dtype=torch.int64, device=env.device)
        self._succeeded = torch.zeros(2, dtype=torch.int64, device=env.device)
        self.log: list[dict[str, float]] = []
        self._bounds: tuple[torch.Tensor, torch.Tensor] | None = None  # the action space's low and high - low
        self._noise: tuple[Any, Any] | None = None  # (the model's action noise, its sigma as a tensor)

    # ------------------------------------------------------------------ acting
    def _explore(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Exploration actions in the policy's scale ([-1, 1] boxes, or indices shaped (n, 1)), on the device."""
        model, n = self.model, self.env.n_envs
        space = model.action_space
        if model.num_timesteps < model.config.learning_starts:
            if isinstance(space, spaces.Discrete):
                return torch.randint(int(space.n), (n, 1), generator=model.torch_rng, device=model.device)
            return torch.rand((n, *space.shape), generator=model.torch_rng, device=model.device) * 2 - 1
        with torch.no_grad():
            x = model.encoder.normalize(model.encoder.flatten(obs))
            actions = model._act(x, False)
            if isinstance(space, spaces.Discrete):
                eps = _exploration_rate(model)
                if eps > 0:
                    random = torch.randint(int(space.n), (n, 1), generator=model.torch_rng, device=model.device)
                    pick = torch.rand((n, 1), generator=model.torch_rng, device=model.device) < eps
                    actions = torch.where(pick, random, actions)
                return actions
            if self._noise is None or self._noise[0] is not model.action_noise:  # the noise a user set since
                self._noise = (model.action_noise, _noise_sigma(model))
            sigma = self._noise[1]
            if sigma is not None:
                noise = torch.randn(actions.shape, generator=model.torch_rng, device=model.device) * sigma
                actions = (actions + noise).clamp(-1.0, 1.0)
            p = getattr(model.config, "random_action_prob", 0.0)
            if p:
                pick = torch.rand((n, 1), generator=model.torch_rng, device=model.device) < p
                random = torch.rand(actions.shape, generator=model.torch_rng, device=model.device) * 2 - 1
                actions = torch.where(pick, random, actions)
        return actions

    def _env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        space = self.model.action_space
        if isinstance(space, spaces.Discrete):
            return actions.reshape(-1) + int(space.start)
        if self._bounds is None:  # made once: a copy to the device each step would wait for it
            low = torch.as_tensor(space.low, device=actions.device)
            self._bounds = (low, torch.as_tensor(space.high, device=actions.device) - low)
        low, span = self._bounds
        return low + 0.5 * (actions + 1.0) * span

    # ------------------------------------------------------------------ training
    def learn(self, total_timesteps: int, *, log_every: int | None = None,
              callback: Callable[[BatchedTrainer], bool | None] | None = None) -> BatchedTrainer:
        """Train until the model has seen ``total_timesteps`` env steps (all envs together; counted on from a loaded
        trainer). ``log_every``: append the losses and the training success rate to :attr:`log` (and print them
        when the model's ``verbose`` is set) every that many env steps. ``callback(trainer)`` runs after each
        round; returning False stops training."""
        model, env, buffer = self.model, self.env, self.buffer
        check("BatchedTrainer.learn", "total_timesteps", total_timesteps, integer(0))
        model._total_timesteps = int(total_timesteps)
        if self.obs is None:
            self.obs = env.reset(seed=self.seed)
        next_log = None if not log_every else (model.num_timesteps // log_every + 1) * log_every
        start, start_steps = time.perf_counter(), model.num_timesteps
        per_round = self.settings.collect_steps * env.n_envs
        while model.num_timesteps < total_timesteps:
            for _ in range(self.settings.collect_steps):
                actions = self._explore(self.obs)
                step = env.step(self._env_actions(actions))
                buffer.add(self.obs, actions, step.reward, step.terminated, step.truncated, step.final_obs)
                self._count_episodes(step)
                self.obs = step.obs
                model.num_timesteps += env.n_envs
            model._current_progress_remaining = max(0.0, 1.0 - model.num_timesteps / max(total_timesteps, 1))
            if model.num_timesteps >= model.config.learning_starts:
                self.update_credit += per_round * self.settings.updates_per_step
                n_updates = int(self.update_credit)
                self.update_credit -= n_updates
                for _ in range(n_updates):
                    model._update(buffer.sample(model.config.batch_size))
                    model._n_updates += 1
                if n_updates and model._n_updates >= model._next_loss_check:
                    model.check_losses()
            if next_log is not None and model.num_timesteps >= next_log:
                next_log += log_every
                self._log_line(start, start_steps)
            if callback is not None and callback(self) is False:
                break
        return self

    def _count_episodes(self, step: Any) -> None:
        ended = step.terminated | step.truncated
        self._ended += ended.sum()
        self._succeeded += (ended & step.success).sum()

    @property
    def episodes(self) -> int:
        """Training episodes ended so far."""
        return int(self._ended[0])

    def _log_line(self, start: float, start_steps: int) -> None:
        model = self.model
        elapsed = max(time.perf_counter() - start, 1e-9)
        ended, succeeded = int(self._ended[1]), int(self._succeeded[1])
        self._ended[1] = self._succeeded[1] = 0
        line = {"timesteps": float(model.num_timesteps), "updates": float(model._n_updates),
                "steps_per_s": (model.num_timesteps - start_steps) / elapsed,
                "episodes": float(ended), "success_rate": succeeded / ended if ended else float("nan")}
        if model._train_info:
            line.update(model.train_info())
        self.log.append(line)
        if model.verbose:
            print(" ".join(f"{k}={v:.4g}" for k, v in line.items()), flush=True)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, env: BatchedGoalEnv | None = None, *, seed: int = 10_000) -> float:
        """Success rate of the deterministic policy over one episode of each env of ``env`` (default: a fresh copy
        is not made; pass a separate env of the same kind, so training's envs are not disturbed). Success is read
        where each env's first episode ends."""
        if env is None:
            raise ValueError("evaluate needs its own env: pass a BatchedGoalEnv of the same task, e.g. "
                             "BatchedPointReach(n_envs=100), so the training envs' episodes are left as they are")
        _check_pair(self.model, env)
        model = self.model
        obs = env.reset(seed=seed)
        done = torch.zeros(env.n_envs, dtype=torch.bool, device=env.device)
        success = torch.zeros(env.n_envs, dtype=torch.bool, device=env.device)
        for _ in range(env.max_episode_steps):
            x = model.encoder.normalize(model.encoder.flatten(obs))
            step = env.step(self._env_actions(model._act(x, True)))
            ended = (step.terminated | step.truncated) & ~done
            success |= ended & step.success
            done |= ended
            obs = step.obs
        if not bool(done.all()):
            raise RuntimeError(f"{type(env).__name__}: not every episode ended within max_episode_steps="
                               f"{env.max_episode_steps}: the env must truncate its episodes at that limit")
        return float(success.float().mean())

    # ------------------------------------------------------------------ files
    def save(self, folder: str | os.PathLike) -> Path:
        """Write the model (``model.zip``) and the rest of the run (``trainer.zip``: buffer, envs, counters) into
        ``folder``, a new folder: it appears complete or not at all, and an earlier save is never overwritten."""
        folder = Path(folder)
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise FileExistsError(f"{folder} exists and is not an empty folder: save into a new folder (herl never "
                                  "overwrites a save), e.g. one named by the step, or delete this one first")
        arrays: dict[str, np.ndarray] = {}
        for prefix, state in (("buffer", self.buffer.state_dict()), ("env", self.env.state_dict())):
            for key, tensor in state.items():
                arrays[f"{prefix}/{key}"] = _numpy(tensor)
        if self.obs is not None:
            for key, tensor in self.obs.items():
                arrays[f"obs/{key}"] = _numpy(tensor)
        arrays["episodes_ended"], arrays["episodes_succeeded"] = _numpy(self._ended), _numpy(self._succeeded)
        meta = {"settings": dataclasses.asdict(self.settings), "seed": self.seed,
                "update_credit": self.update_credit.hex(),
                "env": type(self.env).__name__, "n_envs": self.env.n_envs, "log": self.log,
                "last_losses": self.model.last_losses()}
        with atomic_folder(folder) as tmp:
            self.model.save(tmp / MODEL_FILE)
            write_archive(tmp / STATE_FILE, kind=TRAINER_KIND, version=TRAINER_VERSION, meta=meta, arrays=arrays)
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike, env: BatchedGoalEnv, *, model_class: type | None = None,
             device: torch.device | str | None = None) -> BatchedTrainer:
        """A trainer saved by :meth:`save`, continuing where it stopped with ``env`` (the same task and number of
        envs; its state is restored from the file). ``model_class``: the algorithm (default: the one in the file)."""
        folder = Path(folder)
        meta, arrays = read_archive(folder / STATE_FILE, kind=TRAINER_KIND, max_version=TRAINER_VERSION)
        if meta.get("n_envs") != env.n_envs or meta.get("env") != type(env).__name__:
            raise ValueError(f"{folder} was trained on {meta.get('n_envs')} envs of {meta.get('env')}, not "
                             f"{env.n_envs} of {type(env).__name__}: pass the same env to continue")
        if model_class is None:
            import herl  # the algorithms sit above this package
            from herl.io.model import read_model
            model_class = getattr(herl, read_model(folder / MODEL_FILE)[0]["algorithm"])
        model = model_class.load(folder / MODEL_FILE, device=env.device if device is None else device)
        trainer = cls(model, env, seed=meta["seed"], **meta["settings"])
        device = env.device
        split = lambda prefix: {k[len(prefix) + 1:]: torch.from_numpy(np.array(v)).to(device)
                                for k, v in arrays.items() if k.startswith(prefix + "/")}
        trainer.buffer.load_state_dict(split("buffer"))
        env.load_state_dict(split("env"))
        obs = split("obs")
        trainer.obs = obs or None
        trainer.update_credit = float.fromhex(meta["update_credit"])
        trainer._ended = torch.from_numpy(np.array(arrays["episodes_ended"])).to(device)
        trainer._succeeded = torch.from_numpy(np.array(arrays["episodes_succeeded"])).to(device)
        trainer.log = list(meta["log"])
        model.set_last_losses(meta.get("last_losses", {}))  # saves written before kept none
        return trainer


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def _check_pair(model: Any, env: Any) -> None:
    if not isinstance(env, BatchedGoalEnv):
        raise TypeError(f"BatchedTrainer needs a herl.batched.BatchedGoalEnv, got {type(env).__name__}: for gymnasium "
                        "envs use model.learn")
    if model.env is not None:
        raise ValueError("the model was built with an env of its own: build it from the batched env's spaces, "
                         "SAC('MultiInputPolicy', observation_space=env.single_observation_space, "
                         "action_space=env.single_action_space, ...)")
    if model.observation_space != env.single_observation_space or model.action_space != env.single_action_space:
        raise ValueError(f"the model's spaces ({model.observation_space}, {model.action_space}) are not the env's "
                         f"single spaces ({env.single_observation_space}, {env.single_action_space}): build the model "
                         "from env.single_observation_space and env.single_action_space")
    if torch.device(model.device).type != torch.device(env.device).type:
        raise ValueError(f"the model is on {model.device} and the envs on {env.device}: put both on one device "
                         f"(device={str(env.device)!r} when building the model)")


def _noise_sigma(model: Any) -> torch.Tensor | float | None:
    """The Gaussian exploration noise's scale of a DDPG/TD3 model (None without noise)."""
    noise = model.action_noise
    if noise is None:
        return None
    sigma = getattr(noise, "sigma", None)
    if type(noise).__name__ != "NormalActionNoise" or sigma is None:
        raise ValueError(f"BatchedTrainer explores with Gaussian noise only, got {type(noise).__name__}: use "
                         "NormalActionNoise (Ornstein-Uhlenbeck noise keeps a state per env)")
    return torch.as_tensor(np.asarray(sigma, dtype=np.float32), device=model.device)


def _exploration_rate(model: Any) -> float:
    """DQN's epsilon, from its schedule as ``learn`` computes it."""
    cfg = model.config
    progress = model.num_timesteps / max(model._total_timesteps, 1)
    fraction = min(progress / cfg.exploration_fraction, 1.0) if cfg.exploration_fraction > 0 else 1.0
    model.exploration_rate = cfg.exploration_initial_eps + fraction * (cfg.exploration_final_eps - cfg.exploration_initial_eps)
    return model.exploration_rate
