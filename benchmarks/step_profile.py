"""Where one env step's time goes while learning, with TQC+HER on FetchPush-v4 (the zoo's recipe by default): host time
in each part of the loop (acting, the env step, storing, sampling, the update) per env step, and, on CUDA, how long the
GPU is busy and its top kernels, for the timed steps only (after learning_starts and a warm-up that includes compiling).

    python benchmarks/step_profile.py --device cuda --compile --n-envs 16
    python benchmarks/step_profile.py --net-arch 64 64 --batch-size 64 --steps 200   # a small check on the CPU

Host times are wall times of the calls without synchronizing: on CUDA, a part that waits for the GPU (the copy of a
sampled batch, reading the actions) shows that wait as its own time.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections import defaultdict

import torch

from fetch_tqc import make_model, speed_env


def timed(totals: dict[str, float], name: str, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] += time.perf_counter() - start
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="FetchPush-v4")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--precision", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--n-envs", type=int, default=1)
    parser.add_argument("--storage-device", default=None)
    parser.add_argument("--net-arch", type=int, nargs="+", default=[512, 512, 512])
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=1600, help="timed env steps (all envs together)")
    parser.add_argument("--warmup", type=int, default=160)
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--kernels", type=int, default=15, help="CUDA: how many of the top kernels to list")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    settings = argparse.Namespace(lr=1e-3, gamma=0.95, tau=0.05, gradient_steps=1, normalize=False, clip_target=False,
                                  squash_eps=0.0, **vars(args))
    model = make_model("herl", speed_env(settings), 0, settings)
    model.learn(args.learning_starts + args.warmup)
    totals: dict[str, float] = defaultdict(float)
    env, buffer = model.env, model.replay_buffer
    model._collect_actions = timed(totals, "act", model._collect_actions)
    env.step = timed(totals, "env step", env.step)
    buffer.add = timed(totals, "store", buffer.add)
    buffer.sample = timed(totals, "sample", buffer.sample)
    model._update = timed(totals, "update", model._update)
    cuda = model.device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.profiler.profile(activities=activities) if cuda else contextlib.nullcontext() as prof:
        model.learn(args.steps, reset_num_timesteps=False)
        if cuda:
            torch.cuda.synchronize()
    wall = time.perf_counter() - start
    per_step = 1e3 / args.steps
    print(f"{args.steps} env steps in {wall:.2f} s: {args.steps / wall:.1f} env steps/s, {wall * per_step:.3f} ms each "
          f"({args.n_envs} env(s), {model._n_updates} updates so far, {model.device}, compile={args.compile})")
    print("| part | host ms per env step | share of wall |")
    print("|---|---|---|")
    for name, seconds in [*totals.items(), ("rest (loop, callbacks, logging)", wall - sum(totals.values()))]:
        print(f"| {name} | {seconds * per_step:.3f} | {seconds / wall:.0%} |")
    if cuda:
        events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA or
                  getattr(e, "self_device_time_total", 0) > 0]
        busy = sum(getattr(e, "self_device_time_total", 0) for e in events) / 1e6
        print(f"GPU busy {busy:.2f} s of {wall:.2f} s ({busy / wall:.0%}); {busy * per_step:.3f} ms per env step")
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=args.kernels, max_name_column_width=60))


if __name__ == "__main__":
    main()
