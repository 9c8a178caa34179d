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

Book-keeping per row: the first row and length of the closed episode it belongs to (open
episodes are described by per-environment counters), and a flag for rows that start a sampleable
transition. Writes advance through a column in order, so the first write into an older episode
always lands on its first row; that whole episode is then retired at once. A partly overwritten
episode must never be sampled, because its future goals would come from another episode.

Fields of one dtype are packed side by side in one block per dtype, so a sampled row's fields sit
in adjacent cache lines (see ``_allocate``).

Sampling draws rows uniformly by rejection over the written window, which costs O(batch) instead
of scanning the whole buffer for valid rows (what makes SB3's HER sampling ~1 ms at 1e6 rows).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from herl.buffers.strategies import uniform_integers
from herl.errors import CorruptFileError

_MAX_REJECTION_ROUNDS = 64


def _check_priorities(state: Mapping[str, np.ndarray], is_transition: np.ndarray) -> None:
    leaves, top = state.get("leaves"), state.get("max_priority")
    if leaves is None or top is None or leaves.shape != is_transition.shape or top.shape != (1,):
        raise CorruptFileError("the saved buffer's priorities are missing or misshapen: the file is damaged")
    if not (np.isfinite(leaves).all() and (leaves >= 0).all() and np.isfinite(top).all() and top[0] > 0):
        raise CorruptFileError("the saved buffer's priorities are not finite non-negative numbers: the file is damaged")
    if (leaves[~is_transition] > 0).any():
        raise CorruptFileError("the saved buffer gives priority to rows that hold no transition: the file is damaged")


def _reshaped(array, shape: tuple[int, ...]):
    """A view of ``array`` with ``shape``; raises instead of silently copying (writes must reach storage)."""
    if not isinstance(array, np.ndarray):  # a torch tensor: .view never copies
        return array.view(shape)
    view = array.view()
    view.shape = shape
    return view


def to_numpy(array) -> np.ndarray:
    """A NumPy array for user code (reward functions) and files, from NumPy or torch storage."""
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "detach"):
        return array.detach().cpu().numpy()
    return np.asarray(array)


