"""Whether each preset still trains bit for bit as before: fingerprints of its first decisions, compared across trees.

For every preset herl ships, ``herl train --preset NAME`` runs its first 3,000 decisions on the CPU with seed 0 (one
torch thread, so that the thread count never depends on how busy the machine is; no evaluations and no periodic
checkpoints, which never touch the training state, so that it is fast). Each run is its own process, the ``herl``
of the tree being fingerprinted first on ``PYTHONPATH``. The run's final checkpoint is then read as plain zip, JSON and
safetensors (no herl code, so both trees are read alike) and hashed with sha256 in parts:

- ``nets``: every network's weights and statistics;
- ``optimizers``: the optimizers' states (Adam's moments and steps) and settings;
- ``buffer``: the replay buffer's stored arrays (transitions, episode book-keeping, demonstrations) and generator;
- ``counters``: num_timesteps, updates, episodes, the algorithm's training state (entropy coefficient, ...);
- ``rng``: the model's numpy and torch generators and the exploration noise's;
- ``loop``: the loop's place in its envs (last observations, running returns, the envs' recorded actions) and the
  episode statistics.

Settings (the files' config entries) are not hashed: an option removed from a buffer's file changes its config but
not what was trained. ``fingerprint`` is the hash of the parts.

Usage::

    python benchmarks/preset_fingerprint.py                        # this tree's fingerprints
    python benchmarks/preset_fingerprint.py --ref HEAD             # HEAD's (a git worktree) and this tree's, compared
    python benchmarks/preset_fingerprint.py --ref HEAD --save-ref /tmp/before.json --ref-only   # HEAD's, kept
    python benchmarks/preset_fingerprint.py --against /tmp/before.json             # later: this tree against them
    python benchmarks/preset_fingerprint.py --presets fetch_push bit_flipping --all-algos

Presets whose env cannot be made here (panda-gym not installed) are reported as skipped.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load as load_arrays

REPO = Path(__file__).resolve().parent.parent
PARTS = ("nets", "optimizers", "buffer", "counters", "rng", "loop")
# The archive header's entries that say who wrote a file, not what it holds.
HEADER = frozenset({"format", "kind", "format_version", "herl_version", "system_info"})


def digest(values: Any) -> str:
    """sha256 of ``values``: arrays by name, dtype, shape and bytes, the rest as sorted JSON."""
    h = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, np.ndarray):
            h.update(f"array {value.dtype.str} {value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, dict):
            for key in sorted(value):
                h.update(f"key {key}".encode())
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            h.update(f"list {len(value)}".encode())
            for item in value:
                feed(item)
        else:
            h.update(json.dumps(value, sort_keys=True).encode())

    feed(values)
    return h.hexdigest()


def read(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(meta, arrays)`` of a herl archive, read without herl."""
    with zipfile.ZipFile(path) as archive:
        meta = json.loads(archive.read("meta.json"))
        arrays = load_arrays(archive.read("arrays.safetensors"))
    return {k: v for k, v in meta.items() if k not in HEADER}, arrays


def checkpoint_parts(checkpoint: Path) -> dict[str, str]:
    """The hashed parts of a ``herl train`` checkpoint folder (model.zip, replay_buffer.zip, state.zip)."""
    model_meta, model = read(checkpoint / "model.zip")
    buffer_meta, buffer = read(checkpoint / "replay_buffer.zip")
    state_meta, state = read(checkpoint / "state.zip")
    pick = lambda arrays, *prefixes: {k: v for k, v in arrays.items() if k.startswith(prefixes)}  # noqa: E731
    return {
        "nets": digest(pick(model, "nets/")),
        "optimizers": digest([pick(model, "optim/"), model_meta.get("optimizers")]),
        "buffer": digest([buffer, buffer_meta.get("rng_state"), buffer_meta.get("class")]),
        "counters": digest([model_meta.get("counters"), model_meta.get("training_state"), state_meta.get("step"),
                            state_meta.get("scalars")]),
        "rng": digest([model_meta.get("rng_state"), pick(model, "torch_rng"), model_meta.get("action_noise_state"),
                       state_meta.get("noise")]),
        "loop": digest([pick(model, "loop/"), state, state_meta.get("envs"), state_meta.get("ep_info_buffer"),
                        state_meta.get("ep_success_buffer"), state_meta.get("goal_moved_history")]),
    }


