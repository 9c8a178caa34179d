"""herl.compat.cpprb.HindsightReplayBuffer against cpprb's own HindsightReplayBuffer, same calls, one process.

The workload of buffer_throughput.py: state = observation (10) + achieved goal (3), goal 3, action 4,
episodes of 50 steps, sparse reward, capacity 1e6, 100k transitions added (500k rows stored, as
each transition is kept once and k = 4 times relabeled), strategy future. Both buffers are driven
by the same code; only the class differs. Reported, with and without prioritized replay:

- add: microseconds per added transition, ``add`` + ``on_episode_end`` included;
- sample: microseconds per ``sample(256)`` (and 1024), NumPy dicts out as cpprb returns them;

and cpprb's time over herl's (> 1: herl is faster). The machine may be shared, so the two
buffers' runs alternate and each figure is a median over repeats; by default the clock is the
process's CPU time, which other processes' load disturbs far less than wall time (--clock wall).

    python benchmarks/compat_cpprb.py              # full run (about two minutes)
    python benchmarks/compat_cpprb.py --quick      # 20k transitions, one fill each: a smoke test
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import torch
from buffer_throughput import ACT_DIM, CAPACITY, EPISODE, GOAL_DIM, K, OBS_DIM, make_episodes, sparse_reward

from herl.compat.cpprb import HindsightReplayBuffer as HerlHindsightReplayBuffer

STATE_DIM = OBS_DIM + GOAL_DIM
ENV_DICT = {"obs": {"shape": STATE_DIM}, "act": {"shape": ACT_DIM}, "next_obs": {"shape": STATE_DIM}}
BATCHES = (256, 1024)
SAMPLE_CALLS = 200  # per timing


def make_buffer(cls, prioritized: bool):
    return cls(
        CAPACITY, ENV_DICT, max_episode_len=EPISODE,
        reward_func=lambda s, a, g: sparse_reward(s[:, OBS_DIM:], g, {}),
        goal_func=lambda s: s[:, OBS_DIM:], goal_shape=(GOAL_DIM,),
        strategy="future", additional_goals=K, prioritized=prioritized,
    )


def fill(buffer, n_transitions: int, clock) -> float:
    """Add ``n_transitions`` in episodes of EPISODE steps, as a user's loop does; seconds per transition."""
    steps, actions, _ = make_episodes(1)
    goal = steps[0]["desired_goal"][0]
    act = actions[:, 0]
    add = buffer.add
    episodes = n_transitions // EPISODE
    start = clock()
    for _ in range(episodes):
        # the flat states are built in the loop, as a cpprb user builds them
        flat = [np.concatenate([s["observation"][0], s["achieved_goal"][0]]) for s in steps]
        for t in range(EPISODE):
            add(obs=flat[t], act=act[t], next_obs=flat[t + 1])
        buffer.on_episode_end(goal)
    return (clock() - start) / (episodes * EPISODE)


def time_samples(buffer, batch: int, clock) -> float:
    start = clock()
    for _ in range(SAMPLE_CALLS):
        buffer.sample(batch)
    return (clock() - start) / SAMPLE_CALLS


def compare(prioritized: bool, n_transitions: int, fills: int, sample_repeats: int, clock) -> dict[str, dict[str, float]]:
    """Median timings of both buffers, their runs interleaved so that load changes hit both alike."""
    classes = {"herl.compat.cpprb": HerlHindsightReplayBuffer, "cpprb": _cpprb_class()}
    times: dict[str, dict[str, list[float]]] = {name: {} for name in classes}
    buffers = {}
    for repeat in range(fills):
        order = list(classes) if repeat % 2 == 0 else list(classes)[::-1]
        for name in order:
            buffers[name] = None  # free the previous one first: two 1e6-row buffers at most
            buffers[name] = make_buffer(classes[name], prioritized)
            times[name].setdefault("add", []).append(fill(buffers[name], n_transitions, clock))
    for batch in BATCHES:
        for name in classes:
            buffers[name].sample(batch)  # warm-up
        for _ in range(sample_repeats):
            for name in classes:
                times[name].setdefault(f"sample {batch}", []).append(time_samples(buffers[name], batch, clock))
    result = {name: {key: statistics.median(values) * 1e6 for key, values in per.items()} for name, per in times.items()}
    for name, buffer in buffers.items():
        result[name]["stored"] = buffer.get_stored_size()
    return result


def _cpprb_class():
    from cpprb import HindsightReplayBuffer

    return HindsightReplayBuffer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20k transitions, one fill and 3 sampling repeats")
    parser.add_argument("--fills", type=int, default=3, help="fresh buffers filled per class (median kept)")
    parser.add_argument("--repeats", type=int, default=7, help=f"timings of {SAMPLE_CALLS} samples per class (median kept)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="process CPU time or wall time")
    args = parser.parse_args()
    n_transitions, fills, repeats = (20_000, 1, 3) if args.quick else (100_000, args.fills, args.repeats)
    torch.set_num_threads(1)
    report(n_transitions, fills, repeats, args.clock)


def report(n_transitions: int, fills: int, repeats: int, clock_name: str = "cpu") -> None:
    """Measure both buffers with and without PER and print the table and the ratios."""
    clock = time.process_time if clock_name == "cpu" else time.perf_counter
    print(f"# cpprb-compatible HER buffer ({platform.processor() or platform.machine()}, numpy {np.__version__}, "
          f"{clock_name} clock)")
    print(f"# {n_transitions} transitions added, capacity {CAPACITY}, episodes of {EPISODE}, future k={K}, "
          f"medians of {fills} fills and {repeats}x{SAMPLE_CALLS} samples\n")
    results = {prioritized: compare(prioritized, n_transitions, fills, repeats, clock) for prioritized in (False, True)}
    columns = ["add", *(f"sample {b}" for b in BATCHES)]
    print("| buffer | PER | stored | add µs/transition | " + " | ".join(f"{c} µs" for c in columns[1:]) + " |")
    print("|---|---|---|---|" + "---|" * (len(columns) - 1))
    for prioritized, by_name in results.items():
        for name, res in by_name.items():
            cells = " | ".join(f"{res[c]:.1f}" for c in columns)
            print(f"| {name} | {'yes' if prioritized else 'no'} | {res['stored']} | {cells} |")
    print("\ncpprb's time / herl's time (> 1: herl is faster)")
    for prioritized, by_name in results.items():
        ours, theirs = by_name["herl.compat.cpprb"], by_name["cpprb"]
        print(f"PER {'on ' if prioritized else 'off'}: " + ", ".join(f"{c} {theirs[c] / ours[c]:.2f}x" for c in columns))

if __name__ == "__main__":
    main()
