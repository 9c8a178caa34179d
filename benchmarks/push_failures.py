"""Why a FetchPush (or FetchPickAndPlace) policy fails: its deterministic episodes sorted by what happened to the block.

Loads a run's model (``herl train``'s ``model.zip``, or a checkpoint's), makes the env as the run did (its
``config.json``: action repeat, time feature), plays ``--episodes`` episodes from seeds no training or evaluation
used, and counts each episode as one of:

* ``success``: the block ends within 5 cm of the goal;
* ``untouched``: the block never moved 1 cm (the gripper never got to it, or never pushed it);
* ``reached then left``: the block came within 5 cm of the goal and ended outside (overshoot, or pushed on);
* ``moved, never reached``: the block moved but never came within 5 cm (pushed the wrong way or not far enough).

For each kind it prints the median starting and final distance to the goal and how far the block went, and how
many blocks ended off the table. It also splits the successes by where the goal was: on the table, or in the air
(FetchPickAndPlace draws half of its goals up to 45 cm above the table; pushing alone reaches only the others), and
counts the episodes in which the block was lifted (2 cm or more above where it started).

Usage::

    python benchmarks/push_failures.py runs/push/seed_0 --episodes 100
    python benchmarks/push_failures.py runs/push/seed_0/checkpoints/step_000000051000 --episodes 100
    python benchmarks/push_failures.py runs/pnp/seed_0 --episodes 200     # FetchPickAndPlace: the same, by goal height
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np

THRESHOLD = 0.05  # FetchPush's success distance
TABLE_Z = 0.38  # the block's centre rests at ~0.42 on the table
LIFTED = 0.02  # the block 2 cm above its starting height: lifted, not pushed
IN_THE_AIR = 0.01  # a goal more than 1 cm above the block's starting height (FetchPickAndPlace's goals on the table are at it)


def run_folder(path: Path) -> Path:
    return path if (path / "config.json").exists() else path.parent.parent  # a checkpoint: run/checkpoints/step_*


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="a run folder (seed_N) or one of its checkpoints")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=10_000)
    args = parser.parse_args()

    from herl.run.envs import make_env
    from herl.run.train import read_config
    from herl.training.base import OffPolicyAlgorithm

    config = read_config(run_folder(args.model))
    env = make_env(config.env, dict(config.env_kwargs))
    model = OffPolicyAlgorithm.load(args.model / "model.zip", env=env)
    kinds: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    fell = 0
    by_height: dict[str, list[bool]] = defaultdict(list)  # goal on the table / in the air -> success of each episode
    lifted = 0
    for episode in range(args.episodes):
        obs, _ = env.reset(seed=args.first_seed + episode)
        start, goal = obs["achieved_goal"].copy(), obs["desired_goal"].copy()
        closest, furthest, highest = np.linalg.norm(start - goal), 0.0, start[2]
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            closest = min(closest, np.linalg.norm(obs["achieved_goal"] - goal))
            furthest = max(furthest, np.linalg.norm(obs["achieved_goal"] - start))
            highest = max(highest, obs["achieved_goal"][2])
        final = float(np.linalg.norm(obs["achieved_goal"] - goal))
        fell += bool(obs["achieved_goal"][2] < TABLE_Z)
        lifted += bool(highest - start[2] >= LIFTED)
        by_height["in the air" if goal[2] - start[2] > IN_THE_AIR else "on the table"].append(final < THRESHOLD)
        if final < THRESHOLD:
            kind = "success"
        elif furthest < 0.01:
            kind = "untouched"
        elif closest < THRESHOLD:
            kind = "reached then left"
        else:
            kind = "moved, never reached"
        kinds[kind].append((float(np.linalg.norm(start - goal)), final, furthest))
    print(f"{args.model}: {args.episodes} episodes, {fell} blocks ended off the table, {lifted} lifted")
    print("success by goal: " + ", ".join(f"{where} {sum(ok)}/{len(ok)}" for where, ok in sorted(by_height.items(),
                                                                                               reverse=True)))
    print("| kind | episodes | start to goal (median) | end to goal (median) | block moved (median) |\n|---|---|---|---|---|")
    for kind in ("success", "moved, never reached", "reached then left", "untouched"):
        rows = np.array(kinds.get(kind, [(np.nan,) * 3]))
        n = len(kinds.get(kind, []))
        print(f"| {kind} | {n} | " + " | ".join(f"{np.median(rows[:, i]):.3f} m" for i in range(3)) + " |")


if __name__ == "__main__":
    main()