def presets_of(tree: Path) -> dict[str, dict[str, Any]]:
    """The presets a tree ships, read from its TOML files: name -> ``{"envs", "algo", "algos"}``."""
    out = {}
    for path in sorted((tree / "src" / "herl" / "presets").glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        out[path.stem] = {"envs": list(data.get("envs", [])), "algo": data["algo"],
                          "algos": sorted(data.get("algos", {}))}
    return out


def registered_envs() -> list[str]:
    """The env ids gymnasium knows here, herl's and gymnasium-robotics' (and panda-gym's, where installed) included."""
    import contextlib
    import importlib

    import gymnasium

    for module in ("herl.envs", "gymnasium_robotics", "panda_gym"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    return list(gymnasium.registry)


def env_for(name: str, presets: dict[str, dict[str, Any]], ids: list[str]) -> str | None:
    """The newest registered env id a preset's patterns match; a ``*_demos`` preset (made for ``--preset`` alone, with
    no patterns) takes the env of the preset it extends."""
    patterns = presets[name]["envs"] or presets.get(name.removesuffix("_demos"), {}).get("envs", [])
    found = [i for i in ids if any(fnmatch.fnmatchcase(i, p) for p in patterns)]
    version = lambda i: int(m.group(1)) if (m := re.search(r"-v(\d+)$", i)) else -1  # noqa: E731
    return max(found, key=version) if found else None


def run_one(tree: Path, name: str, algo: str, env_id: str, *, decisions: int, seed: int, work: Path) -> dict[str, Any]:
    """Train ``name``'s first ``decisions`` with ``tree``'s herl (its own process) and fingerprint the run."""
    run_dir = work / f"{name}_{algo}"
    command = [sys.executable, "-m", "herl", "train", "--preset", name, "--algo", algo, "--env", env_id,
               "--timesteps", str(decisions), "--seed", str(seed), "--threads", "1", "--device", "cpu",
               "--set", "eval.freq=0", "--set", "checkpoint.freq=0", "--progress", "off", "--run-dir", str(run_dir)]
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "CUDA_VISIBLE_DEVICES": ""}
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True)
    seconds = round(time.perf_counter() - start, 1)
    if done.returncode:
        return {"algo": algo, "env": env_id, "error": done.stderr.strip()[-2000:], "seconds": seconds}
    seed_dir = run_dir / f"seed_{seed}"
    latest = json.loads((seed_dir / "checkpoints" / "latest.json").read_text())
    parts = checkpoint_parts(seed_dir / "checkpoints" / latest["path"])
    return {"algo": algo, "env": env_id, "step": latest["step"], "fingerprint": digest([parts[p] for p in PARTS]),
            "parts": parts, "seconds": seconds}


def fingerprint_tree(tree: Path, label: str, args: argparse.Namespace, ids: list[str]) -> dict[str, Any]:
    presets = presets_of(tree)
    names = args.presets or list(presets)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="herl-fingerprint-") as tmp:
        for name in names:
            if name not in presets:
                results[name] = {"skipped": f"{label} has no preset {name!r}"}
                continue
            env_id = env_for(name, presets, ids)
            algos = [presets[name]["algo"]]
            if args.all_algos:
                algos = sorted({*algos, *presets[name]["algos"]})
            for algo in algos:
                key = name if algo == presets[name]["algo"] else f"{name} [{algo}]"
                if env_id is None:
                    results[key] = {"algo": algo, "skipped": f"no env here matches {presets[name]['envs']} "
                                                             "(its package is not installed)"}
                else:
                    results[key] = run_one(tree, name, algo, env_id, decisions=args.decisions, seed=args.seed,
                                           work=Path(tmp))
                print(f"  {label}: {key}: {describe(results[key])}", file=sys.stderr, flush=True)
    return {"tree": label, "commit": commit_of(tree), "decisions": args.decisions, "seed": args.seed,
            "presets": results}


