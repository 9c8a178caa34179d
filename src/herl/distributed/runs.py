"""What a ``herl train`` run with workers needs of Ray: the check of the CPUs for its actors, and the learner they
feed. The command line hands :data:`WORKER_LEARNER` to :func:`herl.run.train.start_run` and ``resume_run``; the run
floor never imports this one (nor Ray)."""

from __future__ import annotations

import functools
from typing import Any

from herl.distributed.cluster import check_worker_cpus, local_cpus, require_ray
from herl.distributed.workers import WorkerStats, learn
from herl.run.config import TrainConfig
from herl.run.train import Learner, WorkerLearner


def check_workers(workers: int) -> None:
    """Refuse more workers than the Ray the learner will use has CPUs for: this process's, else a local one."""
    ray = require_ray("training with workers")
    available = ray.cluster_resources().get("CPU", 0) if ray.is_initialized() else local_cpus()
    check_worker_cpus(workers, available)


def worker_learner(model: Any, config: TrainConfig, callback: Any) -> tuple[Learner, Any]:
    """The learner fed by ``config.workers`` Ray actors, and what to add to the run's notes once it has trained."""
    stats = WorkerStats()

    def notes() -> list[str]:
        if not stats.lost_episodes:
            return []
        return [f"workers: {stats.actor_deaths} time(s) an actor's process died and Ray started it again; the "
                f"{stats.lost_episodes} episode(s) they were playing were dropped (none stored in part)"]

    return functools.partial(learn, model, env_id=config.env, env_kwargs=dict(config.env_kwargs),
                             workers=config.workers, broadcast_every=config.broadcast_every, stats=stats,
                             eval_hook=callback.use_remote_evaluate if config.eval.on_workers else None), notes


WORKER_LEARNER = WorkerLearner(check=check_workers, learner=worker_learner)
