"""TQC+HER on the Fetch manipulation tasks: herl against sb3-contrib with the same recipe, in one script.

Two measurements:

* ``curve``: one library trains one seed, evaluating every ``--eval-freq`` env steps (deterministic
  policy, ``--eval-episodes`` episodes on a separately seeded env, the same evaluation code for both
  libraries), and writes a CSV row per evaluation with diagnostics that separate "a bug" from "the
  recipe": the share of a sampled batch whose (relabeled) reward is 0, the share of the last 100
  training episodes in which the block moved (> 1 cm), the critics' mean value on a sampled batch
  next to the bound ``-1/(1-gamma)`` of returns of -1/0 rewards, and (herl) the normalizer's spread.
  Run it once per library and seed, e.g. two processes side by side.
* ``speed``: env steps per second while learning, herl (float32 and mixed bfloat16 precision) and sb3-contrib
  taking turns in one process.

Usage::

    python benchmarks/fetch_tqc.py curve --lib herl --steps 100000 --out runs/push_herl.csv
    python benchmarks/fetch_tqc.py curve --lib sb3 --steps 100000 --out runs/push_sb3.csv
    python benchmarks/fetch_tqc.py speed --steps 2000 --repeats 3
    python benchmarks/fetch_tqc.py speed --net-arch 512 512 512 --batch-size 2048 --steps 40 --warmup 10  # the zoo's recipe
    python benchmarks/fetch_tqc.py speed --device cuda --variants herl-float32 herl-float32-compiled  # eager vs compiled
    python benchmarks/fetch_tqc.py plot runs/push_herl.csv runs/push_sb3.csv --out docs/images/push_side_by_side.png
"""

from __future__ import annotations

import argparse
import csv
import time
import warnings
from collections import deque
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

warnings.filterwarnings("ignore")


def recipe(args: argparse.Namespace) -> dict:
    """The hyperparameters both libraries get (sb3-contrib's names)."""
    return dict(learning_rate=args.lr, buffer_size=1_000_000, learning_starts=args.learning_starts,
                batch_size=args.batch_size, tau=args.tau, gamma=args.gamma, train_freq=1,
                gradient_steps=args.gradient_steps * getattr(args, "n_envs", 1), top_quantiles_to_drop_per_net=2,
                policy_kwargs=dict(net_arch=list(args.net_arch), n_critics=2, n_quantiles=25))


