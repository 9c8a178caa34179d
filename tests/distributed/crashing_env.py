"""Bit flipping whose process dies in the middle of an episode: a worker's actor killed while it plays one.

``tests.distributed.crashing_env:CrashingBits-v0`` (importable from the repository root, which Ray puts on its workers'
path). The process that makes the env with ``spare_pid`` (the test's own: its evaluations and env checks) never dies.

- ``crash="once"``: the first process past ``after_episodes`` episodes that claims the file ``trigger`` (renaming it
  to ``<trigger>.taken``, which only one process can do) SIGKILLs itself on the first step of its episode;
- ``crash="always"``: every process (but the spared one) dies on its first step while ``trigger`` exists.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import gymnasium

from herl.envs import BitFlippingEnv


class CrashingBits(BitFlippingEnv):
    def __init__(self, *, trigger: str = "", crash: str = "once", after_episodes: int = 0, spare_pid: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.trigger, self.crash, self.after_episodes, self.spare_pid = trigger, crash, after_episodes, spare_pid
        self.episodes = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.episodes += 1
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        if self.current_step == 0 and self._dies():
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)

    def _dies(self) -> bool:
        if not self.trigger or os.getpid() == self.spare_pid or self.episodes <= self.after_episodes:
            return False
        if self.crash == "always":
            return os.path.exists(self.trigger)
        try:
            os.rename(self.trigger, f"{self.trigger}.taken")
        except OSError:  # taken by another process, or not armed
            return False
        return True


if "CrashingBits-v0" not in gymnasium.envs.registry:
    gymnasium.register(id="CrashingBits-v0", entry_point=CrashingBits)
