"""Ring storage of whole episodes from parallel environments: the memory under every herl buffer.

Rows are laid out as ``(rows, n_envs, ...)``: each environment owns one column and writes its
transitions there in order, so an episode is a contiguous (modulo wrap-around) run of rows in one
column and episodes of different environments never mix.

Two layouts:

* separate (``share_states=False``): row r holds a transition's state *and* its next state, as
  Stable-Baselines3 stores them.
* shared (``share_states=True``): row r holds state r and the transition r -> r+1; the next state
  of row r is state r+1. An episode of L transitions uses L+1 rows, the last one holding only its
  final state. Each state is stored once: about half the bytes for large observations.

Book-keeping per row: the episode it belongs to (a per-environment counter, so an episode that
starts where an old one started is still told apart), the episode's first row, and its length
(0 while the episode is still open). When a write lands on a row of an older episode, that whole
episode is retired at once: a partly overwritten episode must never be sampled, because its
future goals would come from another episode (SB3 #1542 family of bugs).

Sampling draws rows uniformly by rejection over the written window, which costs O(batch) instead
of scanning the whole buffer for valid rows (what makes SB3's HER sampling ~1 ms at 1e6 rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FieldSpec:
    """Shape (without the row and env axes) and dtype of one stored field."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def zeros(self, rows: int, n_envs: int) -> np.ndarray:
        return np.zeros((rows, n_envs, *self.shape), dtype=self.dtype)


