"""Share of the episodes in a saved HER buffer whose achieved goal moved, per block of 100 episodes in order.

For FetchPush, the training episodes that moved the block: the number behind docs/benchmarks.md's "episodes that
moved the block" rows (runs now log it as ``diagnostics/goal_moved_episodes``, over the last 100 episodes). Reads a
checkpoint's buffer of one env with 50-step episodes that has not wrapped around (buffer_size >= the run's steps).

Usage::

    python benchmarks/moved_episodes.py RUN/seed_0/checkpoints/step_000000150000/replay_buffer.zip [--threshold 0.01]
"""

from __future__ import annotations

import argparse

import numpy as np

from herl import HerReplayBuffer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("buffer")
    parser.add_argument("--episode-length", type=int, default=50)
    parser.add_argument("--threshold", type=float, default=0.01, help="distance from start to end that counts (m)")
    args = parser.parse_args()
    buffer = HerReplayBuffer.load(args.buffer, compute_reward=lambda a, d, info: np.zeros(len(a), np.float32))
    storage, length = buffer.storage, args.episode_length
    if storage.n_envs != 1 or storage.share_states:
        raise SystemExit("this reads buffers of one env stored with optimize_memory_usage=False")
    n = storage.n_transitions // length * length
    start = np.asarray(storage.states["achieved_goal"][:n, 0]).reshape(-1, length, storage.state_fields["achieved_goal"].size)
    end = np.asarray(storage.next_states["achieved_goal"][:n, 0]).reshape(start.shape)
    moved = np.linalg.norm(end[:, -1] - start[:, 0], axis=1) > args.threshold
    shares = [f"{moved[i:i + 100].mean():.2f}" for i in range(0, len(moved), 100)]
    print(f"{len(moved)} episodes; share that moved the achieved goal > {args.threshold} per 100 episodes:")
    print(" ".join(shares))


if __name__ == "__main__":
    main()