class BlockMoves(gym.Wrapper):
    """Records, for each finished episode, how far the achieved goal (the block) got from where it started."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.moved: deque[float] = deque(maxlen=100)
        self._start = None

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._start = np.array(obs["achieved_goal"], copy=True)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            self.moved.append(float(np.linalg.norm(obs["achieved_goal"] - self._start)))
        return obs, reward, terminated, truncated, info


def make_env(env_id: str) -> gym.Env:
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    return gym.make(env_id)


def make_model(lib: str, env: gym.Env, seed: int, args: argparse.Namespace):
    kwargs = recipe(args)
    if lib == "herl":
        from herl import TQC, HerReplayBuffer

        extra = dict(normalize_observations=args.normalize, clip_target=args.clip_target, squash_eps=args.squash_eps)
        kwargs["policy_kwargs"]["precision"] = args.precision
        return TQC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, seed=seed, device=args.device,
                   compile=getattr(args, "compile", False),
                   replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future",
                                             storage_device=getattr(args, "storage_device", None)), **kwargs, **extra)
    from sb3_contrib import TQC
    from stable_baselines3 import HerReplayBuffer

    return TQC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, seed=seed, device=args.device,
               replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"), **kwargs)


def evaluate(model, env_id: str, episodes: int, seed: int) -> float:
    env = make_env(env_id)
    successes = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        successes.append(float(info["is_success"]))
    return float(np.mean(successes))


def diagnostics(lib: str, model, gamma: float) -> dict:
    batch = model.replay_buffer.sample(1024)
    out = {"reward0_share": float((batch.rewards == 0).float().mean())}
    with torch.no_grad():
        if lib == "herl":
            x = model.encoder.normalize(model.encoder.flatten(batch.observations))
            z = model.critic(torch.cat([x, batch.actions], dim=1))
            norm = model.encoder.normalizer
            if norm is not None:
                out["norm_std_min"], out["norm_std_max"] = float(norm.std.min()), float(norm.std.max())
        else:
            z = model.critic(batch.observations, batch.actions)
    out["q_mean"], out["q_min"], out["q_max"] = float(z.mean()), float(z.min()), float(z.max())
    out["q_bound"] = -1.0 / (1.0 - gamma)
    return out


def curve(args: argparse.Namespace) -> None:
    env = BlockMoves(make_env(args.env))
    model = make_model(args.lib, env, args.seed, args)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows, start, done = [], time.perf_counter(), 0
    while True:
        row = {"lib": args.lib, "seed": args.seed, "timesteps": done, "seconds": round(time.perf_counter() - start, 1),
               "success": evaluate(model, args.env, args.eval_episodes, 10_000 * (args.seed + 1))}
        if done > 0:
            row["block_moved_share"] = float(np.mean(np.array(env.moved) > 0.01)) if env.moved else float("nan")
            row.update(diagnostics(args.lib, model, args.gamma))
        rows.append(row)
        print(row, flush=True)
        fields = list(dict.fromkeys(k for r in rows for k in r))
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        if done >= args.steps:
            break
        chunk = min(args.eval_freq, args.steps - done)
        model.learn(chunk, reset_num_timesteps=done == 0)
        done += chunk


def speed_env(args: argparse.Namespace):
    """One env, or ``--n-envs`` of them stepping in their own processes (gymnasium's AsyncVectorEnv)."""
    if args.n_envs == 1:
        return make_env(args.env)
    return gym.vector.AsyncVectorEnv([lambda: make_env(args.env)] * args.n_envs, context="spawn",
                                     autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


SPEED_VARIANTS = {"herl-float32": ("herl", "float32", False), "herl-bfloat16": ("herl", "bfloat16", False),
                  "herl-float32-compiled": ("herl", "float32", True), "herl-bfloat16-compiled": ("herl", "bfloat16", True),
                  "sb3-contrib": ("sb3", "float32", False)}


def speed(args: argparse.Namespace) -> None:
    """The chosen variants (by default herl in float32 and in mixed bfloat16 precision, and sb3-contrib) taking turns in
    this one process. A compiled variant pays its compile time in the warm-up, outside the timed steps."""
    variants = {name: SPEED_VARIANTS[name] for name in args.variants}
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(args.repeats):
        for name, (lib, precision, compiled) in variants.items():
            settings = argparse.Namespace(**{**vars(args), "precision": precision, "compile": compiled})
            model = make_model(lib, speed_env(args), 0, settings)
            model.learn(args.learning_starts + args.warmup)
            start = time.perf_counter()
            model.learn(args.steps, reset_num_timesteps=False)
            rates[name].append(args.steps / (time.perf_counter() - start))
            print(f"[{rep}] {name}: {rates[name][-1]:.1f} env steps/s while learning", flush=True)
    medians = {name: float(np.median(r)) for name, r in rates.items()}
    base = next(iter(medians))
    print(f"median (ratio to {base}): " + ", ".join(f"{name} {rate:.1f} steps/s ({rate / medians[base]:.2f}x)"
                                                   for name, rate in medians.items()))


def plot(args: argparse.Namespace) -> None:
    """Success and block-moved share of ``curve`` CSVs against env steps, one line per file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    for name in args.csv:
        with open(name, newline="") as f:
            rows = list(csv.DictReader(f))
        label = f"{rows[0]['lib']} seed {rows[0]['seed']}"
        steps = [int(r["timesteps"]) for r in rows]
        axes[0].plot(steps, [float(r["success"]) for r in rows], marker="o", label=label)
        moved = [(int(r["timesteps"]), float(r["block_moved_share"])) for r in rows if r.get("block_moved_share")]
        axes[1].plot(*zip(*moved), marker="o", label=label)
    for ax, title in zip(axes, ["evaluation success (50 episodes)", "training episodes that moved the block > 1 cm"]):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("env steps")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["curve", "speed", "plot"])
    parser.add_argument("csv", nargs="*", help="plot: the CSV files written by curve")
    parser.add_argument("--lib", choices=["herl", "sb3"], default="herl")
    parser.add_argument("--env", default="FetchPush-v4")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-freq", type=int, default=10_000)
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--out", default="runs/fetch_tqc.csv")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=100,
                        help="speed: env steps learned (one update each) after learning starts and before timing")
    # the recipe, the same for both libraries
    parser.add_argument("--net-arch", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--gamma", type=float, default=0.95)
    parser.add_argument("--tau", type=float, default=0.05)
    parser.add_argument("--gradient-steps", type=int, default=1)
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--device", default="cpu", help="both libraries' device (cpu, cuda)")
    parser.add_argument("--storage-device", default=None, help="herl: where the replay buffer keeps its data (cuda: HER sampling on the GPU)")
    parser.add_argument("--n-envs", type=int, default=1,
                        help="speed: envs stepped at once, in their own processes; gradient steps per collect grow with them")
    parser.add_argument("--variants", nargs="+", choices=sorted(SPEED_VARIANTS), default=["sb3-contrib", "herl-float32", "herl-bfloat16"],
                        help="speed: what takes turns; ratios are to the first")
    # herl only: sb3-contrib has neither
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--clip-target", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--squash-eps", type=float, default=0.0, help="SB3's tanh log-determinant (1e-6) instead of the exact one")
    parser.add_argument("--precision", choices=["float32", "bfloat16"], default="float32",
                        help="the hidden layers' matmuls (bfloat16: mixed precision, weights stay float32)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; {vars(args)}", flush=True)
    {"curve": curve, "speed": speed, "plot": plot}[args.what](args)


if __name__ == "__main__":
    main()