@dataclass(frozen=True)
class FieldSpec:
    """Shape (without the row and env axes) and dtype of one stored field."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @cached_property
    def size(self) -> int:
        """Scalars per row."""
        return math.prod(self.shape)


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
        end_fields: tuple[str, ...] = (),
        split_long_episodes: bool = False,
        size_argument: str = "buffer_size (it is split across n_envs)",
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
        # Fields that can only be nonzero on an episode's last transition (termination flags):
        # written when an episode ends and cleared when it is retired, not on every add.
        self.end_fields = tuple(end_fields)
        # Plain replay does not need whole episodes: an episode about to outgrow its column is closed
        # as a segment (bootstrapping at its end) so that an endless stream keeps the newest
        # transitions, as SB3's ReplayBuffer does. HER needs whole episodes and raises instead.
        self.split_long_episodes = split_long_episodes
        self.size_argument = size_argument  # what a user raises to make columns longer, for error messages
        self._allocate()
        # Per row, for closed episodes: first row and length (0 for rows of no closed episode),
        # side by side so that finding a sampled transition's episode is one gather.
        self.episode_rows = np.zeros((rows, n_envs, 2), dtype=np.int64)
        self.ep_start = self.episode_rows[..., 0]
        self.ep_len = self.episode_rows[..., 1]
        # A row that starts a transition that may be sampled (closed or open episode).
        self.is_transition = np.zeros((rows, n_envs), dtype=bool)
        self._flat_is_transition = self.is_transition.reshape(rows * n_envs)
        self._flat_episode_rows = self.episode_rows.reshape(rows * n_envs, 2)
        self._flat_ep_len = self._flat_episode_rows[:, 1]
        # The first row of each live closed episode, and how many envs have one in each row. Writes
        # advance through a column in order, so the first write into an old episode always lands on
        # its first row: checking one counter per add is enough to retire it whole.
        self.head = np.zeros((rows, n_envs), dtype=bool)
        self.heads = np.zeros(rows, dtype=np.int64)
        self.open_start = np.full(n_envs, -1, dtype=np.int64)
        self.open_began = np.zeros(n_envs, dtype=np.int64)  # value of n_adds when the open episode began
        self._min_began = 0
        self._overflow_at = rows - 1 - share_states  # n_adds at which the oldest open episode outgrows a column
        self.n_adds = 0
        self.n_starting = n_envs  # envs whose next add starts an episode
        self.n_transitions = 0
        self.window = 0  # rows ever written in the fullest column: sampling draws below it
        self._pos = np.zeros(n_envs, dtype=np.int64)
        self._row = 0  # the common row while in lockstep
        self.lockstep = True
        self._envs = np.arange(n_envs)
        self.priorities = None  # a PriorityTree over flat rows, for prioritized replay
        # the finiteness guard: the buffer sets these (on_non_finite raises, naming the env and the key)
        self.check_finite = False
        self.on_non_finite = None

    # ------------------------------------------------------------------ layout
    def _field_specs(self) -> dict[tuple[str, str], FieldSpec]:
        """Every stored field, keyed by (kind, name): "s" state, "n" next state, "t" transition."""
        specs = {("s", k): spec for k, spec in self.state_fields.items()}
        if not self.share_states:
            specs.update({("n", k): spec for k, spec in self.state_fields.items()})
        specs.update({("t", k): spec for k, spec in self.transition_fields.items()})
        return specs

    def _allocate(self) -> None:
        """Pack the fields of each dtype side by side in one (rows * n_envs, width) block.

        A row's observation, goals, action and reward then share a few adjacent cache lines, so a
        sampled batch costs one random access per row and dtype instead of one per field: at 1e6
        rows that is most of the sampling time.
        """
        specs = self._field_specs()
        widths: dict[np.dtype, int] = {}
        self._columns: dict[tuple[str, str], tuple[np.dtype, int, FieldSpec]] = {}
        for key, spec in specs.items():
            offset = widths.get(spec.dtype, 0)
            self._columns[key] = (spec.dtype, offset, spec)
            widths[spec.dtype] = offset + spec.size
        flat_rows = self.rows * self.n_envs
        self._blocks = {dtype: self._zeros((flat_rows, width), dtype) for dtype, width in widths.items()}
        self._float_blocks = [block for dtype, block in self._blocks.items() if np.dtype(dtype).kind == "f"]
        views = {key: self._field_view(self._blocks[dtype], offset, spec) for key, (dtype, offset, spec) in self._columns.items()}
        self.flat_states = {k: views[("s", k)] for k in self.state_fields}
        self.flat_next_states = self.flat_states if self.share_states else {k: views[("n", k)] for k in self.state_fields}
        self.flat_transitions = {k: views[("t", k)] for k in self.transition_fields}
        per_env = (self.rows, self.n_envs)
        self.states = {k: _reshaped(v, per_env + v.shape[1:]) for k, v in self.flat_states.items()}
        self.next_states = self.states if self.share_states else {
            k: _reshaped(v, per_env + v.shape[1:]) for k, v in self.flat_next_states.items()
        }
        self.transitions = {k: _reshaped(v, per_env + v.shape[1:]) for k, v in self.flat_transitions.items()}
        # a gathered block split at its fields' widths gives every field: piece_index says where each
        # one lands when the blocks' pieces are concatenated (with the shared layout, the next states
        # come from a second gather, whose pieces follow the first's)
        by_dtype = {dtype: [(key, spec.size) for key, (d, _, spec) in self._columns.items() if d == dtype] for dtype in widths}
        self.block_widths = {dtype: [size for _, size in columns] for dtype, columns in by_dtype.items()}
        order = [key for columns in by_dtype.values() for key, _ in columns]
        self.piece_index = {key: i for i, key in enumerate(order)}
        if self.share_states:
            self.piece_index.update({("n", key[1]): len(order) + i for i, key in enumerate(order) if key[0] == "s"})
        self._state_names = tuple(self.state_fields)
        self._transition_names = tuple(k for k in self.transition_fields if k not in self.end_fields)

    def _zeros(self, shape: tuple[int, ...], dtype: np.dtype):
        return np.zeros(shape, dtype=dtype)

    def _take(self, block, flat: np.ndarray):
        return block.take(flat, axis=0)

    def _select(self, values, mask: np.ndarray):
        return np.asarray(values)[mask]

    @staticmethod
    def _field_view(block: np.ndarray, offset: int, spec: FieldSpec) -> np.ndarray:
        if not spec.shape:
            return block[:, offset]
        columns = block[:, offset:offset + spec.size]
        return columns if len(spec.shape) == 1 else _reshaped(columns, (block.shape[0], *spec.shape))

    def add_transition_field(self, name: str, spec: FieldSpec) -> None:
        """Add a per-transition field after construction (info keys are known at the first add)."""
        kept = {key: view.clone() if hasattr(view, "clone") else view.copy() for key, view in self._all_views().items()}
        self.transition_fields[name] = spec
        self._allocate()
        for key, view in self._all_views().items():
            if key in kept:
                view[...] = kept[key]

    def _all_views(self) -> dict[tuple[str, str], np.ndarray]:
        out = {("s", k): v for k, v in self.flat_states.items()}
        if not self.share_states:
            out.update({("n", k): v for k, v in self.flat_next_states.items()})
        out.update({("t", k): v for k, v in self.flat_transitions.items()})
        return out

    def take_blocks(self, flat: np.ndarray) -> dict[np.dtype, np.ndarray]:
        """Copies of the rows at ``flat`` of every dtype block (the fields of :meth:`field_of`)."""
        return {dtype: self._take(block, flat) for dtype, block in self._blocks.items()}

    def field_of(self, blocks: dict[np.dtype, np.ndarray], kind: str, name: str) -> np.ndarray:
        """The view of field ``(kind, name)`` in blocks from :meth:`take_blocks`."""
        dtype, offset, spec = self._columns[(kind, name)]
        return self._field_view(blocks[dtype], offset, spec)

    def next_flat(self, flat: np.ndarray) -> np.ndarray:
        """Flat indices of the rows holding the next states of the transitions at ``flat`` (shared layout)."""
        return (flat + self.n_envs) % (self.rows * self.n_envs)

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
        n_done: int | None = None,
    ) -> None:
        """Store one transition per environment; arrays are shaped (n_envs, ...), already validated.

        Only the storage's own field names are read from the mappings; extra keys are ignored.
        ``n_done`` (the count of true ``done`` flags) may be passed when the caller knows it.
        """
        if self.n_adds >= self._overflow_at:
            self._handle_long_episodes()
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
        if self.check_finite and not self._rows_finite(at, at_next if share else None):
            # nothing is booked yet: the rows just written belong to no episode (retired, or never used) and the
            # next add writes them again, so the transition is not stored
            self.on_non_finite(states, next_states, transitions)
        self._flat_is_transition[at] = True
        if self.priorities is not None:
            self.priorities.add_many(np.arange(at.start, at.stop) if isinstance(at, slice) else at)
        self.n_adds += 1
        self.n_transitions += self.n_envs
        if self.lockstep:
            self._row = nxt
            if self.window < rows_per_env:  # the shared layout's next state may wrap to row 0
                self.window = min(max(self.window, row + 1 + share), rows_per_env)
        else:
            self._pos = nxt
            self.window = min(max(self.window, int(rows.max()) + 1 + share), rows_per_env)
        if n_done is None:
            n_done = np.count_nonzero(done)
        if n_done:
            for k in self.end_fields:
                flat_transitions[k][at] = transitions[k]
            self.close(np.flatnonzero(done))

    def _rows_finite(self, at, at_next) -> bool:
        """Whether the float rows just written hold only finite numbers: one reduction per float block, as a row packs
        its observation, goals, action and reward side by side (the finiteness guard, ~1 µs an add; a sum is finite only
        if every term is, and an overflowing sum of finite numbers is told apart by the exact check)."""
        for block in self._float_blocks:
            for where in (at, at_next) if at_next is not None else (at,):
                rows = block[where]
                if not math.isfinite(np.add.reduce(rows, None)) and not np.isfinite(rows).all():
                    return False
        return True

    def _begin_episodes(self, at, states: Mapping[str, np.ndarray]) -> None:
        """Start an episode in every env that has none open, at the row it writes now (``at``: flat indices)."""
        starting = self.open_start < 0
        flat = np.arange(at.start, at.stop) if isinstance(at, slice) else at
        self.open_start[starting] = flat[starting] // self.n_envs
        self.open_began[starting] = self.n_adds
        self.n_starting = 0
        self._set_min_began()
        if self.share_states:  # the shared layout stores an episode's first state only here
            everyone = bool(starting.all())
            for k in self._state_names:
                self.flat_states[k][at if everyone else flat[starting]] = (
                    states[k] if everyone else self._select(states[k], starting)
                )

    def _set_min_began(self) -> None:
        self._min_began = int(self.open_began.min())
        self._overflow_at = self._min_began + self.rows - 1 - self.share_states

    def _handle_long_episodes(self) -> None:
        too_long = (self.open_len + 1 + self.share_states > self.rows) & (self.open_start >= 0)
        if not too_long.any():
            return
        if self.split_long_episodes:
            self.close(np.flatnonzero(too_long))
            return
        raise ValueError(
            f"an episode of environment {int(np.flatnonzero(too_long)[0])} is longer than the "
            f"{self.rows - self.share_states} transitions each environment's column holds: raise {self.size_argument}"
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
            if self.priorities is not None:
                self.priorities.remove(span[:length] * self.n_envs + env)
            for k in self.end_fields:
                self.transitions[k][span[length - 1], env] = 0
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
        self._set_min_began()
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
        if self.priorities is not None:
            self.priorities.add_many(rows)
        self.is_transition[rows, 0] = True
        self.n_transitions += n
        self._row = int((self._row + n) % self.rows)
        self.window = min(self.window + n, self.rows)

    def fill_episodes(
        self,
        states: Mapping[str, np.ndarray],
        next_states: Mapping[str, np.ndarray],
        transitions: Mapping[str, np.ndarray],
        episode_starts: np.ndarray,
    ) -> None:
        """Write whole, closed episodes into this empty one-env storage at once (the demonstration store of a HER
        buffer): rows ``episode_starts[i]`` up to the next start are episode ``i``, in order.

        Rows are booked as :meth:`add` and :meth:`close` book them (with the shared layout each episode takes one more
        row, for its final state), so sampling and goal selection treat them as any other stored episode. The
        storage must hold ``len(rows) + n_episodes * share_states`` rows.
        """
        if self.n_envs != 1 or self.n_adds or self.n_transitions:
            raise RuntimeError("fill_episodes() writes into an empty one-env storage")
        n = len(transitions["reward"])
        starts = np.asarray(episode_starts, dtype=np.int64)
        lengths = np.diff(np.append(starts, n))
        share = int(self.share_states)
        total = n + share * len(starts)
        if total > self.rows or n == 0 or starts[0] != 0 or (lengths < 1).any():
            raise ValueError(f"{len(starts)} episode(s) of {n} steps in all do not fit {self.rows} rows, or their "
                             "starts are not increasing from 0")
        episode = np.repeat(np.arange(len(starts)), lengths)
        first = starts + share * np.arange(len(starts))  # each episode's first row here
        rows = np.arange(n) + share * episode
        for k, v in states.items():
            self.flat_states[k][rows] = self._stored(v, self.state_fields[k])
        last = rows[starts + lengths - 1] + 1  # with the shared layout, the row after each episode's last transition
        for k, v in next_states.items():
            if share:
                self.flat_states[k][last] = self._stored(np.asarray(v)[starts + lengths - 1], self.state_fields[k])
            else:
                self.flat_next_states[k][rows] = self._stored(v, self.state_fields[k])
        for k, v in transitions.items():
            self.flat_transitions[k][rows] = self._stored(v, self.transition_fields[k])
        span = np.arange(total)
        span_episode = np.repeat(np.arange(len(starts)), lengths + share)
        self.ep_start[span, 0] = first[span_episode]
        self.ep_len[span, 0] = lengths[span_episode]
        self.head[first, 0] = True
        self.heads[first] += 1
        self.is_transition[rows, 0] = True
        self.n_adds = n
        self.open_began[:] = n
        self.n_transitions = n
        self.window = total
        self._set_pos(np.array([total % self.rows], dtype=np.int64))
        self._set_min_began()
        self.check_consistency()

    def _stored(self, values: Any, spec: FieldSpec):
        """``values`` as this storage keeps them (NumPy here; tensors on its device for the torch storage)."""
        return np.asarray(values, dtype=spec.dtype).reshape(-1, *spec.shape)

    @contextlib.contextmanager
    def undo_extend_on_error(self, n: int) -> Iterator[None]:
        """Undo the :meth:`extend` of ``n`` rows made inside the block if the block then raises.

        Offline relabeling stores an episode before computing its copies (``random`` draws goals from it too), and
        the user's reward function runs in between: when it raises, the store must be as it was. Only
        the ``n`` rows about to be overwritten are copied, a small fraction of what the extends write.
        """
        rows = (self._row + np.arange(min(n, self.rows))) % self.rows  # one env: flat index == row
        saved = (self.take_blocks(rows), self.episode_rows[rows].copy(), self.is_transition[rows].copy(),
                 self.n_transitions, self._row, self.window)
        mark = None if self.priorities is None else self.priorities.mark()
        try:
            yield
        except BaseException:
            blocks, episode_rows, is_transition, self.n_transitions, self._row, self.window = saved
            for dtype, block in self._blocks.items():
                self._put(block, rows, blocks[dtype])
            self.episode_rows[rows] = episode_rows
            self.is_transition[rows] = is_transition
            if mark is not None:
                self.priorities.rollback(mark)
            raise

    def _put(self, block, flat: np.ndarray, values) -> None:
        block[flat] = values

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
        if self.priorities is not None:
            self.priorities.clear()
        for k in self.end_fields:
            self.transitions[k][:] = 0
        self._set_pos(np.zeros(self.n_envs, dtype=np.int64))
        self._set_min_began()

    # ------------------------------------------------------------------ reading
    def sample_flat(self, n: int, rng: np.random.Generator, *, complete_only: bool = False, uniform: bool = False) -> np.ndarray:
        """Flat indices (row * n_envs + env) of ``n`` transitions drawn uniformly with replacement.

        Rejection sampling over the rows written so far: candidates are uniform over that window,
        so accepted ones are uniform over the valid transitions. The acceptance rate is known from
        the counters, and a partly overwritten episode or the open ones cost only a few rejections.
        With prioritized replay the draw follows the priorities, unless ``uniform`` (goal sources).
        """
        if self.priorities is not None and not (complete_only or uniform):
            return self.priorities.sample(n, rng)
        n_valid = self.n_transitions - (self.n_open if complete_only else 0)
        if n_valid <= 0:
            raise ValueError(
                "the buffer holds no transition to sample yet: add transitions first"
                + (" (or wait for an episode to end)" if complete_only else "")
            )
        window = self.window * self.n_envs
        if n_valid == window:  # every row written so far holds a valid transition: no rejection needed
            return uniform_integers(rng, 0, window, n)
        accept = n_valid / window
        chunks: list[np.ndarray] = []
        missing = n
        # Each round draws 10% more candidates than the acceptance rate needs, so a round falls short with a
        # vanishing probability and 64 in a row never do; counters that disagree with the rows (a damaged file the
        # load checks missed) would otherwise loop forever.
        for _ in range(_MAX_REJECTION_ROUNDS):
            if missing <= 0:
                break
            candidates = uniform_integers(rng, 0, window, int(missing / accept * 1.1) + 16)
            ok = self._flat_is_transition[candidates]
            if complete_only:
                ok &= self._flat_ep_len[candidates] > 0
            accepted = candidates[ok][:missing]
            chunks.append(accepted)
            missing -= len(accepted)
        else:
            raise CorruptFileError(
                f"sampling found {n - missing} of {n} transitions in {_MAX_REJECTION_ROUNDS} rounds: the buffer's "
                "book-keeping contradicts its rows (a damaged or edited buffer file?); reset() the buffer or load "
                "another file"
            )
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def episode_position(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For transitions at ``flat``: their offset in their episode, and the episode's length so far."""
        episode = self._flat_episode_rows.take(flat, axis=0)
        starts, lengths = episode[:, 0], episode[:, 1]
        still_open = lengths == 0  # rows of open episodes carry no closed-episode book-keeping yet
        if np.count_nonzero(still_open):
            envs = flat % self.n_envs
            starts = np.where(still_open, self.open_start.take(envs), starts)
            lengths = np.where(still_open, self.open_len.take(envs), lengths)
        rows = flat if self.n_envs == 1 else flat // self.n_envs
        return (rows - starts) % self.rows, lengths

    def shift(self, flat: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Flat indices ``steps`` rows after ``flat`` in the same environment's column (wrapping around)."""
        return (flat + (steps if self.n_envs == 1 else steps * self.n_envs)) % (self.rows * self.n_envs)

    def flat_index(self, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        return (rows % self.rows) * self.n_envs + envs

    def field(self, kind: str, name: str, flat: np.ndarray) -> np.ndarray:
        """A copy of one field at ``flat``. (np.take on the strided field view would first copy the
        whole column, so the block's rows are gathered and the field sliced out of them.)"""
        dtype, offset, spec = self._columns[(kind, name)]
        return self._field_view(self._take(self._blocks[dtype], flat), offset, spec)

    def next_state(self, name: str, flat: np.ndarray) -> np.ndarray:
        """Field ``name`` of the state each transition at ``flat`` leads to."""
        if self.share_states:
            return self.field("s", name, self.next_flat(flat))
        return self.field("n", name, flat)

    # ------------------------------------------------------------------ persistence
    # Per-row arrays: saved for the rows written so far only (a 300-step run with the default capacity
    # wrote 102 MB of zeros); rows past the window are empty by construction (writes start at row 0, in order).
    _PER_ROW = ("state/", "next_state/", "transition/", "episode_rows", "is_transition", "head", "priority/leaves")

    def arrays(self, *, written_only: bool = False) -> dict[str, np.ndarray]:
        """Every array that defines the storage's contents, by a stable name; ``written_only``: the per-row arrays cut
        to the rows written so far (what files hold)."""
        out = {f"state/{k}": to_numpy(v) for k, v in self.states.items()}
        if not self.share_states:
            out.update({f"next_state/{k}": to_numpy(v) for k, v in self.next_states.items()})
        out.update({f"transition/{k}": to_numpy(v) for k, v in self.transitions.items()})
        out.update(
            episode_rows=self.episode_rows, is_transition=self.is_transition, head=self.head,
            open_start=self.open_start, open_began=self.open_began, pos=self.pos,
            counters=np.array([self.n_adds, self.n_starting, self.window], dtype=np.int64),
        )
        if self.priorities is not None:
            out.update({f"priority/{k}": v for k, v in self.priorities.state().items()})
        if written_only:
            n = self.window
            out = {name: (a[: n * self.n_envs] if name == "priority/leaves" else a[:n]) if name.startswith(self._PER_ROW)
                   else a for name, a in out.items()}
        return out

    def _assign(self, target, source: np.ndarray) -> None:
        target[...] = source

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        """Fill this (freshly built, same-shaped) storage from :meth:`arrays` output (whole, or ``written_only``)."""
        targets = self.arrays()
        live = {f"state/{k}": v for k, v in self.states.items()}
        live.update({f"next_state/{k}": v for k, v in self.next_states.items()} if not self.share_states else {})
        live.update({f"transition/{k}": v for k, v in self.transitions.items()})
        counters = arrays.get("counters")
        if counters is None or counters.shape != (3,) or counters.dtype.kind not in "iu" or (counters < 0).any():
            raise CorruptFileError(f"the saved buffer's counters must be 3 whole numbers >= 0, got "
                                   f"{None if counters is None else counters.tolist()}: the file is damaged")
        written = int(counters[2])  # the window: rows a file written with written_only holds
        arrays = dict(arrays)
        if "priority/leaves" in arrays and len(arrays["priority/leaves"]) == written * self.n_envs:
            arrays["priority/leaves"] = np.concatenate(
                [arrays["priority/leaves"], np.zeros(self.rows * self.n_envs - len(arrays["priority/leaves"]))])
        for name, target in targets.items():
            if name not in arrays:
                raise ValueError(f"saved buffer lacks the array {name!r}: the file is incomplete or not a herl buffer")
            source = arrays[name]
            rows = source.shape[0] if source.ndim and name.startswith(self._PER_ROW) and name != "priority/leaves" \
                else None
            if rows is not None and rows == written <= self.rows and source.shape[1:] == target.shape[1:]:
                shape_ok = True
            else:
                rows, shape_ok = None, source.shape == target.shape
            if not shape_ok or source.dtype != target.dtype:
                raise ValueError(
                    f"saved array {name!r} has shape {source.shape} and dtype {source.dtype}, expected "
                    f"{target.shape} (or its first {written} rows) and {target.dtype}: the file does not match the "
                    "buffer's configuration"
                )
            if name in live:  # data (possibly torch tensors on a device); targets[name] is a host copy
                self._assign(live[name] if rows is None else live[name][:rows], source)
            elif name not in ("pos", "counters") and not name.startswith("priority/"):
                if rows is None:
                    target[...] = source
                else:
                    target[:rows] = source
                    target[rows:] = 0
        self.n_adds, self.n_starting, self.window = (int(x) for x in arrays["counters"])
        self._set_pos(arrays["pos"].copy())
        self.heads[:] = self.head.sum(axis=1)
        if self.priorities is not None:
            priorities = {k[len("priority/"):]: v for k, v in arrays.items() if k.startswith("priority/")}
            _check_priorities(priorities, self._flat_is_transition)
            self.priorities.restore(priorities)
        self.n_transitions = int(self.is_transition.sum())
        self._set_min_began()
        try:
            self.check_consistency()
        except CorruptFileError:
            self.clear()  # never leave a half-restored storage behind
            raise

    def check_consistency(self) -> None:
        """Raise :class:`~herl.errors.CorruptFileError` if the episode book-keeping contradicts itself.

        Sampling trusts these arrays (the rejection sampler's acceptance rate, an episode's start and length for
        its future goals), so a loaded file is checked once here rather than on every sample (a
        hand-edited buffer made sample() loop forever).
        """
        rows, n_envs, share = self.rows, self.n_envs, int(self.share_states)

        def fail(what: str) -> None:
            raise CorruptFileError(f"the saved buffer is inconsistent: {what}. The file is damaged or was edited; "
                                   "it cannot be sampled from safely (load another one, or start an empty buffer)")

        if not (0 <= self.window <= rows and self.n_adds >= 0 and 0 <= self.n_starting <= n_envs):
            fail(f"counters (n_adds={self.n_adds}, n_starting={self.n_starting}, window={self.window}) out of range "
                 f"for {rows} rows and {n_envs} env(s)")
        pos = self.pos
        if pos.min() < 0 or pos.max() >= rows:
            fail(f"write positions {pos.tolist()} outside [0, {rows})")
        open_ = self.open_start >= 0
        if self.open_start.min() < -1 or self.open_start.max() >= rows or int((~open_).sum()) != self.n_starting:
            fail(f"open episodes' first rows {self.open_start.tolist()} do not match n_starting={self.n_starting}")
        open_len = self.n_adds - self.open_began
        if (open_ & ((self.open_began < 0) | (open_len < 0) | (open_len + share >= rows))).any():
            fail(f"open episodes' lengths {np.where(open_, open_len, 0).tolist()} do not fit {rows} rows")
        starts, lengths = self.ep_start, self.ep_len
        if starts.min() < 0 or starts.max() >= rows or lengths.min() < 0 or lengths.max() + share > rows:
            fail("episode starts or lengths outside the rows")
        row_index = np.arange(rows)[:, None]
        closed = lengths > 0
        if ((row_index - starts) % rows >= lengths + share)[closed].any():
            fail("a row lies outside the closed episode it is booked to")
        if (self.head & ~(closed & (starts == row_index))).any():
            fail("an episode head that is not the first row of a closed episode")
        envs = np.arange(n_envs)[None, :]
        if (closed & ((lengths[starts, envs] != lengths) | (starts[starts, envs] != starts))).any():
            fail("rows of one episode that disagree on its first row or its length")
        transition = self.is_transition
        if transition[self.window:].any():
            fail(f"transitions booked beyond the {self.window} rows written")
        orphan = transition & ~closed
        if orphan.any():  # rows of a running episode: within its stored part
            offset = (row_index - self.open_start[None, :]) % rows
            if (orphan & ~(open_[None, :] & (offset < open_len[None, :]))).any():
                fail("a transition that belongs to no episode")
        if (closed & ~transition).any() and not share:
            fail("a closed episode's row that holds no transition")


class TorchEpisodeStorage(EpisodeStorage):
    """The same storage with its data blocks as torch tensors on ``device`` (book-keeping stays on the host).

    Sampled batches are gathered on the device, so a GPU-resident buffer feeds the networks with
    no host copy; only the batch's indices go to the device, and the few goals a reward function
    needs come back. Inputs to ``add`` may be NumPy arrays or tensors on any device.
    """

    def __init__(self, *, device, **kwargs) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)
        super().__init__(**kwargs)

    def _zeros(self, shape: tuple[int, ...], dtype: np.dtype):
        return self._torch.zeros(shape, dtype=self._torch_dtype(dtype), device=self.device)

    def _tensor(self, value, spec: FieldSpec):
        return self._torch.as_tensor(value, device=self.device, dtype=self._torch_dtype(spec.dtype))

    def _torch_dtype(self, dtype: np.dtype):
        return self._torch.from_numpy(np.zeros(0, dtype=dtype)).dtype

    def _take(self, block, flat: np.ndarray):
        return block.index_select(0, self._torch.as_tensor(flat, device=self.device))

    def _select(self, values, mask: np.ndarray):
        return values[self._torch.as_tensor(mask, device=values.device)]

    def _stored(self, values: Any, spec: FieldSpec):
        return self._tensor(super()._stored(values, spec), spec)

    def _assign(self, target, source: np.ndarray) -> None:
        target.copy_(self._torch.from_numpy(np.ascontiguousarray(source)))

    def _put(self, block, flat: np.ndarray, values) -> None:
        block.index_copy_(0, self._torch.as_tensor(flat, device=self.device), values)

    def add(self, states, next_states, transitions, done, n_done=None) -> None:
        convert, fields = self._tensor, self.state_fields
        super().add(
            {k: convert(states[k], fields[k]) for k in self._state_names},
            {k: convert(next_states[k], fields[k]) for k in self._state_names},
            {k: convert(v, self.transition_fields[k]) for k, v in transitions.items()},
            to_numpy(done),
            n_done,
        )

    def extend(self, states, next_states, transitions) -> None:
        convert = self._tensor
        super().extend({k: convert(v, self.state_fields[k]) for k, v in states.items()},
                       {k: convert(v, self.state_fields[k]) for k, v in next_states.items()},
                       {k: convert(v, self.transition_fields[k]) for k, v in transitions.items()})


class GatheredRows:
    """Copies of the rows of a sampled batch, one gathered block per dtype, and views of their fields.

    Editing a field (relabeling does) edits the block, never the storage. With the shared layout
    the next states come from a second gather of the following rows.
    """

    __slots__ = ("storage", "blocks", "next_blocks", "discounts")

    def __init__(self, storage: EpisodeStorage, flat: np.ndarray) -> None:
        self.storage = storage
        self.blocks = storage.take_blocks(flat)
        self.next_blocks = storage.take_blocks(storage.next_flat(flat)) if storage.share_states else None
        self.discounts: np.ndarray | None = None
        """n-step batches: each row's bootstrap discount gamma^m (float32, shaped (rows,))."""

    @classmethod
    def joined(cls, first: GatheredRows, second: GatheredRows) -> GatheredRows:
        """The rows of ``first`` followed by those of ``second``, gathered from storages with the same fields and
        layout (a HER buffer's main and demonstration stores)."""
        def cat(a: dict, b: dict) -> dict:
            if all(isinstance(block, np.ndarray) for block in a.values()):
                return {d: np.concatenate([a[d], b[d]]) for d in a}
            import torch

            return {d: torch.cat([a[d], b[d]]) for d in a}

        out = cls.__new__(cls)
        out.storage = first.storage
        out.blocks = cat(first.blocks, second.blocks)
        out.next_blocks = None if first.next_blocks is None else cat(first.next_blocks, second.next_blocks)
        out.discounts = None if first.discounts is None else np.concatenate([first.discounts, second.discounts])
        return out

    def state(self, name: str):
        return self.storage.field_of(self.blocks, "s", name)

    def next_state(self, name: str):
        if self.next_blocks is not None:
            return self.storage.field_of(self.next_blocks, "s", name)
        return self.storage.field_of(self.blocks, "n", name)

    def transition(self, name: str):
        return self.storage.field_of(self.blocks, "t", name)

    def fields(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """``(states, next_states, transitions)``: every stored field, as dicts of views."""
        names = self.storage.state_fields
        return ({k: self.state(k) for k in names}, {k: self.next_state(k) for k in names},
                {k: self.transition(k) for k in self.storage.transition_fields})

    def pieces(self, to_tensor) -> list:
        """Every field as a tensor, in ``storage.piece_index`` order: one conversion per block, then views."""
        import torch
        widths = self.storage.block_widths
        out = []
        for blocks in (self.blocks, self.next_blocks):
            if blocks is not None:
                for dtype, block in blocks.items():
                    out += torch.split_with_sizes(to_tensor(block), widths[dtype], dim=1)
        return out
