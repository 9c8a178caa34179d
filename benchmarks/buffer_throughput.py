"""HER buffer throughput: herl against Stable-Baselines3's HerReplayBuffer and cpprb's HindsightReplayBuffer.

One process, one workload for all: observation 10 floats, goals 3, action 4, episodes of 50 steps,
sparse reward -(||ag - g|| > 0.05), capacity 1e6, 100k transitions stored, strategy future with
k = 4. Reports microseconds per added transition (n_envs = 1 and 8), per sample (batch 256 and
1024, torch tensors out) and bytes per stored transition, with herl's ratio to each peer.

    python benchmarks/buffer_throughput.py            # full run (a few minutes)
    python benchmarks/buffer_throughput.py --quick    # 20k transitions, for a smoke test

A second table (skip with --no-cpprb-interface) runs benchmarks/compat_cpprb.py: herl's cpprb-style
HindsightReplayBuffer against cpprb's own, with the same calls, prioritized replay off and on.

Peers come from the `bench` extra: pip install -e ".[bench]".
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from herl.buffers import HerReplayBuffer

OBS_DIM, GOAL_DIM, ACT_DIM, EPISODE = 10, 3, 4, 50
CAPACITY = 1_000_000
K = 4


def sparse_reward(achieved_goal, desired_goal, info):
    return -(np.linalg.norm(achieved_goal - desired_goal, axis=-1) > 0.05).astype(np.float32)


OBS_SPACE = spaces.Dict(
    observation=spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
    achieved_goal=spaces.Box(-np.inf, np.inf, (GOAL_DIM,), np.float32),
    desired_goal=spaces.Box(-np.inf, np.inf, (GOAL_DIM,), np.float32),
)
ACT_SPACE = spaces.Box(-1, 1, (ACT_DIM,), np.float32)


class _GoalEnv(gym.Env):
    """Only its spaces and compute_reward are used (SB3 asks its VecEnv for them)."""

    observation_space = OBS_SPACE
    action_space = ACT_SPACE

    def reset(self, *, seed=None, options=None):
        return OBS_SPACE.sample(), {}

    def step(self, action):
        return OBS_SPACE.sample(), -1.0, False, False, {}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return sparse_reward(achieved_goal, desired_goal, info)


def make_episodes(n_envs: int, seed: int = 0):
    """Pre-generated random rollouts, so that only the buffers are timed."""
    rng = np.random.default_rng(seed)
    states = {
        "observation": rng.standard_normal((EPISODE + 1, n_envs, OBS_DIM), dtype=np.float32),
        "achieved_goal": rng.standard_normal((EPISODE + 1, n_envs, GOAL_DIM), dtype=np.float32) * 0.05,
        "desired_goal": np.repeat(rng.standard_normal((1, n_envs, GOAL_DIM), dtype=np.float32) * 0.05, EPISODE + 1, 0),
    }
    steps = [{k: np.ascontiguousarray(v[t]) for k, v in states.items()} for t in range(EPISODE + 1)]
    actions = rng.uniform(-1, 1, (EPISODE, n_envs, ACT_DIM)).astype(np.float32)
    rewards = sparse_reward(states["achieved_goal"][1:], states["desired_goal"][1:], {})
    return steps, actions, rewards


def timed(fn: Callable[[], None], repeats: int) -> float:
    """Best of ``repeats`` timings of ``fn``, in seconds: on a shared machine noise only ever adds
    time, so the minimum is the most repeatable estimate (the advice of Python's timeit)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def array_bytes(obj, seen=None) -> int:
    """Bytes of every numpy array reachable from ``obj``'s attributes (dicts and lists included)."""
    seen = set() if seen is None else seen
    if isinstance(obj, np.ndarray):
        while obj.base is not None and isinstance(obj.base, np.ndarray):  # count views once, as their base
            obj = obj.base
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        # an object array's entries are pointers to Python objects that take memory of their own
        return obj.nbytes + (sum(len(x) * 64 + 64 for x in obj.flat if isinstance(x, dict)) if obj.dtype == object else 0)
    if isinstance(obj, dict):
        return sum(array_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(array_bytes(v, seen) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, (type, gym.Env, torch.device)):
        return sum(array_bytes(v, seen) for k, v in vars(obj).items() if k not in ("env", "observation_space", "action_space"))
    return 0


# --------------------------------------------------------------------------- the three buffers
class _SB3StyleRunner:
    """A buffer with SB3's add(obs, next_obs, action, reward, done, infos) and sample(batch)."""

    def __init__(self, buffer, n_envs: int):
        self.buffer = buffer
        self.not_done, self.done = np.zeros(n_envs, bool), np.ones(n_envs, bool)
        self.infos = [{} for _ in range(n_envs)]

    def add_episode(self, steps, actions, rewards):
        add, infos = self.buffer.add, self.infos
        for t in range(EPISODE):
            add(steps[t], steps[t + 1], actions[t], rewards[t], self.done if t == EPISODE - 1 else self.not_done, infos)

    def sample(self, batch: int):
        return self.buffer.sample(batch)


class HerlRunner(_SB3StyleRunner):
    def __init__(self, n_envs: int, optimize: bool = False):
        self.name = "herl (optimize_memory_usage)" if optimize else "herl"
        super().__init__(HerReplayBuffer(
            CAPACITY, OBS_SPACE, ACT_SPACE, device="cpu", n_envs=n_envs, n_sampled_goal=K,
            goal_selection_strategy="future", compute_reward=sparse_reward, optimize_memory_usage=optimize, seed=0,
        ), n_envs)

    def bytes_per_transition(self) -> float:
        # the shared layout spends one extra row per episode on its final state
        held = CAPACITY * EPISODE / (EPISODE + 1) if self.buffer.optimize_memory_usage else CAPACITY
        return array_bytes(self.buffer.storage) / held


class SB3Runner(_SB3StyleRunner):
    name = "SB3 HerReplayBuffer"

    def __init__(self, n_envs: int):
        from stable_baselines3 import HerReplayBuffer as SB3Her
        from stable_baselines3.common.vec_env import DummyVecEnv

        super().__init__(SB3Her(
            CAPACITY, OBS_SPACE, ACT_SPACE, env=DummyVecEnv([_GoalEnv] * n_envs), device="cpu", n_envs=n_envs,
            n_sampled_goal=K, goal_selection_strategy="future",
        ), n_envs)

    def bytes_per_transition(self) -> float:
        return array_bytes(self.buffer) / CAPACITY


class CpprbRunner:
    """cpprb relabels when an episode ends and stores the k copies; it takes one env's transitions
    per add call, so n_envs > 1 means n_envs calls. Its flat state is [observation, achieved_goal]."""

    name = "cpprb HindsightReplayBuffer"

    def __init__(self, n_envs: int):
        from cpprb import HindsightReplayBuffer

        state_dim = OBS_DIM + GOAL_DIM
        self.buffer = HindsightReplayBuffer(
            CAPACITY,
            {"obs": {"shape": state_dim}, "act": {"shape": ACT_DIM}, "next_obs": {"shape": state_dim}},
            max_episode_len=EPISODE,
            reward_func=lambda s, a, g: sparse_reward(s[:, OBS_DIM:], g, {}),
            goal_func=lambda s: s[:, OBS_DIM:],
            goal_shape=(GOAL_DIM,),
            additional_goals=K,
            prioritized=False,
        )
        self.n_envs = n_envs

    def add_episode(self, steps, actions, rewards):
        flat = [np.concatenate([s["observation"], s["achieved_goal"]], axis=-1) for s in steps]
        goal = steps[0]["desired_goal"]
        add = self.buffer.add
        for env in range(self.n_envs):
            for t in range(EPISODE):
                add(obs=flat[t][env], act=actions[t][env], next_obs=flat[t + 1][env])
            self.buffer.on_episode_end(goal[env])

    def sample(self, batch: int):
        out = self.buffer.sample(batch)
        return {k: torch.from_numpy(v) for k, v in out.items()}

    def bytes_per_transition(self) -> float:
        return float("nan")  # C++ storage: not introspectable from Python


# --------------------------------------------------------------------------- measurement
def measure(runners: list, n_envs: int, n_transitions: int, repeats: int) -> dict[str, dict[str, float]]:
    """Fill each buffer, then time them in interleaved rounds (each round times every buffer once),
    so that a burst of load on the shared machine hits all of them alike; the best round is kept."""
    steps, actions, rewards = make_episodes(n_envs)
    episodes = n_transitions // (EPISODE * n_envs)
    results: dict[str, dict[str, float]] = {}
    for runner in runners:
        start = time.perf_counter()
        for _ in range(episodes):
            # the flat copies that cpprb needs are made inside its add_episode, which is fair: a user
            # of cpprb builds them in the loop too
            runner.add_episode(steps, actions, rewards)
        results[runner.name] = {"add_us": (time.perf_counter() - start) / (episodes * EPISODE * n_envs) * 1e6,
                                "bytes": runner.bytes_per_transition()}
    n_calls = 200
    for batch in (256, 1024):
        for runner in runners:
            runner.sample(batch)  # warm-up
        best = {runner.name: float("inf") for runner in runners}
        for _ in range(repeats):
            for runner in runners:
                elapsed = timed(lambda: [runner.sample(batch) for _ in range(n_calls)], 1)
                best[runner.name] = min(best[runner.name], elapsed / n_calls * 1e6)
        for name, us in best.items():
            results[name][f"sample{batch}_us"] = us
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20k transitions instead of 100k")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds of sample timings (best kept)")
    parser.add_argument("--no-cpprb-interface", action="store_true",
                        help="skip the second table: herl.HindsightReplayBuffer against cpprb's, PER on and off")
    args = parser.parse_args()
    n_transitions = 20_000 if args.quick else 100_000
    torch.set_num_threads(1)

    print(f"# HER buffer throughput ({platform.processor() or platform.machine()}, torch {torch.__version__}, numpy {np.__version__})")
    print(f"# {n_transitions} transitions stored, capacity {CAPACITY}, episodes of {EPISODE}, future k={K}\n")
    rows = []
    for n_envs in (1, 8):
        runners = [HerlRunner(n_envs), HerlRunner(n_envs, optimize=True), SB3Runner(n_envs), CpprbRunner(n_envs)]
        results = measure(runners, n_envs, n_transitions, args.repeats)
        del runners  # ~1 GB of buffers
        for name, res in results.items():
            rows.append((n_envs, name, res))
    header = f"| n_envs | buffer | add µs/transition | sample 256 µs | sample 1024 µs | bytes/transition |"
    print(header)
    print("|" + "---|" * 6)
    for n_envs, name, res in rows:
        print(f"| {n_envs} | {name} | {res['add_us']:.2f} | {res['sample256_us']:.1f} | {res['sample1024_us']:.1f} | {res['bytes']:.0f} |")
    print()
    for n_envs in (1, 8):
        by_name = {name: res for n, name, res in rows if n == n_envs}
        ours = by_name["herl"]
        for peer in ("SB3 HerReplayBuffer", "cpprb HindsightReplayBuffer"):
            theirs = by_name[peer]
            print(
                f"n_envs={n_envs}: herl vs {peer}: add {theirs['add_us'] / ours['add_us']:.1f}x faster, "
                f"sample256 {theirs['sample256_us'] / ours['sample256_us']:.1f}x, sample1024 {theirs['sample1024_us'] / ours['sample1024_us']:.1f}x"
            )
        sb3_bytes = by_name["SB3 HerReplayBuffer"]["bytes"]
        for name in ("herl", "herl (optimize_memory_usage)"):
            print(f"n_envs={n_envs}: {name} bytes/transition = {by_name[name]['bytes'] / sb3_bytes:.0%} of SB3's")
    if not args.no_cpprb_interface:
        # the cpprb interface (herl.HindsightReplayBuffer) and cpprb with the same calls, PER off and on
        from compat_cpprb import report

        print()
        report(n_transitions, fills=1 if args.quick else 3, repeats=3 if args.quick else args.repeats)


if __name__ == "__main__":
    main()
