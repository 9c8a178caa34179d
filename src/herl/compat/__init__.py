"""The peers' HER interfaces, each a thin adapter over herl's one engine (:class:`herl.HerReplayBuffer`).

- :mod:`herl.compat.sb2`: Stable-Baselines' ``HER`` model wrapper and its env and buffer wrappers.
- :mod:`herl.compat.cpprb`: cpprb's ``HindsightReplayBuffer`` (flat states, relabeling at episode end).
- :mod:`herl.compat.rllte`: rllte's ``HerReplayStorage`` (torch tensors in, typed batches out).

``docs/migrating.md`` says, for each, which import line to change and what behaves better here.
"""

from herl.compat.cpprb import HindsightReplayBuffer
from herl.compat.rllte import HerReplayStorage
from herl.compat.sb2 import HER, HERGoalEnvWrapper, HindsightExperienceReplayWrapper

__all__ = ["HER", "HERGoalEnvWrapper", "HerReplayStorage", "HindsightExperienceReplayWrapper", "HindsightReplayBuffer"]
