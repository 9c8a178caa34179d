"""How fast this CPU multiplies the matrices of an update, bfloat16 against float32, in one process run.

Times ``torch.bmm`` of a batch of rows through each critic's hidden-to-hidden layer, ``(critics, batch, width) x
(critics, width, width)``, the op that dominates a TQC update, and prints ms per op, multiply-adds per second and
the bfloat16 / float32 ratio, for each ``--width``. The two dtypes take turns, so load on the machine affects both.

Usage::

    python benchmarks/matmul_rate.py --width 512 768 1024 --batch 256 --threads 1
"""

from __future__ import annotations

import argparse
import time

import torch


def ms_per_op(a: torch.Tensor, w: torch.Tensor, repeats: int) -> float:
    torch.bmm(a, w)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.bmm(a, w)
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, nargs="+", default=[512])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--critics", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="turns of each dtype; the median is reported")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), batch {args.batch}, {args.critics} critics")
    print("| width | float32 ms | bfloat16 ms | bfloat16 G multiply-adds/s | bfloat16 / float32 |\n|---|---|---|---|---|")
    for width in args.width:
        a = torch.randn(args.critics, args.batch, width)
        w = torch.randn(args.critics, width, width)
        times: dict[torch.dtype, list[float]] = {torch.float32: [], torch.bfloat16: []}
        for _ in range(args.rounds):
            for dtype in times:
                times[dtype].append(ms_per_op(a.to(dtype), w.to(dtype), args.repeats))
        f32, bf16 = (sorted(t)[len(t) // 2] for t in times.values())
        rate = args.critics * args.batch * width * width / (bf16 * 1e-3) / 1e9
        print(f"| {width} | {f32:.2f} | {bf16:.2f} | {rate:.0f} | {f32 / bf16:.2f}x faster |")


if __name__ == "__main__":
    main()
