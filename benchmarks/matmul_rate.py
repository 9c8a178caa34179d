"""How fast this CPU multiplies the matrices of an update, in one process run: float32 through PyTorch's own op
(MKL), float32 through oneDNN (herl's path on AMD processors with AVX-512, herl.nn.gemm), bfloat16, and float32
through JAX's XLA when JAX is installed (the speed peer SBX's path).

Times the op that dominates a TQC update, each critic's hidden-to-hidden layer on a batch of rows, ``(critics,
batch, width) x (critics, width, width)``, and prints ms per op, multiply-adds per second and each path's speed
against PyTorch's float32, for each ``--width``. The paths take turns, so load on the machine affects all of them.
With ``--threads 1`` the process is pinned to one core (``--core``) and JAX held to one thread (XLA_FLAGS set before
it is imported): unpinned, XLA's products used a second core despite that flag, even waited for one by one.

``--layers`` times instead one ensemble layer (2 members, ReLU) forward and backward through herl.nn.gemm, PyTorch's
path against oneDNN's, for products from 256x32x64 to 512x256x256 (rows x inner x outer): where oneDNN's path starts
to pay, which sets ``herl.nn.gemm.MIN_MULTIPLY_ADDS``.

Usage::

    python benchmarks/matmul_rate.py --width 256 512 --batch 256 --threads 1
    python benchmarks/matmul_rate.py --layers --threads 1
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch


def ms_per_op(op: Callable[[], object], repeats: int) -> float:
    op()
    start = time.perf_counter()
    for _ in range(repeats):
        result = op()
    if hasattr(result, "block_until_ready"):
        result.block_until_ready()
    return (time.perf_counter() - start) / repeats * 1e3


def paths(critics: int, batch: int, width: int) -> dict[str, Callable[[], object]]:
    a, w = torch.randn(critics, batch, width), torch.randn(critics, width, width)
    a16, w16 = a.to(torch.bfloat16), w.to(torch.bfloat16)
    linear = torch.ops.mkldnn._linear_pointwise
    wt = [w[i].t() for i in range(critics)]
    found = {
        "float32 (PyTorch)": lambda: torch.bmm(a, w),
        "float32 (oneDNN)": lambda: [linear(a[i], wt[i], None, "none", [], "") for i in range(critics)],
        "bfloat16 (PyTorch)": lambda: torch.bmm(a16, w16),
    }
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return found
    product = jax.jit(lambda x, y: jnp.einsum("cbi,cio->cbo", x, y))
    ja, jw = jnp.asarray(a.numpy()), jnp.asarray(w.numpy())
    found["float32 (JAX)"] = lambda: product(ja, jw)
    return found


def layers(repeats: int, rounds: int) -> None:
    from herl.nn import gemm

    print("| rows x inner x outer | PyTorch µs | oneDNN µs | PyTorch / oneDNN |\n|---|---|---|---|")
    for rows in (256, 512):
        for inner, outer in [(32, 64), (64, 64), (64, 128), (128, 128), (32, 256), (256, 25), (128, 256), (256, 256)]:
            x = torch.randn(rows, inner, requires_grad=True)
            w = torch.randn(2, inner, outer, requires_grad=True)
            bias = torch.randn(2, 1, outer, requires_grad=True)

            def step() -> None:
                gemm.baddbmm(bias, x.expand(2, rows, inner), w, relu=True).sum().backward()

            times: dict[str, list[float]] = {"aten": [], "onednn": []}
            minimum, gemm.MIN_MULTIPLY_ADDS = gemm.MIN_MULTIPLY_ADDS, 0
            try:
                for _ in range(rounds):
                    for backend in times:
                        gemm.set_cpu_backend(backend)
                        times[backend].append(ms_per_op(step, repeats) * 1e3)
            finally:
                gemm.MIN_MULTIPLY_ADDS = minimum
                gemm.set_cpu_backend("auto")
            aten, onednn = (sorted(t)[len(t) // 2] for t in times.values())
            print(f"| {rows}x{inner}x{outer} | {aten:.0f} | {onednn:.0f} | {aten / onednn:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--critics", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="turns of each path; the median is reported")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--core", type=int, default=0, help="the CPU core the process is pinned to with --threads 1")
    parser.add_argument("--layers", action="store_true", help="time ensemble layers through herl.nn.gemm instead")
    args = parser.parse_args()
    if args.threads == 1:
        os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
        os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(args.threads)
    if args.layers:
        return layers(args.repeats, args.rounds)
    cores = sorted(os.sched_getaffinity(0))
    print(f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} "
          f"thread(s) on core(s) {cores}, batch {args.batch}, {args.critics} critics")
    print("| width | path | ms | G multiply-adds/s | against float32 (PyTorch) |\n|---|---|---|---|---|")
    for width in args.width:
        ops = paths(args.critics, args.batch, width)
        times: dict[str, list[float]] = {name: [] for name in ops}
        for _ in range(args.rounds):
            for name, op in ops.items():
                times[name].append(ms_per_op(op, args.repeats))
        medians = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
        for name, ms in medians.items():
            rate = args.critics * args.batch * width * width / (ms * 1e-3) / 1e9
            print(f"| {width} | {name} | {ms:.3f} | {rate:.0f} | {medians['float32 (PyTorch)'] / ms:.2f}x |")


if __name__ == "__main__":
    main()
