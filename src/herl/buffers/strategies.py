"""Goal selection strategies for hindsight relabeling (Andrychowicz et al. 2017, section 4.5)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np


class GoalSelectionStrategy(Enum):
    """Which achieved goal replaces the desired goal of a relabeled transition.

    FUTURE: an achieved goal of the same episode from the transition's own next state onward.
    FINAL: the achieved goal of the episode's last state.
    EPISODE: an achieved goal of any next state of the same episode.
    RANDOM: an achieved goal of any state of any complete episode in the buffer.
    """

    FUTURE = 0
    FINAL = 1
    EPISODE = 2
    RANDOM = 3


KEY_TO_GOAL_STRATEGY: dict[str, GoalSelectionStrategy] = {
    "future": GoalSelectionStrategy.FUTURE,
    "final": GoalSelectionStrategy.FINAL,
    "episode": GoalSelectionStrategy.EPISODE,
    "random": GoalSelectionStrategy.RANDOM,
}


@dataclass(frozen=True)
class RelabelMix:
    """Which goals the transitions of a sampled batch get: a fraction k/(k+1) is relabeled (k = ``n_sampled_goal``);
    of those, a binomial ``desired_goal_share`` gets the desired goal of a transition drawn from the whole buffer
    (the "actual" goals of ProtoGE's "future + actual" relabeling, Pitis, Chan & Ba, RLDM 2019), the rest an achieved
    goal chosen by ``strategy``. The HER buffer's ``n_sampled_goal``, ``goal_selection_strategy`` and
    ``desired_goal_share``, checked once."""

    n_sampled_goal: int = 4
    """k, hindsight goals per real transition; 0 is plain replay."""
    strategy: GoalSelectionStrategy = GoalSelectionStrategy.FUTURE
    """Which achieved goal a relabeled transition gets."""
    desired_goal_share: float = 0.0
    """The share of the relabeled transitions given another stored transition's desired goal instead; 0: none, and no
    random number is drawn for it."""

    def __post_init__(self) -> None:
        if self.desired_goal_share and not self.n_sampled_goal:
            raise ValueError(f"desired_goal_share={self.desired_goal_share} is a share of the relabeled transitions, "
                             "and n_sampled_goal=0 relabels none: give n_sampled_goal >= 1, or desired_goal_share=0")

    @property
    def her_ratio(self) -> float:
        """The fraction of each batch that is relabeled, k/(k+1)."""
        return self.n_sampled_goal / (self.n_sampled_goal + 1)


def parse_strategy(strategy: GoalSelectionStrategy | str) -> GoalSelectionStrategy:
    """Accept the enum or its name in any case; reject anything else with the valid choices."""
    if isinstance(strategy, GoalSelectionStrategy):
        return strategy
    if isinstance(strategy, str) and strategy.lower() in KEY_TO_GOAL_STRATEGY:
        return KEY_TO_GOAL_STRATEGY[strategy.lower()]
    if isinstance(strategy, Enum) and strategy.name.lower() in KEY_TO_GOAL_STRATEGY:
        # a peer's enum, read by its member's name (SB3's and SB2's GoalSelectionStrategy.FUTURE, ...)
        return KEY_TO_GOAL_STRATEGY[strategy.name.lower()]
    raise ValueError(
        f"unknown goal_selection_strategy {strategy!r}: use one of {sorted(KEY_TO_GOAL_STRATEGY)} "
        "or a herl.GoalSelectionStrategy member"
    )


def uniform_integers(rng: np.random.Generator, low: np.ndarray | int, high: np.ndarray | int, size: int | None = None) -> np.ndarray:
    """Integers drawn uniformly from [low, high), elementwise: ``low + floor(u * (high - low))``.

    ``u`` is a 53-bit uniform double in [0, 1), so each of the m = high - low values has
    probability 1/m to within m / 2**53 (and ``u * m < m`` always holds in float64, so the draw
    never reaches ``high``). This is a floor, not a rounding: rounding ``u * (m - 1)`` is the
    bug that halves the end points' probability, which a peer library shipped. It costs about half of
    ``Generator.integers`` with array bounds, which shows in the sampler's budget.
    """
    span = high - low
    u = rng.random(len(span) if size is None else size)
    return low + (u * span).astype(np.int64)


def sample_goal_offsets(
    strategy: GoalSelectionStrategy,
    offsets: np.ndarray,
    lengths: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Pick, for each transition, the episode offset whose *next* achieved goal becomes the new goal.

    A transition at offset t of an episode of length L moved the agent to next state t (in
    0-based transition numbering); its next achieved goals are those of offsets 0..L-1, the last
    one being the episode's final state. FUTURE draws uniformly from t..L-1 (inclusive of t, so
    the transition's own outcome counts as a future goal, as in the paper), with integers drawn
    uniformly (see :func:`uniform_integers`).

    RANDOM is not episode-local; the buffer draws those goals itself.
    """
    if strategy is GoalSelectionStrategy.FUTURE:
        return uniform_integers(rng, offsets, lengths)
    if strategy is GoalSelectionStrategy.FINAL:
        return lengths - 1
    if strategy is GoalSelectionStrategy.EPISODE:
        return uniform_integers(rng, 0, lengths)
    raise ValueError(f"{strategy} picks goals across episodes, not by offset")


def relabel_count(batch_size: int, n_sampled_goal: int, rng: np.random.Generator) -> int:
    """How many of a batch's transitions get a hindsight goal.

    k sampled goals per real transition means a fraction k/(k+1) relabeled. Drawing the count
    binomially keeps that fraction exact in expectation for every batch size (SB3 truncates
    `int(ratio * batch_size)`, a small bias at small batches); k = 0 is plain replay.
    """
    if n_sampled_goal == 0:
        return 0
    return int(rng.binomial(batch_size, n_sampled_goal / (n_sampled_goal + 1)))
