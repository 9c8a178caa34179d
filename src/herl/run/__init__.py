"""What the ``herl`` command does: training runs (run folders, presets, checkpoints and exact resume), evaluation
and plots. :mod:`herl.cli` parses the command line and calls these modules."""

from herl.run.checkpoint import latest_checkpoint, load_checkpoint, write_checkpoint
from herl.run.config import TrainConfig, build_config
from herl.run.errors import CLIError, MissingExtraError
from herl.run.train import RunSummary, resume_run, start_run

__all__ = [
    "CLIError",
    "MissingExtraError",
    "RunSummary",
    "TrainConfig",
    "build_config",
    "latest_checkpoint",
    "load_checkpoint",
    "resume_run",
    "start_run",
    "write_checkpoint",
]
