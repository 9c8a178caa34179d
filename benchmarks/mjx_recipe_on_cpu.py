"""Does a GPU preset's recipe learn? The recipe of ``mjx_fetch_push`` (TQC, 1,024 envs stepped as one batch, 1/16
update per env step, batch 1,024, [256, 256, 256]) trained on the CPU, on its gymnasium twin: FetchPush-v4 stepped by
MuJoCo's C engine, ``--n-envs`` copies driven as one batched env.

A GPU session is short and rare; this measures on a CPU, in env steps, where the recipe gets to (success of the
deterministic policy over ``--episodes`` episodes every ``--eval-every`` env steps). With the GPU's throughput for
MJXFetchPush, env steps give the wall clock the recipe would need there. What differs from MJXFetchPush: the C engine
and gymnasium's FetchPush model, whose arm links collide (MJXFetchPush keeps contacts to the fingers, the block, the
table and the floor).

    python benchmarks/mjx_recipe_on_cpu.py --timesteps 1000000 --seed 0 [--set batch_size=2048 ...]

Each ``--set KEY=VALUE`` overrides one of the preset's settings, as ``herl train --set`` does. The envs share one
MuJoCo model (``herl.envs.shared_mujoco_models``): 1,024 of them take under 1 GB. Measured on a 2-core AMD EPYC
(2026-11-27, float32, one core per seed): seed 0 0.44 at 204,800 env steps and 0.935 at 307,200; seed 1 0.825 at
204,800 (docs/research/fetch.md, "Many envs in one process"). Prints one line per
evaluation (env steps, updates, success, wall seconds) and, at the end, the first env step at which the success
reached 0.9.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch

from herl.batched.env import BatchedGoalEnv, BatchedStep

PRESET, ENV_ID, TWIN = "mjx_fetch_push", "herl/MJXFetchPush-v0", "FetchPush-v4"


class GymnasiumGoalEnvs(BatchedGoalEnv):
    """``n_envs`` copies of a gymnasium goal env, stepped one after another in Python, as a batched env on the CPU
    (observations as float32 tensors; the episode's time limit and the reset of ended episodes done here). Rewards
    are :meth:`compute_reward` of the goals, so relabeled rewards match the rollouts'. No ``state_dict``: a run of
    this script is not resumed."""

    def __init__(self, n_envs: int, env_id: str = TWIN, device: str = "cpu") -> None:
        import gymnasium_robotics

        from herl.envs import shared_mujoco_models

        gym.register_envs(gymnasium_robotics)
        with shared_mujoco_models():
            self.envs = [gym.make(env_id).unwrapped for _ in range(n_envs)]
        spec = gym.spec(env_id)
        self.n_envs, self.device, self.max_episode_steps = n_envs, torch.device(device), int(spec.max_episode_steps)
        first = self.envs[0]
        self.single_observation_space, self.single_action_space = first.observation_space, first.action_space
        self.threshold = float(first.distance_threshold)
        self._elapsed = np.zeros(n_envs, dtype=np.int64)

    def _stack(self, observations: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        return {key: torch.as_tensor(np.stack([o[key] for o in observations]), dtype=torch.float32)
                for key in ("observation", "achieved_goal", "desired_goal")}

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        self._elapsed[:] = 0
        return self._stack([env.reset(seed=None if seed is None else seed * 100_003 + i)[0]
                            for i, env in enumerate(self.envs)])

    def step(self, actions: torch.Tensor) -> BatchedStep:
        actions = actions.detach().cpu().numpy()
        self._elapsed += 1
        ended = self._elapsed >= self.max_episode_steps
        final = [env.step(action)[0] for env, action in zip(self.envs, actions)]
        after = [env.reset()[0] if end else obs for env, obs, end in zip(self.envs, final, ended)]
        self._elapsed[ended] = 0
        truncated = torch.as_tensor(ended)
        final_obs = self._stack(final)
        reward = self.compute_reward(final_obs["achieved_goal"], final_obs["desired_goal"])
        return BatchedStep(self._stack(after), final_obs, reward, torch.zeros_like(truncated), truncated, reward == 0)

    def compute_reward(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        return -(torch.linalg.vector_norm(achieved_goal - desired_goal, dim=-1) > self.threshold).to(torch.float32)


def main() -> None:
    from herl.run.batched import build_model, build_trainer
    from herl.run.config import build_config, parse_assignment
    from herl.run.presets import get_preset

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=1_000_000)
    parser.add_argument("--n-envs", type=int, default=None, help="default: the preset's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=102_400)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    preset = get_preset(PRESET)
    flags = {"timesteps": args.timesteps, "device": "cpu", **({"n_envs": args.n_envs} if args.n_envs else {})}
    layers = [*preset.layers(preset.algo), ("flags", flags), ("--set", dict(parse_assignment(s) for s in args.set))]
    config = build_config(algo=preset.algo, env=ENV_ID, seed=args.seed, layers=layers, goal_env=True, preset=PRESET)
    env, eval_env = GymnasiumGoalEnvs(config.n_envs), GymnasiumGoalEnvs(args.episodes)
    model = build_model(config, env)
    trainer = build_trainer(config, model, env)
    print(f"{PRESET}'s recipe on {TWIN} (C MuJoCo), CPU, seed {args.seed}: {config.n_envs} envs, "
          f"{config.batched.updates_per_step:g} updates per env step, {model.config.batch_size=}, "
          f"net_arch {model.policy_config.critic_arch}, precision {model.policy_config.precision}", flush=True)
    start, first = time.perf_counter(), None
    for target in range(args.eval_every, args.timesteps + 1, args.eval_every):
        trainer.learn(target)
        success = trainer.evaluate(eval_env, seed=10_000 + target)
        first = first if first is not None or success < 0.9 else model.num_timesteps
        print(f"env steps {model.num_timesteps:>9,}  updates {model._n_updates:>7,}  success {success:.3f}  "
              f"wall {time.perf_counter() - start:7.0f} s", flush=True)
    print(f"first evaluation at >= 0.9: {first if first is not None else 'none'} env steps")


if __name__ == "__main__":
    main()
