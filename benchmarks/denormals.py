"""Denormal floats and the speed of an update: the ``fetch_push`` preset's TQC, trained with and without
flushing denormals to zero, taking turns in one process.

Two identical models (same seed, same buffer) train side by side, blocks of ``--block`` updates each in turn, one
with ``torch.set_flush_denormal(True)`` (what ``learn`` and ``herl train`` do) and one without. Adam's moments
of weights that get no gradient decay into the denormal range after ~800 updates, and from then on the model
without flushing computes its Adam step, and any other op that meets them, at a fraction of the speed. Prints
each block's ms per update for both and their ratio, and the time of Adam's step alone in the last block.

Usage::

    python benchmarks/denormals.py --updates 3000 --block 250
"""

from __future__ import annotations

import argparse
import time

import torch

from herl.run.config import build_config
from herl.run.envs import make_training_env
from herl.run.presets import get_preset
from herl.run.train import build_model


def build(args: argparse.Namespace):
    preset = get_preset("fetch_push")
    config = build_config(algo="tqc", env=args.env, seed=0, goal_env=True, preset="fetch_push",
                          layers=[*preset.layers("tqc"), ("--set", {"learning_starts": args.collect})])
    model = build_model(config, make_training_env(config.env, dict(config.env_kwargs), 1))
    model.learn(args.collect)  # fills the buffer; no update before learning_starts
    return model


def adam_ms(model, repeats: int = 20) -> float:
    optimizer = model.optimizers["optimizer"]
    start = time.perf_counter()
    for _ in range(repeats):
        optimizer.step()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="FetchPush-v4")
    parser.add_argument("--updates", type=int, default=3000, help="updates per model")
    parser.add_argument("--block", type=int, default=250, help="updates per turn")
    parser.add_argument("--collect", type=int, default=1000, help="decisions collected before the updates")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)  # several threads: the workers keep the setting they started with
    models = {"flushed": build(args), "not flushed": build(args)}
    print(f"{args.env}, fetch_push preset's TQC, {torch.get_num_threads()} torch thread(s); ms per update")
    print("| updates | flushed | not flushed | ratio |\n|---|---|---|---|")
    done = 0
    while done < args.updates:
        times = {}
        for name, model in models.items():
            torch.set_flush_denormal(name == "flushed")
            start = time.perf_counter()
            model.train(args.block)
            times[name] = (time.perf_counter() - start) / args.block * 1e3
        done += args.block
        print(f"| {done} | {times['flushed']:.1f} | {times['not flushed']:.1f} | "
              f"{times['not flushed'] / times['flushed']:.2f} |", flush=True)
    adam = {}
    for name, model in models.items():
        torch.set_flush_denormal(name == "flushed")
        adam[name] = adam_ms(model)
    torch.set_flush_denormal(False)
    print(f"Adam's step after {done} updates: {adam['flushed']:.2f} ms flushed, {adam['not flushed']:.2f} ms not")


if __name__ == "__main__":
    main()
