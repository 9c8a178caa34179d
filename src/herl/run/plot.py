"""``herl plot``: learning curves of runs, the mean over seeds with their spread, several runs on one figure."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from herl.io.atomic import atomic_path
from herl.run.envs import action_repeat
from herl.run.errors import CLIError, MissingExtraError, output_file
from herl.run.folders import find_seed_runs, read_config, read_progress  # noqa: F401 (read_progress: herl sweep's)
from herl.run.runlog import STEP_KEY, WALL_KEY

X_KEYS = {"steps": STEP_KEY, "time": WALL_KEY}


@dataclass(frozen=True)
class Curve:
    """One run's metric over x, one array pair per seed."""

    label: str
    seeds: list[tuple[np.ndarray, np.ndarray]]


def load_curve(run: Path, metric: str, x: str, label: str | None = None) -> Curve:
    """The curves of the seed runs in ``run`` (a run folder or a folder of them)."""
    seeds = []
    columns: set[str] = set()
    repeats = set()
    for seed_run in find_seed_runs(run):
        rows = read_progress(seed_run / "progress.csv")
        columns.update(*(r.keys() for r in rows))
        try:
            points = [(float(r[X_KEYS[x]]), float(r[metric])) for r in rows if r.get(metric) and r.get(X_KEYS[x])]
        except ValueError as err:
            raise CLIError(f"{seed_run / 'progress.csv'} holds a value that is no number in {metric} or "
                           f"{X_KEYS[x]} ({err}): herl writes numbers there; restore the file") from None
        if points:
            xs, ys = np.array(points).T
            repeat = action_repeat(read_config(seed_run).env_kwargs) if x == "steps" else 1
            repeats.add(repeat)
            seeds.append((xs * repeat, ys))
    if not seeds:
        known = sorted(c for c in columns if c != X_KEYS[x]) or ["(progress.csv is empty)"]
        raise CLIError(f"{run} has no values of {metric!r}; its progress.csv has: {', '.join(known)}")
    label = label or _default_label(run)
    if repeats != {1}:  # its steps are decisions: say how they became env steps
        label += f" (env steps: decisions x {'/'.join(str(k) for k in sorted(repeats))})"
    return Curve(label, seeds)


def _default_label(run: Path) -> str:
    config = read_config(find_seed_runs(run)[0])
    name = run.resolve().name
    return f"{name} ({config.algo}{'+HER' if config.her else ''})"


def summarize(curve: Curve, band: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x, mean, low, high)`` over seeds; each seed is interpolated onto the union of x values within its range."""
    grid = np.unique(np.concatenate([xs for xs, _ in curve.seeds]))
    values = np.full((len(curve.seeds), len(grid)), np.nan)
    for i, (xs, ys) in enumerate(curve.seeds):
        inside = (grid >= xs[0]) & (grid <= xs[-1])
        values[i, inside] = np.interp(grid[inside], xs, ys)
    keep = ~np.all(np.isnan(values), axis=0)
    grid, values = grid[keep], values[:, keep]
    mean = np.nanmean(values, axis=0)
    if band == "std":
        std = np.nanstd(values, axis=0)
        return grid, mean, mean - std, mean + std
    if band == "minmax":
        return grid, mean, np.nanmin(values, axis=0), np.nanmax(values, axis=0)
    return grid, mean, mean, mean


def parse_reference(text: str) -> tuple[str, list[tuple[float, float]]]:
    """``LABEL=X:Y,X:Y,...`` (e.g. a peer's published success rates by env step) to ``(label, points)``."""
    label, sep, points = text.rpartition("=")
    try:
        pairs = [tuple(float(v) for v in point.split(":")) for point in points.split(",")]
        if not sep or not label.strip() or any(len(p) != 2 for p in pairs):
            raise ValueError
    except ValueError:
        raise CLIError(f"--reference takes LABEL=X:Y,X:Y,... (e.g. 'zoo TQC=100000:0.6,200000:0.95'), got {text!r}") from None
    return label.strip(), [(x, y) for x, y in pairs]


def plot_runs(runs: list[Path], output: Path, *, metric: str = "eval/success_rate", x: str = "steps",
              band: str = "minmax", labels: list[str] | None = None, title: str | None = None,
              references: list[tuple[str, list[tuple[float, float]]]] | None = None) -> Path:
    """Draw the runs' curves on one figure and save it to ``output`` (PNG, SVG or PDF, by its suffix).

    ``references``: ``(label, [(x, y), ...])`` points drawn as markers, e.g. a peer's published results."""
    try:
        import matplotlib
    except ImportError as err:
        raise MissingExtraError("herl plot", "matplotlib", "plot") from err
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
    from matplotlib.backend_bases import FigureCanvasBase

    if labels and len(labels) != len(runs):
        raise CLIError(f"give one --label per run: {len(runs)} run(s), {len(labels)} label(s)")
    output_file(output)  # before the work: its folder exists (none is made without asking)
    image_format = output.suffix[1:].lower() or "png"
    formats = FigureCanvasBase.get_supported_filetypes()
    if image_format not in formats:
        raise CLIError(f"-o {output}: matplotlib cannot write {output.suffix!r} images; end the name with one of "
                       f"{', '.join('.' + f for f in sorted(formats))}")
    curves = [load_curve(run, metric, x, labels[i] if labels else None) for i, run in enumerate(runs)]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    scale, x_label = (1.0, "env steps") if x == "steps" else (1 / 60, "wall time (minutes)")
    for curve, color in zip(curves, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10):
        grid, mean, low, high = summarize(curve, band)
        n = len(curve.seeds)
        ax.plot(grid * scale, mean, color=color, lw=2, label=f"{curve.label}, {n} seed{'s' if n > 1 else ''}")
        if n > 1 and band != "none":
            ax.fill_between(grid * scale, low, high, color=color, alpha=0.2, lw=0)
    for (label, points), marker in zip(references or [], "o^sDv*" * 10):
        xs, ys = np.array(points, dtype=float).T
        ax.plot(xs * scale, ys, linestyle="none", marker=marker, markersize=8, markerfacecolor="none",
                markeredgewidth=1.5, color="black", label=label)
    if metric.endswith("success_rate"):
        ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(x_label)
    ax.set_ylabel(metric)
    spread = {"minmax": "min-max over seeds", "std": "±1 std over seeds", "none": ""}[band]
    ax.set_title(textwrap.fill(title or _title(runs, metric, spread), 70))  # within the figure's width
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    try:
        # the temporary file ends in the output's suffix too, for anything that looks at it; the format is given
        with atomic_path(output, suffix=True) as tmp:
            fig.savefig(tmp, format=image_format)
    except OSError as err:  # a full disk, no permission: nothing was written
        raise CLIError(f"cannot write {output} ({type(err).__name__}: {err}); a file already there is left as it "
                       "was") from None
    finally:
        plt.close(fig)
    return output


def _title(runs: list[Path], metric: str, spread: str) -> str:
    envs = sorted({read_config(find_seed_runs(run)[0]).env for run in runs})
    text = f"{', '.join(envs)}: {metric}"
    return f"{text} (mean, band: {spread})" if spread else text