class EpisodeStorage:
    """Episodes of ``n_envs`` environments in a ring of ``rows`` rows per environment.

    The add path is the hottest code in training after the networks, so it avoids numpy's fancy
    indexing (~0.8 µs a store) whenever every environment writes the same row ("lockstep": always
    with one env, and with synchronized episodes), and keeps per-step counters as Python ints.
    """

    def __init__(
        self,
        *,
        rows: int,
        n_envs: int,
        state_fields: dict[str, FieldSpec],
        transition_fields: dict[str, FieldSpec],
        share_states: bool,
    ) -> None:
        if n_envs < 1:
            raise ValueError(f"n_envs must be >= 1, got {n_envs}")
        if rows < 2:
            raise ValueError(
                f"the buffer holds {rows} row(s) per environment: give it a buffer_size of at least "
                f"2 * n_envs = {2 * n_envs}"
            )
        self.rows = rows
        self.n_envs = n_envs
        self.share_states = share_states
        self.state_fields = dict(state_fields)
        self.transition_fields = dict(transition_fields)
        self.states = {k: spec.zeros(rows, n_envs) for k, spec in self.state_fields.items()}
        self.next_states = (
            self.states if share_states else {k: spec.zeros(rows, n_envs) for k, spec in self.state_fields.items()}
        )
        self.transitions = {k: spec.zeros(rows, n_envs) for k, spec in self.transition_fields.items()}
        # Per row, for closed episodes: first row and length (0 for rows of no closed episode).
        self.ep_start = np.zeros((rows, n_envs), dtype=np.int64)
        self.ep_len = np.zeros((rows, n_envs), dtype=np.int64)
        # A row that starts a transition that may be sampled (closed or open episode).
        self.is_transition = np.zeros((rows, n_envs), dtype=bool)
        # The first row of each live closed episode, and how many envs have one in each row. Writes
        # advance through a column in order, so the first write into an old episode always lands on
        # its first row: checking one counter per add is enough to retire it whole.
        self.head = np.zeros((rows, n_envs), dtype=bool)
        self.heads = np.zeros(rows, dtype=np.int64)
        self.open_start = np.full(n_envs, -1, dtype=np.int64)
        self.open_began = np.zeros(n_envs, dtype=np.int64)  # value of n_adds when the open episode began
        self._min_began = 0
        self.n_adds = 0
        self.n_starting = n_envs  # envs whose next add starts an episode
        self.n_transitions = 0
        self.window = 0  # rows ever written in the fullest column: sampling draws below it
        self._pos = np.zeros(n_envs, dtype=np.int64)
        self._row = 0  # the common row while in lockstep
        self.lockstep = True
        self._envs = np.arange(n_envs)
        self._make_flat_views()

    # ------------------------------------------------------------------ views
    def _make_flat_views(self) -> None:
        """(rows * n_envs, ...) views: one flat index per (row, env), so a gather is one np.take."""
        flat = self.rows * self.n_envs
        self.flat_states = {k: v.reshape(flat, *v.shape[2:]) for k, v in self.states.items()}
        self.flat_next_states = {k: v.reshape(flat, *v.shape[2:]) for k, v in self.next_states.items()}
        self.flat_transitions = {k: v.reshape(flat, *v.shape[2:]) for k, v in self.transitions.items()}
        self._state_names = tuple(self.states)
        self._transition_names = tuple(self.transitions)
        self._flat_is_transition = self.is_transition.reshape(flat)
        self._flat_ep_len = self.ep_len.reshape(flat)
        self._flat_ep_start = self.ep_start.reshape(flat)

    def add_transition_field(self, name: str, spec: FieldSpec) -> None:
        """Add a per-transition field after construction (info keys are known at the first add)."""
        self.transition_fields[name] = spec
        self.transitions[name] = spec.zeros(self.rows, self.n_envs)
        self._make_flat_views()

    # ------------------------------------------------------------------ counters
    @property
    def pos(self) -> np.ndarray:
        """The row each environment writes next."""
        return np.full(self.n_envs, self._row, dtype=np.int64) if self.lockstep else self._pos.copy()

    @property
    def open_len(self) -> np.ndarray:
        """Transitions stored so far of each environment's open episode (0: none open)."""
        return np.where(self.open_start >= 0, self.n_adds - self.open_began, 0)

    @property
    def n_open(self) -> int:
        """Transitions of episodes that have not ended yet."""
        return int(self.open_len.sum())

    # ------------------------------------------------------------------ writing
    def add(
        self,
        states: Mapping[str, np.ndarray],
        next_states: Mapping[str, np.ndarray],
        transitions: Mapping[str, np.ndarray],
        done: np.ndarray,
    ) -> None:
        """Store one transition per environment; arrays are shaped (n_envs, ...), already validated.

        Only the storage's own field names are read from the mappings; extra keys are ignored.
        """
        rows_per_env = self.rows
        share = self.share_states
        if self.lockstep:
            # slices of the flat views: the cheapest store numpy offers (~190 ns a field)
            row = self._row
            nxt = row + 1 if row + 1 < rows_per_env else 0
            n = self.n_envs
            at, at_next = slice(row * n, row * n + n), slice(nxt * n, nxt * n + n)
            hit = self.heads[row] or (share and self.heads[nxt])
        else:
            rows = self._pos
            nxt = (rows + 1) % rows_per_env
            at, at_next = rows * self.n_envs + self._envs, nxt * self.n_envs + self._envs
            hit = self.heads[rows].any() or (share and self.heads[nxt].any())
        if self.n_starting:
            self._begin_episodes(at, states)
        if self.n_adds - self._min_began + 1 + share > rows_per_env:
            self._check_episode_fits()
        if hit:
            self._retire(at)
            if share:
                self._retire(at_next)
        flat_states = self.flat_states
        if share:
            for k in self._state_names:
                flat_states[k][at_next] = next_states[k]
        else:
            flat_next = self.flat_next_states
            for k in self._state_names:
                flat_states[k][at] = states[k]
                flat_next[k][at] = next_states[k]
        flat_transitions = self.flat_transitions
        for k in self._transition_names:
            flat_transitions[k][at] = transitions[k]
        self._flat_is_transition[at] = True
        self.n_adds += 1
        self.n_transitions += self.n_envs
        if self.lockstep:
            self._row = nxt
            if self.window < rows_per_env:
                self.window = max(self.window, row + 1 + share)
        else:
            self._pos = nxt
            self.window = min(max(self.window, int(rows.max()) + 1 + share), rows_per_env)
        if np.count_nonzero(done):
            self.close(np.flatnonzero(done))

    def _begin_episodes(self, at, states: Mapping[str, np.ndarray]) -> None:
        """Start an episode in every env that has none open, at the row it writes now (``at``: flat indices)."""
        starting = self.open_start < 0
        flat = np.arange(at.start, at.stop) if isinstance(at, slice) else at
        self.open_start[starting] = flat[starting] // self.n_envs
        self.open_began[starting] = self.n_adds
        self.n_starting = 0
        self._min_began = int(self.open_began.min())
        if self.share_states:  # the shared layout stores an episode's first state only here
            everyone = bool(starting.all())
            for k in self._state_names:
                self.flat_states[k][at if everyone else flat[starting]] = (
                    states[k] if everyone else np.asarray(states[k])[starting]
                )

    def _check_episode_fits(self) -> None:
        too_long = self.open_len + 1 + self.share_states > self.rows
        too_long &= self.open_start >= 0
        if too_long.any():
            raise ValueError(
                f"an episode of environment {int(np.flatnonzero(too_long)[0])} is longer than the "
                f"{self.rows - self.share_states} transitions each environment's column holds: raise buffer_size "
                "(it is split across n_envs)"
            )

    def _retire(self, at) -> None:
        """Retire the old episodes whose first row is written now (``at``: flat indices, one per env)."""
        flat = np.arange(at.start, at.stop) if isinstance(at, slice) else at
        rows = flat // self.n_envs
        for env in np.flatnonzero(self.head[rows, self._envs]):
            row = int(rows[env])
            length = int(self.ep_len[row, env])
            span = (row + np.arange(length + self.share_states)) % self.rows
            self.is_transition[span, env] = False
            self.ep_len[span, env] = 0
            self.head[row, env] = False
            self.heads[row] -= 1
            self.n_transitions -= length

    def close(self, envs: np.ndarray) -> np.ndarray:
        """End the open episodes of ``envs``; returns the row of each one's last transition (-1: none open)."""
        last_rows = np.full(len(envs), -1, dtype=np.int64)
        pos = self.pos
        for i, env in enumerate(envs):
            if self.open_start[env] < 0:
                continue
            length = int(self.n_adds - self.open_began[env])
            start = int(self.open_start[env])
            span = (start + np.arange(length + self.share_states)) % self.rows
            self.ep_len[span, env] = length
            self.ep_start[span, env] = start
            self.head[start, env] = True
            self.heads[start] += 1
            last_rows[i] = (start + length - 1) % self.rows
            if self.share_states:
                # the final state's row belongs to this episode; the next one starts after it
                pos[env] = (start + length + 1) % self.rows
            self.open_start[env] = -1
            self.open_began[env] = self.n_adds
            self.n_starting += 1
        self._set_pos(pos)
        return last_rows

    def _set_pos(self, pos: np.ndarray) -> None:
        self.lockstep = bool((pos == pos[0]).all())
        self._row = int(pos[0])
        self._pos = pos

    def extend(
        self,
        states: dict[str, np.ndarray],
        next_states: dict[str, np.ndarray],
        transitions: dict[str, np.ndarray],
    ) -> None:
        """Append independent transitions (each its own one-step episode) to a one-env, separate-layout storage.

        This is the flat store of offline relabeling: rows no longer need episode context once
        their goals are fixed, so a block of copies is written with a few vectorized stores.
        """
        if self.n_envs != 1 or self.share_states or self.open_start[0] >= 0:
            raise RuntimeError("extend() is for the flat store of offline relabeling (one env, separate layout)")
        n = len(transitions["reward"])
        if n > self.rows:  # only the newest rows fit
            keep = slice(n - self.rows, n)
            states = {k: v[keep] for k, v in states.items()}
            next_states = {k: v[keep] for k, v in next_states.items()}
            transitions = {k: v[keep] for k, v in transitions.items()}
            n = self.rows
        rows = (self._row + np.arange(n)) % self.rows
        self.n_transitions -= int(self.is_transition[rows, 0].sum())
        for k, v in states.items():
            self.states[k][rows, 0] = v
        for k, v in next_states.items():
            self.next_states[k][rows, 0] = v
        for k, v in transitions.items():
            self.transitions[k][rows, 0] = v
        self.ep_start[rows, 0] = rows
        self.ep_len[rows, 0] = 1
        self.is_transition[rows, 0] = True
        self.n_transitions += n
        self._row = int((self._row + n) % self.rows)
        self.window = min(self.window + n, self.rows)

    def clear(self) -> None:
        """Forget every episode (arrays keep their memory)."""
        self.is_transition[:] = False
        self.ep_len[:] = 0
        self.head[:] = False
        self.heads[:] = 0
        self.open_start[:] = -1
        self.n_adds = 0
        self.n_starting = self.n_envs
        self.n_transitions = 0
        self.window = 0
        self._set_pos(np.zeros(self.n_envs, dtype=np.int64))

    # ------------------------------------------------------------------ reading
    def sample_flat(self, n: int, rng: np.random.Generator, *, complete_only: bool = False) -> np.ndarray:
        """Flat indices (row * n_envs + env) of ``n`` transitions drawn uniformly with replacement.

        Rejection sampling over the rows written so far: candidates are uniform over that window,
        so accepted ones are uniform over the valid transitions. The acceptance rate is known from
        the counters, and a partly overwritten episode or the open ones cost only a few rejections.
        """
        n_valid = self.n_transitions - (self.n_open if complete_only else 0)
        if n_valid <= 0:
            raise ValueError(
                "the buffer holds no transition to sample yet: add transitions first"
                + (" (or wait for an episode to end)" if complete_only else "")
            )
        window = self.window * self.n_envs
        accept = n_valid / window
        chunks: list[np.ndarray] = []
        missing = n
        while missing > 0:
            candidates = rng.integers(0, window, size=int(missing / accept * 1.1) + 16)
            ok = self._flat_is_transition[candidates]
            if complete_only:
                ok &= self._flat_ep_len[candidates] > 0
            accepted = candidates[ok][:missing]
            chunks.append(accepted)
            missing -= len(accepted)
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def episode_position(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For transitions at ``flat``: their episode's first row, their offset in it, its length so far."""
        starts = self._flat_ep_start.take(flat)
        lengths = self._flat_ep_len.take(flat)
        still_open = lengths == 0  # rows of open episodes carry no closed-episode book-keeping yet
        if still_open.any():
            envs = flat % self.n_envs
            starts = np.where(still_open, self.open_start.take(envs), starts)
            lengths = np.where(still_open, self.open_len.take(envs), lengths)
        offsets = (flat // self.n_envs - starts) % self.rows
        return starts, offsets, lengths

    def flat_index(self, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        return (rows % self.rows) * self.n_envs + envs

    def next_state(self, name: str, flat: np.ndarray) -> np.ndarray:
        """Field ``name`` of the state each transition at ``flat`` leads to."""
        if self.share_states:
            return self.flat_states[name].take((flat + self.n_envs) % (self.rows * self.n_envs), axis=0)
        return self.flat_next_states[name].take(flat, axis=0)

    # ------------------------------------------------------------------ persistence
    def arrays(self) -> dict[str, np.ndarray]:
        """Every array that defines the storage's contents, by a stable name."""
        out = {f"state/{k}": v for k, v in self.states.items()}
        if not self.share_states:
            out.update({f"next_state/{k}": v for k, v in self.next_states.items()})
        out.update({f"transition/{k}": v for k, v in self.transitions.items()})
        out.update(
            ep_start=self.ep_start, ep_len=self.ep_len, is_transition=self.is_transition, head=self.head,
            open_start=self.open_start, open_began=self.open_began, pos=self.pos,
            counters=np.array([self.n_adds, self.n_starting, self.window], dtype=np.int64),
        )
        return out

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        """Fill this (freshly built, same-shaped) storage from :meth:`arrays` output."""
        targets = self.arrays()
        for name, target in targets.items():
            if name not in arrays:
                raise ValueError(f"saved buffer lacks the array {name!r}: the file is incomplete or not a herl buffer")
            source = arrays[name]
            if source.shape != target.shape or source.dtype != target.dtype:
                raise ValueError(
                    f"saved array {name!r} has shape {source.shape} and dtype {source.dtype}, expected "
                    f"{target.shape} and {target.dtype}: the file does not match the buffer's configuration"
                )
            if name not in ("pos", "counters"):
                target[...] = source
        self.n_adds, self.n_starting, self.window = (int(x) for x in arrays["counters"])
        self._set_pos(arrays["pos"].copy())
        self.heads[:] = self.head.sum(axis=1)
        self.n_transitions = int(self.is_transition.sum())
        self._min_began = int(self.open_began.min())
