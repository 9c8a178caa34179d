"""What a training run shows while it runs: a tqdm bar on a terminal, a line every so often in a log file."""

from __future__ import annotations

import sys
import time
from typing import Any

BAR_FORMAT = "{desc}{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} steps [{elapsed}<{remaining}{postfix}]"


class Progress:
    """Steps, fps and the latest success rate of one run.

    Args:
        total: env steps the run trains to; ``initial``: steps already done (a resumed run).
        label: shown first (e.g. ``seed 0``).
        mode: ``bar`` (tqdm), ``log`` (a line every 10% or minute, for files), ``off``;
            ``auto``: ``bar`` when stderr is a terminal, else ``log``.
        position: the bar's line, for several runs in parallel.
    """

    def __init__(self, *, total: int, initial: int = 0, label: str = "", mode: str = "auto", position: int = 0) -> None:
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "log"
        self.mode, self.total, self.label = mode, total, label
        self.success: float | None = None
        self._step = self._last_step = initial
        self._last_time = self._last_line = self._now = time.perf_counter()
        self._fps = 0.0
        self._next_line_step = initial
        self.bar: Any = None
        if mode == "bar":
            try:
                from tqdm import tqdm
            except ImportError:  # the progress bar is a nicety: fall back to lines
                self.mode = "log"
            else:
                self.bar = tqdm(total=total, initial=initial, desc=f"{label}: " if label else "", position=position,
                                bar_format=BAR_FORMAT, dynamic_ncols=True, leave=True)

    def update(self, step: int) -> None:
        """Called after every env step with the step count."""
        if self.mode == "off":
            return
        now = time.perf_counter()
        if self.bar is not None:
            self.bar.update(step - self._step)
        self._step, self._now = step, now
        if now - self._last_time >= 0.5:
            self._fps = (step - self._last_step) / (now - self._last_time)
            self._last_step, self._last_time = step, now
            if self.bar is not None:
                self.bar.set_postfix_str(self._postfix(), refresh=False)
        if self.mode == "log" and (step >= self._next_line_step or now - self._last_line >= 60):
            self._line(step)
            self._next_line_step = step + max(self.total // 10, 1)
            self._last_line = now

    def restart_rate(self) -> None:
        """Measure fps from now on: time spent outside training (an evaluation, a checkpoint) is not env steps'
        time, and counting it showed "0 fps" right after each evaluation. The last rate stays shown, or, where the
        window had not reached 0.5 s, the rate of the steps it timed before the pause."""
        self._measure_window(self._now)
        self._last_step, self._last_time = self._step, time.perf_counter()

    def _measure_window(self, end: float) -> None:
        """The rate of the steps since the window began, where it timed enough of them (0.1 s)."""
        if end - self._last_time >= 0.1 and self._step > self._last_step:
            self._fps = (self._step - self._last_step) / (end - self._last_time)

    def set_success(self, success: float | None) -> None:
        self.success = success
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix())

    def _postfix(self) -> str:
        parts = [f"{self._fps:.0f} fps"] if self._fps else []  # no rate measured yet: none shown, not "0 fps"
        if self.success is not None:
            parts.append(f"success {self.success:.2f}")
        return ", ".join(parts)  # tqdm puts ", " before the postfix

    def _line(self, step: int) -> None:
        # the window so far: where evaluations and checkpoints restart it more often than every 0.5 s it never
        # closes, and the log showed "0 fps" throughout
        self._measure_window(self._now)
        prefix = f"[{self.label}] " if self.label else ""
        postfix = self._postfix()
        print(f"{prefix}{step}/{self.total} steps ({100 * step / max(self.total, 1):.0f}%)"
              + (f", {postfix}" if postfix else ""), file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.mode == "log":
            self._line(self._step)
