"""How often the stored episodes of a run lifted their achieved goal (FetchPickAndPlace's block).

Reads a saved ``HerReplayBuffer`` (a checkpoint's ``replay_buffer.zip``) and, for the episodes that start in a range
of rows (rows are decisions for a single-env run), prints the share whose achieved goal's last coordinate (the
height) rose 2 cm and 5 cm above its start at some step, and the share whose rises summed over steps reach the same
heights (what a pushed block's jitter inflates; see docs/research/fetch.md, "Episodes that lifted the block").

Usage::

    python benchmarks/lift_share.py runs/pnpl_s0/seed_0/checkpoints/step_000000059500/replay_buffer.zip \
        --rows 42500 59500
"""

from __future__ import annotations

import argparse

import numpy as np

from herl.buffers.her import HerReplayBuffer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("buffer", help="a saved HerReplayBuffer (replay_buffer.zip)")
    parser.add_argument("--rows", type=int, nargs=2, default=(0, None), metavar=("FIRST", "END"),
                        help="count the episodes that start in rows [FIRST, END) (default: all)")
    args = parser.parse_args()
    storage = HerReplayBuffer.load(args.buffer, compute_reward=lambda a, d, info=None: np.zeros(len(a))).storage
    height = np.asarray(storage.states["achieved_goal"])[..., -1].reshape(-1).astype(np.float64)
    next_height = np.asarray(storage.next_states["achieved_goal"])[..., -1].reshape(-1).astype(np.float64)
    starts = np.asarray(storage.ep_start).reshape(-1)
    live = storage.arrays()["is_transition"].reshape(-1)
    first, end = args.rows
    highest, summed = [], []
    for start in np.unique(starts[live]):
        if start < first or (end is not None and start >= end):
            continue
        rows = np.flatnonzero(live & (starts == start))
        rises = next_height[rows] - height[rows]
        highest.append(max(np.cumsum(rises).max(), 0.0))
        summed.append(np.maximum(rises, 0.0).sum())
    highest, summed = np.array(highest), np.array(summed)
    print(f"{len(highest)} episodes; rose >= 2 cm: {(highest >= 0.02).mean():.3f}, >= 5 cm: {(highest >= 0.05).mean():.3f}; "
          f"summed rises >= 2 cm: {(summed >= 0.02).mean():.3f}, >= 5 cm: {(summed >= 0.05).mean():.3f}")


if __name__ == "__main__":
    main()