def describe(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"skipped ({result['skipped']})"
    if "error" in result:
        return f"FAILED after {result['seconds']} s: {result['error'].splitlines()[-1] if result['error'] else ''}"
    return (f"{result['fingerprint'][:16]} ({result['algo']} on {result['env']}, step {result['step']}, "
            f"{result['seconds']} s)")


def commit_of(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return done.stdout.strip() + (" + uncommitted changes" if dirty else "")


def compare(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Print per preset whether ``after`` trained as ``before`` did; True when every preset run in both is identical."""
    print(f"before: {before['tree']} ({before['commit']})\nafter:  {after['tree']} ({after['commit']})")
    if (before["decisions"], before["seed"]) != (after["decisions"], after["seed"]):
        raise SystemExit(f"the fingerprints are of {before['decisions']:,} decisions with seed {before['seed']} and "
                         f"{after['decisions']:,} with seed {after['seed']}: run with the same --decisions and --seed")
    print(f"{before['decisions']:,} decisions, seed {before['seed']}")
    same = True
    for key in sorted(set(before["presets"]) | set(after["presets"])):
        b, a = before["presets"].get(key), after["presets"].get(key)
        if b is None or a is None or "fingerprint" not in b or "fingerprint" not in a:
            why = next((r.get("skipped") or "run failed" for r in (b, a) if r is not None and "fingerprint" not in r),
                       "not run in both")
            print(f"  {key:34} not compared: {why}")
            continue
        if b["fingerprint"] == a["fingerprint"]:
            print(f"  {key:34} identical    {a['fingerprint'][:16]}")
        else:
            same = False
            parts = [p for p in PARTS if b["parts"][p] != a["parts"][p]]
            print(f"  {key:34} DIFFERS      {b['fingerprint'][:16]} -> {a['fingerprint'][:16]} ({', '.join(parts)})")
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", metavar="GITREF",
                        help="also fingerprint this commit's tree (a git worktree) and compare")
    parser.add_argument("--against", metavar="FILE", help="compare with fingerprints saved by --save or --save-ref")
    parser.add_argument("--save", metavar="FILE", help="write this tree's fingerprints (JSON)")
    parser.add_argument("--save-ref", metavar="FILE", help="write the --ref tree's fingerprints (JSON)")
    parser.add_argument("--ref-only", action="store_true",
                        help="with --save-ref: fingerprint the --ref tree only (a baseline to compare with later)")
    parser.add_argument("--tree", type=Path, default=REPO,
                        help="the tree to fingerprint (default: this one), e.g. a worktree holding only some changes")
    parser.add_argument("--presets", nargs="+", metavar="NAME", help="these presets only (default: every one)")
    parser.add_argument("--all-algos", action="store_true",
                        help="every [algos.NAME] table of each preset, not only its default algorithm")
    parser.add_argument("--decisions", type=int, default=3_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.ref and args.against:
        parser.error("give --ref or --against, not both")
    if args.ref_only and not (args.ref and args.save_ref):
        parser.error("--ref-only needs --ref and --save-ref")
    ids = registered_envs()
    reference = json.loads(Path(args.against).read_text()) if args.against else None
    if args.ref:
        with tempfile.TemporaryDirectory(prefix="herl-ref-") as tmp:
            worktree = Path(tmp) / "tree"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), args.ref],
                           check=True, capture_output=True)
            try:
                reference = fingerprint_tree(worktree, args.ref, args, ids)
            finally:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)],
                               capture_output=True)
        if args.save_ref:
            Path(args.save_ref).write_text(json.dumps(reference, indent=1))
        if args.ref_only:
            return
    label = "working tree" if args.tree.resolve() == REPO else str(args.tree)
    current = fingerprint_tree(args.tree.resolve(), label, args, ids)
    if args.save:
        Path(args.save).write_text(json.dumps(current, indent=1))
    if reference is None:
        for key, result in current["presets"].items():
            print(f"{key:34} {result.get('fingerprint') or describe(result)}")
        return
    if not compare(reference, current):
        sys.exit(1)


if __name__ == "__main__":
    main()
