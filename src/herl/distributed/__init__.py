"""Beyond one process, on Ray: many-worker collection (``herl train --workers N``) and seed and hyperparameter
sweeps (``herl sweep``, Ray Tune with Optuna's sampler).

Ray is an optional extra (``pip install "herl[ray]"``, with Optuna). Nothing else in herl imports this package: the
command line imports it, lazily, only when ``workers > 0`` or ``herl sweep`` is used (handing
:data:`herl.distributed.runs.WORKER_LEARNER` to the runs it starts), so a plain training run never imports Ray. See
docs/scaling.md.
"""

from herl.distributed.cluster import ray_session, require_ray

__all__ = ["ray_session", "require_ray"]
