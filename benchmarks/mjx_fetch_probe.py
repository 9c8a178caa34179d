"""Can MuJoCo MJX step gymnasium-robotics' Fetch arm fast enough to train on? Physics steps per second of the FetchPush
model (the real arm, its mocap-welded gripper, the table and the block) under ``jax.vmap``, at each ``--n-envs``.

MJX refuses the model as it ships (margins on plane-mesh pairs are not implemented), and mesh-mesh contacts are what
makes MJX slow, so the probe first keeps contacts to primitives: every mesh geom (the arm's links, seen but not
touched) stops colliding, and margins and gaps are zeroed. What still collides is what pushing needs: the fingers
(boxes), the block, the table and the floor. One Fetch env step is 20 physics steps of 2 ms, so env steps per second
are the printed rate / 20.

    python benchmarks/mjx_fetch_probe.py --device cuda --n-envs 1024 4096
    python benchmarks/mjx_fetch_probe.py --n-envs 1 --steps 5            # on the CPU (slow: seconds per step)

Measured on a 2-core AMD EPYC (CPU, 2026-11-27, ``--n-envs 1 64 --steps 3``): 15.6 s to compile and 8.5 ms per
physics step with 1 env; 22.4 s and 2.93 s per step with 64 envs, so the CPU cannot train on it; the GPU figure
decides whether herl builds a Fetch-arm task on MJX.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def fetch_push_model():
    """The model herl's MJXFetchPush steps (herl.batched.mjx_fetch), and the names of the geoms that still collide."""
    import mujoco

    from herl.batched.mjx_fetch import fetch_push_model as filtered

    model = filtered()
    colliding = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, i) or f"geom {i}"
                 for i in range(model.ngeom) if model.geom_contype[i] or model.geom_conaffinity[i]]
    return model, colliding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (JAX's name for the platform: gpu)")
    parser.add_argument("--n-envs", type=int, nargs="+", default=[1])
    parser.add_argument("--steps", type=int, default=50, help="physics steps timed per n_envs")
    args = parser.parse_args()
    import jax
    import numpy as np
    from mujoco import mjx

    device = jax.devices("gpu" if args.device == "cuda" else args.device)[0]
    model, colliding = fetch_push_model()
    print(f"# FetchPush model: nq {model.nq}, nv {model.nv}, {model.ngeom} geoms, colliding: {colliding}; "
          f"timestep {model.opt.timestep} s; JAX {jax.__version__} on {device}", flush=True)
    mx = mjx.put_model(model, device=device)
    step = jax.jit(jax.vmap(mjx.step, in_axes=(None, 0)))
    print("| n_envs | compile s | ms per physics step | physics steps/s | Fetch env steps/s |")
    print("|---|---|---|---|---|")
    for n in args.n_envs:
        data = jax.device_put(jax.vmap(lambda _: mjx.make_data(mx))(np.arange(n)), device)
        start = time.perf_counter()
        data = step(mx, data)
        jax.block_until_ready(data.qpos)
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(args.steps):
            data = step(mx, data)
        jax.block_until_ready(data.qpos)
        per_step = (time.perf_counter() - start) / args.steps
        finite = bool(np.isfinite(np.asarray(data.qpos)).all())
        print(f"| {n} | {compile_s:.1f} | {per_step * 1e3:.2f} | {n / per_step:,.0f} | {n / per_step / 20:,.0f} |"
              + ("" if finite else " (NaN in qpos)"), flush=True)


if __name__ == "__main__":
    main()
