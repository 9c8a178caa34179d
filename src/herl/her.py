"""The Stable-Baselines (SB2) HER namespace: ``from herl.her import HER, HERGoalEnvWrapper, ...``."""

from herl.compat.sb2 import HER, GoalSelectionStrategy, HERGoalEnvWrapper, HindsightExperienceReplayWrapper

__all__ = ["HER", "GoalSelectionStrategy", "HERGoalEnvWrapper", "HindsightExperienceReplayWrapper"]
