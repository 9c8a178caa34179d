"""The ``herl`` command (also ``python -m herl``): train, sweep, eval, plot, record, export, check-env, list.

Built on the standard library's argparse, so the command adds no dependency to herl. Each subcommand parses its
flags here and calls :mod:`herl.run`, where the work is done; mistakes a person can fix raise
:class:`herl.run.errors.CLIError`, printed as one message (exit status 2).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

from herl.run.errors import CLIError, herl_warnings_as_lines

EXAMPLES = """examples:
  herl train --env FetchReach-v4                       # the preset's algorithm and settings
  herl train --algo dqn --env herl/BitFlipping-v0 --set env.n_bits=15 --seed 0 1 2 --jobs 2
  herl train --resume runs/FetchReach-v4_sac_20260101-120000
  herl eval runs/FetchReach-v4_sac_20260101-120000 --episodes 50 --video reach.mp4
  herl plot runs/A runs/B -o curves.png
  herl record --env FetchPickAndPlace-v4 --policy scripted --episodes 100 -o demos/   # through herl train's env
  herl train --env FetchPickAndPlace-v4 --demos demos/     # HER + demonstrations, BC loss with the Q-filter
  herl export runs/FetchReach-v4_sac_20260101-120000 -o policy.onnx
  herl train --env FetchReach-v4 --workers 2                     # 2 Ray actors collect (herl[ray])
  herl sweep --env FetchReach-v4 --seeds 4                       # seeds in parallel on Ray Tune
  herl sweep --env FetchReach-v4 --search learning_rate=loguniform:1e-4:3e-3 --trials 20
  herl train --config sweeps/FetchReach-v4_sac_20260101-120000/best.toml
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="herl", description="Goal-conditioned RL with Hindsight Experience Replay.", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False,
    )
    from herl import __version__
    from herl.run.config import ALGOS

    parser.add_argument("--version", action="version", version=f"herl {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")

    train = commands.add_parser("train", help="train an agent; writes a run folder", allow_abbrev=False,
                                description="Train an agent. Settings come from the env's preset, then the flags, "
                                "then --set. Each seed gets RUN_DIR/seed_<S>/.")
    _add_settings_flags(train)
    train.add_argument("--seed", type=_seed, nargs="+", default=[0], metavar="S", help="one run per seed (default: 0)")
    train.add_argument("--run-dir", type=Path, metavar="DIR", help="run folder (default: runs/<env>_<algo>_<time>)")
    train.add_argument("--jobs", type=_positive_int, default=1, metavar="J", help="seeds trained in parallel processes")
    train.add_argument("--resume", type=Path, metavar="RUN_DIR",
                       help="continue a run (or every seed of one) from its last checkpoint")
    train.add_argument("--progress", choices=("auto", "bar", "log", "off"), default="auto",
                       help="progress display (auto: a bar on a terminal, lines otherwise)")
    train.add_argument("--workers", type=_non_negative_int, metavar="N",
                       help="Ray actors collecting episodes for the learner (needs herl[ray]; default 0: no Ray)")
    _add_ray_flags(train)
    train.set_defaults(func=_cmd_train)

    sweep = commands.add_parser(
        "sweep", help="seeds or a hyperparameter search in parallel, on Ray Tune (herl[ray])", allow_abbrev=False,
        description="Run the settings over seeds (--seeds N), or search them (--search, Optuna's sampler with ASHA "
        "early stopping), each trial an ordinary run folder in SWEEP_DIR/runs/. Writes SWEEP_DIR/summary.csv and "
        "SWEEP_DIR/best.toml (for herl train --config).")
    _add_settings_flags(sweep)
    what = sweep.add_mutually_exclusive_group()
    what.add_argument("--seeds", type=_positive_int, metavar="N", help="run the settings over seeds 0..N-1")
    what.add_argument("--search", action="append", metavar="KEY=DIST:ARGS",
                      help="a setting to search: uniform:LOW:HIGH, loguniform:LOW:HIGH, int:LOW:HIGH, "
                      "logint:LOW:HIGH, choice:A,B,... (repeatable)")
    sweep.add_argument("--trials", type=_positive_int, default=20, metavar="N",
                       help="settings sampled by --search (default: 20)")
    sweep.add_argument("--seed", type=_seed, default=0, metavar="S", help="the seed of --search trials, and of "
                       "the sampler (default: 0)")
    sweep.add_argument("--metric", default="eval/success_rate", help="what --search optimizes and the summary "
                       "ranks by (default: eval/success_rate)")
    sweep.add_argument("--mode", choices=("max", "min"), default="max", help="maximize or minimize the metric")
    sweep.add_argument("--scheduler", choices=("asha", "none"), default="asha",
                       help="stop bad --search trials early on their eval curve (default: asha)")
    sweep.add_argument("--max-failures", type=_non_negative_int, default=2, metavar="N",
                       help="times a crashed trial is retried from its last checkpoint (default: 2)")
    sweep.add_argument("--sweep-dir", type=Path, metavar="DIR",
                       help="sweep folder (default: sweeps/<env>_<algo>_<time>)")
    sweep.add_argument("--resume", type=Path, metavar="DIR", help="continue a sweep: unfinished trials resume "
                       "from their last checkpoint, finished ones are kept")
    _add_ray_flags(sweep)
    sweep.set_defaults(func=_cmd_sweep)

    evaluate = commands.add_parser("eval", help="evaluate a model or run: success rate, return, length",
                                   allow_abbrev=False)
    evaluate.add_argument("target", type=Path, metavar="MODEL_OR_RUN",
                          help="a model .zip, a run folder, a checkpoint (RUN/checkpoints/step_N) or a folder of seeds")
    evaluate.add_argument("--episodes", type=_positive_int, default=50, help="episodes per model (default: 50)")
    evaluate.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=True,
                          help="act with the deterministic policy (default: yes)")
    evaluate.add_argument("--env", metavar="ID", help="env id (default: the run's; needed for a bare model file)")
    evaluate.add_argument("--set", action="append", default=[], metavar="env.NAME=VALUE", help="env arguments")
    evaluate.add_argument("--seed", type=_seed, default=0, help="seed of the evaluation episodes (default: 0)")
    evaluate.add_argument("--device", type=_device, default="auto", help="torch device (default: auto)")
    evaluate.add_argument("--video", type=Path, metavar="OUT.mp4", help="also record episodes to a .mp4 or .gif")
    evaluate.add_argument("--video-episodes", type=_positive_int, default=None, metavar="N",
                          help="episodes in the video (default: 3, or --episodes if fewer)")
    evaluate.set_defaults(func=_cmd_eval)

    plot = commands.add_parser("plot", help="learning curves of runs, mean and spread over seeds", allow_abbrev=False)
    plot.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR", help="run folders (each may hold several seeds)")
    plot.add_argument("-o", "--output", type=Path, default=Path("curves.png"), help="image file (default: curves.png)")
    plot.add_argument("--metric", default="eval/success_rate", help="progress.csv column (default: eval/success_rate)")
    plot.add_argument("--x", choices=("steps", "time"), default="steps", help="x axis: env steps or wall time")
    plot.add_argument("--band", choices=("minmax", "std", "none"), default="minmax",
                      help="spread over seeds (default: minmax)")
    plot.add_argument("--label", action="extend", nargs="+", metavar="TEXT",
                      help="legend labels, one per run, in order (--label A B, or --label A --label B)")
    plot.add_argument("--title", help="figure title")
    plot.add_argument("--reference", action="append", metavar="LABEL=X:Y,...",
                      help="points to mark for comparison, e.g. a peer's published results: "
                      "'zoo TQC=100000:0.6,200000:0.95' (repeatable)")
    plot.set_defaults(func=_cmd_plot)

    check = commands.add_parser("check-env", help="check that an env can be trained with HER", allow_abbrev=False)
    check.add_argument("env", metavar="ID", help="gymnasium env id, e.g. FetchReach-v4, or MODULE:ID for an env "
                       "of your own (its module is imported, as herl train --env does)")
    check.add_argument("--set", action="append", default=[], metavar="env.NAME=VALUE", help="env arguments")
    check.add_argument("--steps", type=_positive_int, default=50, help="random steps checked (default: 50)")
    check.set_defaults(func=_cmd_check_env)

    rec = commands.add_parser("record", help="record demonstrations (a Minari dataset) from a scripted expert or a model",
                              allow_abbrev=False, description="Record demonstrations through the env herl train builds "
                              "with the same --env, --preset, --algo and --set (its action repeat and time feature, "
                              "which the dataset's metadata names and herl train --demos checks).")
    rec.add_argument("--env", required=True, metavar="ID", help="env id, e.g. FetchPickAndPlace-v4")
    rec.add_argument("--policy", default="scripted", metavar="scripted|MODEL",
                     help="herl's scripted expert for the env (Fetch tasks), or a model file or run folder")
    rec.add_argument("--episodes", type=_positive_int, default=100, help="episodes to record (default: 100)")
    rec.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="dataset folder to write")
    rec.add_argument("--seed", type=_seed, default=0, help="seed of the first episode (default: 0)")
    rec.add_argument("--successful-only", action="store_true", help="keep only successful episodes (runs more)")
    rec.add_argument("--algo", type=str.lower, choices=ALGOS, help="the algorithm whose preset settings choose the env (default: "
                     "the preset's), as in herl train")
    rec_preset = rec.add_mutually_exclusive_group()
    rec_preset.add_argument("--preset", metavar="NAME", help="the preset whose env settings (action repeat, time "
                            "feature, ...) the env gets, as in herl train (default: the one for the env)")
    rec_preset.add_argument("--config", type=Path, metavar="FILE.toml", help="a preset file of your own, as in herl "
                            "train")
    rec.add_argument("--set", action="append", default=[], metavar="env.NAME=VALUE",
                     help="env settings, after the preset's, as in herl train (e.g. env.time_feature=false)")
    rec.add_argument("--device", type=_device, default="auto", help="torch device for a model (default: auto)")
    rec.set_defaults(func=_cmd_record)

    exp = commands.add_parser("export", help="a model's deterministic policy as ONNX or TorchScript", allow_abbrev=False)
    exp.add_argument("target", type=Path, metavar="MODEL_OR_RUN", help="a model .zip or a run folder")
    exp.add_argument("-o", "--output", type=Path, required=True, help="file to write, e.g. policy.onnx or policy.pt")
    exp.add_argument("--format", choices=("onnx", "torchscript"),
                     help="default: torchscript for .pt/.pth/.ts files, onnx otherwise")
    exp.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                     help="compare onnxruntime's actions with predict's on 1,000 observations (default: yes)")
    exp.add_argument("--device", type=_device, default="cpu", help="torch device to export from (default: cpu)")
    exp.set_defaults(func=_cmd_export)

    listing = commands.add_parser("list", help="envs with a preset, algorithms, goal strategies", allow_abbrev=False)
    listing.set_defaults(func=_cmd_list)
    return parser


def _add_settings_flags(train: argparse.ArgumentParser) -> None:
    """The flags that choose a run's settings (train and sweep)."""
    from herl.run.config import ALGOS

    train.add_argument("--algo", type=str.lower, choices=ALGOS, help="algorithm (default: the preset's)")
    train.add_argument("--env", metavar="ID", help="gymnasium env id, e.g. FetchReach-v4 or herl/BitFlipping-v0 "
                       "(with --resume: the run's own id, which confirms importing a module:Id env's module)")
    preset = train.add_mutually_exclusive_group()
    preset.add_argument("--preset", metavar="NAME", help="preset to use (default: the one for the env; see herl list)")
    preset.add_argument("--config", type=Path, metavar="FILE.toml",
                        help="a preset file of your own (the presets' TOML format, e.g. a sweep's best.toml); "
                        "--env defaults to its env")
    train.add_argument("--timesteps", type=_positive_int, metavar="N", help="env steps to train for")
    train.add_argument("--n-envs", type=_positive_int, metavar="N", help="envs stepped together")
    her = train.add_mutually_exclusive_group()
    her.add_argument("--her", metavar="STRATEGY:K", help="relabel with future|final|episode|random, K goals per "
                     "transition (default: on for goal envs, future:4 unless the preset says otherwise)")
    her.add_argument("--no-her", action="store_true", help="plain replay, no relabeling")
    train.add_argument("--demos", metavar="DIR", help="learn from demonstrations too (a dataset folder from herl record, "
                       "or scripted[:N]: N episodes of herl's scripted Fetch expert, default 100, recorded in the run): "
                       "they get their own store in the HER buffer, 1/8 of each batch (demos.batch_ratio), and the "
                       "actor a behaviour-cloning loss with the Q-filter (bc_loss_weight=1; ddpg, td3, sac, tqc)")
    train.add_argument("--device", type=_device, metavar="D", help="torch device: auto, cpu, cuda, cuda:1, ...")
    train.add_argument("--threads", type=_positive_int, metavar="N",
                       help="torch CPU threads per run (default: 1, fastest for small networks)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="any setting, e.g. learning_rate=1e-3, env.n_bits=15, her.n_sampled_goal=8, "
                       "policy.net_arch=[64,64], eval.freq=1000 (repeatable; a wrong key lists the valid ones)")


def _positive_int(text: str, low: int = 1) -> int:
    try:
        number = float(text) if "e" in text.lower() else None  # 1e6 steps; 2.5e0 is no whole number, 1e400 too many
        value = int(text) if number is None else int(number)
        if number is not None and number != value:
            raise ValueError(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected a number >= {low}, got {value}")
    return value


def _device(text: str) -> str:
    """A torch device name, checked when the command line is read (a wrong one is the flag's fault, not a file's)."""
    if text != "auto":
        import torch

        try:
            torch.device(text)
        except (RuntimeError, TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{text!r} is no torch device: use auto, cpu, cuda or cuda:<index>") from None
    return text


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed is a whole number >= 0, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    return _positive_int(text, low=0)


def _add_ray_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", metavar="auto|HOST:PORT|ray://HOST:PORT",
                        help="run on an existing Ray cluster (default: a local Ray started by herl)")
    parser.add_argument("--cpus", type=_positive_int, metavar="N",
                        help="CPUs of the local Ray herl starts (default: all of this machine's)")


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, but arguments a command does not take are refused by that command's parser (its
    usage, not herl's), with the closest flag it has: ``herl train --seeds 2`` (a ``herl sweep`` flag) names
    ``--seed``."""
    from herl.errors import did_you_mean

    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    commands = next((action.choices for action in parser._actions if isinstance(action, argparse._SubParsersAction)), {})
    command = commands.get(args.command, parser)
    flags = [flag for action in command._actions for flag in action.option_strings if flag.startswith("--")]
    unknown = [text.partition("=")[0] for text in extra if text.startswith("--")]
    command.error(f"unrecognized arguments: {' '.join(extra)}{did_you_mean(unknown, flags)}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    restore_warnings = herl_warnings_as_lines(args.command)
    # called with arguments (from Python, not as the process's command), put back the handlers of SIGTERM and SIGINT
    # that a stopped run leaves for the process's exit
    restore_signals = _signal_handlers() if argv is not None else lambda: None
    try:
        return args.func(args) or 0
    except CLIError as err:
        print(f"herl {args.command}: error: {err}", file=sys.stderr)
        return 2
    except ImportError as err:  # an optional package the command needs (herl's message names the pip command)
        print(f"herl {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno is None:
            raise
        # the file system's refusal (a file where a folder should be, no permission, a read-only or full disk): what
        # was written before stays (files are written to temporary names and renamed)
        print(f"herl {args.command}: error: {err.strerror}: {err.filename or ''}"
              + (f" -> {err.filename2}" if err.filename2 else ""), file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        print(f"\nherl {args.command}: interrupted" + (f": {err}" if str(err) else ""), file=sys.stderr)
        return 130
    finally:
        restore_warnings()
        restore_signals()


def _signal_handlers() -> Callable[[], None]:
    """The function that puts back this moment's handlers of SIGTERM and SIGINT (main thread only)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for signum, handler in handlers.items():
            if handler is not None:  # None: a handler set outside Python, which cannot be put back from it
                signal.signal(signum, handler)

    return restore


# ---------------------------------------------------------------------------------------------------------------------
# train


def _cmd_train(args: argparse.Namespace) -> int:
    from herl.run.envs import action_repeat
    from herl.run.folders import (CONFIG_FILE, PLAN_FILE, find_seed_runs, planned_runs, read_config, seed_order,
                                   write_plan)
    from herl.run.train import run_parallel

    if args.resume is not None:
        start_only = {"--algo": args.algo, "--preset": args.preset, "--config": args.config,
                      "--workers": args.workers, "--n-envs": args.n_envs, "--her": args.her,
                      "--no-her": args.no_her or None, "--demos": args.demos, "--device": args.device,
                      "--threads": args.threads, "--run-dir": args.run_dir, "--set": args.set or None}
        given = [flag for flag, value in start_only.items() if value is not None]
        if given or args.seed != [0]:
            raise CLIError(f"--resume continues a run with its own settings; it takes --timesteps, --jobs, "
                           f"--progress, --address, --cpus and --env (to confirm its env), not {', '.join(given) or '--seed'}")
        pending = planned_runs(args.resume)  # seeds the stopped command never reached: started now
        if args.timesteps is not None:
            pending = {run: dataclasses.replace(config, timesteps=args.timesteps) for run, config in pending.items()}
        run_configs = {run: read_config(run) for run in find_seed_runs(args.resume, planned=bool(pending))}
        # before any worker makes the env, which would import a module:Id env's module
        for run, config in [*run_configs.items(), *pending.items()]:
            env_id = config.env
            if args.env is None:
                _confirm_env_module(env_id, run)
            elif args.env != env_id:
                raise CLIError(f"{run} trains the env {env_id!r}; with --resume, --env only confirms that id "
                               f"(--env {shlex.quote(env_id)}), it cannot change it")
        n_runs = len(run_configs) + len(pending)
        parallel = min(args.jobs, n_runs)
        started = f" ({len(pending)} of them not started before: {', '.join(run.name for run in pending)})" \
            if pending else ""
        if n_runs == 1:
            print(f"herl train: resuming 1 run in {args.resume}{started}", flush=True)
        else:
            pace = f"{parallel} at once" if parallel > 1 else f"one at a time (--jobs {n_runs} trains them at once)"
            print(f"herl train: resuming {n_runs} runs in {args.resume}{started}, {pace}", flush=True)
        every = [*run_configs.values(), *pending.values()]
        # a started run keeps its threads, which a bit-exact continuation needs (a parallel reduction sums in
        # another order with another count); a run not started yet is fitted to the cores as a new one
        for threads in sorted({config.threads for config in run_configs.values()}):
            _threads_beside(threads, parallel, explicit=True, resumed=True)
        fits = {threads: _threads_beside(threads, parallel, explicit=False)
                for threads in sorted({config.threads for config in pending.values()})}
        workers = max(config.workers for config in every)
        jobs = [(_runner(config.env, "resume_run"), {"run_dir": run, "timesteps": args.timesteps,
                                                      "progress": args.progress,
                                                      **_worker_learner(config.workers and workers)})
                for run, config in run_configs.items()]
        jobs += [(_runner(config.env, "start_run"),
                  {"config": config if fits[config.threads] is None else dataclasses.replace(
                      config, threads=fits[config.threads]),
                   "run_dir": run, "progress": args.progress, **_worker_learner(config.workers and workers)})
                 for run, config in pending.items()]
        jobs.sort(key=lambda job: seed_order(Path(job[1]["run_dir"])))
        with _ray_for(args, workers):
            _print_summaries(run_parallel(jobs, args.jobs))
        return 0
    configs, run_dir = _train_configs(args)
    configs = _share_cores(args, configs)
    clash = next((folder for folder in (run_dir, *run_dir.parents) if folder.exists() and not folder.is_dir()), None)
    if clash is not None:
        raise CLIError(f"--run-dir {run_dir}: {clash} is a file, not a folder: choose another --run-dir")
    made = [folder for folder in run_dir.parents if not folder.exists()]  # deepest first; removed if no run starts
    if args.run_dir is None:  # named to the second: a command started in the same second must not share it
        run_dir = _claim_default_folder(run_dir)
        made.insert(0, run_dir)

    existing = [run_dir / f"seed_{c.seed}" for c in configs if (run_dir / f"seed_{c.seed}" / CONFIG_FILE).exists()]
    if existing:
        raise CLIError(f"{existing[0]} already holds a run: continue it with `herl train --resume "
                       f"{shlex.quote(str(run_dir))}`, or "
                       "choose another --run-dir")
    config = configs[0]
    her = ""
    if config.her:
        share = config.her.desired_goal_share
        her = f" + HER ({config.her.strategy}, k={config.her.n_sampled_goal}" + (
            f", {share:g} of them other episodes' desired goals)" if share else ")")
    if config.demos is not None:
        her += f" + demos ({config.demos.path}, bc_loss_weight={config.hyperparameters.get('bc_loss_weight', 0.0)})"
    preset = f", preset {config.preset}" if config.preset else ""
    seeds = " ".join(str(c.seed) for c in configs)
    repeat = action_repeat(config.env_kwargs)
    steps = (f"{config.timesteps:,} decisions (action repeat {repeat}: up to {config.timesteps * repeat:,} env steps)"
             if repeat > 1 else f"{config.timesteps:,} steps")
    if config.batched is not None:
        steps += f" of {config.n_envs:,} batched envs"
    print(f"herl train: {config.algo.upper()}{her} on {config.env}{preset}, {steps}, seed(s) {seeds} -> {run_dir}",
          flush=True)
    jobs = [(_runner(c.env, "start_run"), {"config": c, "run_dir": run_dir / f"seed_{c.seed}",
                                            "progress": args.progress, **_worker_learner(config.workers)})
            for c in configs]
    if not run_dir.exists():
        made.insert(0, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_plan(run_dir, {f"seed_{c.seed}": c for c in configs})  # so that --resume starts what a stop left unstarted
    try:
        with _ray_for(args, config.workers):
            _print_summaries(run_parallel(jobs, args.jobs))
    except BaseException:
        if not any((run_dir / f"seed_{c.seed}" / CONFIG_FILE).exists() for c in configs):
            # no run started (a setting refused when the model is built): nothing to resume, no folder to leave
            (run_dir / PLAN_FILE).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                for folder in made:
                    folder.rmdir()  # not empty (something else wrote there): stops, leaving it
        raise
    quoted = shlex.quote(str(run_dir))
    print(f"curves: herl plot {quoted}    evaluation: herl eval {quoted}    tensorboard --logdir {quoted}")
    return 0


def _claim_default_folder(path: Path) -> Path:
    """``path``, or ``path_2``, ``path_3``, ...: the first one this process creates itself."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        candidate = path if n == 1 else path.with_name(f"{path.name}_{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise CLIError(f"{path.parent} holds {path.name} and 998 more of its name: give --run-dir")


def _runner(env_id: str, name: str) -> Any:
    """``start_run`` or ``resume_run`` for a run on ``env_id``: :mod:`herl.run.batched`'s for a batched env (whose
    runs build on herl.run.train's, which therefore cannot send them there itself), :mod:`herl.run.train`'s else."""
    from herl.batched.registry import is_batched_env

    if is_batched_env(env_id):
        from herl.run import batched

        return getattr(batched, name)
    from herl.run import train

    return getattr(train, name)


def _share_cores(args: argparse.Namespace, configs: list[Any]) -> list[Any]:
    """The configs of runs trained ``--jobs`` at a time, with each run's torch threads lowered to fit the CPU cores
    (a preset's two threads are for a run that has the machine to itself), unless the command asked for them."""
    from herl.run.config import parse_assignment

    explicit = args.threads is not None or any(parse_assignment(text)[0] == "threads" for text in args.set)
    asked = configs[0].threads  # the seeds of one command share their settings
    threads = _threads_beside(asked, min(args.jobs, len(configs)), explicit=explicit)
    if threads is None:
        return configs
    note = (f"threads={threads} per run, not the settings' {asked}: fitted to the CPU cores free when the run started "
            "(--threads N chooses)")
    return [dataclasses.replace(c, threads=threads, notes=(*c.notes, note)) for c in configs]


def _threads_beside(threads: int, parallel: int, *, explicit: bool, resumed: bool = False) -> int | None:
    """The torch threads for a run of ``threads`` trained beside ``parallel - 1`` others when they are too many for
    the CPU cores (None when they fit, or when the command asked for them or ``resumed`` runs keep theirs: then a note
    says what they cost)."""
    from herl.run.train import threads_per_run
    from herl.utils import available_cpus, busy_cores, free_cores

    cpus = available_cpus()
    if threads <= 1:
        return None
    busy = busy_cores()
    free = free_cores(cpus, busy)
    fit = threads_per_run(threads, parallel, free)
    if fit == threads:
        return None
    why = (f"{parallel} runs at once share {cpus} CPU cores" if free == cpus else
           f"other work keeps {busy:.1f} of the {cpus} CPU cores busy" + (f" and {parallel} runs share the rest"
                                                                         if parallel > 1 else ""))
    if resumed:
        print(f"herl train: note: {threads} torch threads per run, the runs' own (a resumed run keeps them, to "
              f"continue exactly as it would have), but {why}: threads beyond the free cores slow every run "
              f"several-fold (docs/cli.md, \"Threads\"); resume fewer runs at once (--jobs) or when cores are free",
              file=sys.stderr, flush=True)
        return None
    if explicit:
        print(f"herl train: note: {threads} torch threads per run, as asked, but {why}: threads beyond the free cores "
              f"slow every run several-fold (docs/cli.md, \"Threads\"); --threads {fit} fits", file=sys.stderr,
              flush=True)
        return None
    print(f"herl train: note: {fit} torch thread(s) per run, not {threads}: {why}", file=sys.stderr, flush=True)
    return fit


def _worker_learner(workers: int) -> dict[str, Any]:
    """The ``worker_learner`` argument of a run with workers: herl.distributed, which only the command line imports
    (only then: Ray is imported for runs with workers alone)."""
    if not workers:
        return {}
    from herl.distributed.runs import WORKER_LEARNER

    return {"worker_learner": WORKER_LEARNER}


def _ray_for(args: argparse.Namespace, workers: int) -> Any:
    """A Ray session for runs with workers (Ray is imported only then); --address and --cpus need workers."""
    import contextlib

    if not workers:
        if args.address is not None or args.cpus is not None:
            raise CLIError("--address and --cpus say where the workers run: add --workers N (or use herl sweep)")
        return contextlib.nullcontext()
    if args.jobs > 1:
        raise CLIError("--workers trains one seed at a time (its actors take the CPUs): drop --jobs, or run seeds "
                       "in parallel with `herl sweep --seeds N`")
    from herl.distributed import ray_session

    # checks the CPUs for the workers before a local Ray starts and before any run folder is made
    return ray_session(args.address, args.cpus, what="--workers", workers=workers)


def _train_configs(args: argparse.Namespace) -> tuple[list[Any], Path]:
    """One resolved config per seed, and the run folder, from the train flags."""
    from herl.run.config import build_config
    from herl.run.envs import check_her_env
    from herl.run.train import default_run_dir

    settings = _settings(args)
    configs = [build_config(seed=seed, **settings) for seed in dict.fromkeys(args.seed)]
    if configs[0].her is not None and configs[0].batched is None:  # a batched env's goals are checked by its class
        check_her_env(configs[0].env, dict(configs[0].env_kwargs), copy_info_dict=configs[0].her.copy_info_dict)
    if configs[0].demos is not None:  # before any run folder: each run checks again (herl.run.start_run)
        from herl.run.demos import check_demos_env
        from herl.run.envs import make_env

        env = make_env(configs[0].env, dict(configs[0].env_kwargs))
        try:
            check_demos_env(configs[0], env)
        finally:
            env.close()
    return configs, args.run_dir or default_run_dir(configs[0].env, configs[0].algo)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """What the settings flags (train and sweep) say: ``build_config``'s arguments but the seed."""
    from herl.run.config import DEFAULT_BC_LOSS_WEIGHT, parse_assignment, parse_her
    from herl.run.envs import is_goal_env, make_env, resolve_env_id
    from herl.run.presets import read_preset_file
    from herl.run.train import check_algorithm_fits

    preset = read_preset_file(args.config) if args.config else None
    env = args.env or (preset.env_id() if preset else None)
    if env is not None and not args.env:
        _confirm_env_module(env, args.config, run=False)  # a file names it (a sweep's best.toml)
    if env is None:
        raise CLIError("say which env to train on with --env ID (or continue a run with --resume RUN_DIR); "
                       "`herl list` shows the envs with a preset")
    batched = _batched_id(env)
    env_id = env if batched else resolve_env_id(env)
    preset = preset or _preset(args, env_id)
    set_layer = dict(parse_assignment(text) for text in args.set)
    flags: dict[str, Any] = {}
    for key, value in (("timesteps", args.timesteps), ("n_envs", args.n_envs), ("device", args.device),
                       ("threads", args.threads), ("workers", getattr(args, "workers", None))):
        if value is not None:
            flags[key] = value
    if args.her:
        flags.update(parse_her(args.her))
    if args.no_her:
        flags["her.enabled"] = False
    # The env's arguments are needed to look at it before the algorithm (hence its preset section) is known.
    env_kwargs = {k[4:]: v for k, v in {**(preset.common if preset else {}), **set_layer}.items() if k.startswith("env.")}
    if batched:  # one env, on the CPU: checks the id and the env settings before anything else is built
        from herl.run.batched import make_env as make_batched_env

        action_space = make_batched_env(env_id, env_kwargs, 1, "cpu").single_action_space
        algo = args.algo or (preset.algo if preset and preset.algo else _default_algo(action_space))
        check_algorithm_fits(algo, env_id, action_space)
        goal_env = True
    else:
        probe = make_env(env_id, env_kwargs)
        try:
            algo = args.algo or (preset.algo if preset and preset.algo else _default_algo(probe.action_space))
            check_algorithm_fits(algo, env_id, probe.action_space)
            goal_env = is_goal_env(probe)
        finally:
            probe.close()
    layers = [*(preset.layers(algo) if preset else []), ("the command-line flags", flags), ("--set", set_layer)]
    if args.demos is not None:
        # The dataset is a flag, so it wins over a preset's (a *_demos preset's scripted expert; build_config notes
        # it); the loss weight --demos brings is a default, which a preset or --set may change.
        flags["demos.path"] = _demo_path(args.demos, algo)
        layers.insert(0, ("--demos", {"bc_loss_weight": DEFAULT_BC_LOSS_WEIGHT}))
    return {"algo": algo, "env": env_id, "layers": layers, "goal_env": goal_env,
            "preset": preset.name if preset else None}


def _preset(args: argparse.Namespace, env_id: str) -> Any:
    """The preset of the command (train, sweep, record): ``--config FILE``, ``--preset NAME``, else the env's own
    (None when it has none)."""
    from herl.run.presets import get_preset, preset_for_env, read_preset_file

    if args.config:
        return read_preset_file(args.config)
    return get_preset(args.preset) if args.preset else preset_for_env(env_id)


def _demo_path(path: str, algo: str) -> str:
    """The dataset of ``--demos PATH``: an absolute path, so that ``--resume`` finds it from anywhere."""
    from herl.run.config import DEMO_ALGOS

    if algo not in DEMO_ALGOS:
        raise CLIError(f"--demos adds a behaviour-cloning loss to an actor: use --algo {', '.join(DEMO_ALGOS)} "
                       f"(not {algo})")
    local = Path(path).expanduser()
    if local.exists():  # a dataset folder; "scripted[:N]" is recorded into the run folder when the run starts
        path = str(local.resolve())
    return path


def _default_algo(action_space: Any) -> str:
    from gymnasium import spaces

    return "dqn" if isinstance(action_space, spaces.Discrete) else "sac"


def _batched_id(env_id: str) -> bool:
    """Whether ``env_id`` names a batched env, or looks meant to (so that a misspelt one is told the batched ids)."""
    from herl.batched.registry import is_batched_env

    return is_batched_env(env_id) or env_id.startswith("herl/Batched")


def _print_summaries(summaries: list[Any]) -> None:
    from herl.run.train import SUCCESS_THRESHOLD

    rows = [[s.seed, f"{s.steps:,}", f"{s.wall_time:.0f} s", _fmt(s.final_success), _fmt(s.best_success),
             "-" if s.first_step_at_threshold is None else f"{s.first_step_at_threshold:,}", s.run_dir]
            for s in summaries]
    print(format_table(["seed", "steps", "wall time", "final success", "best success",
                        f"first step >= {SUCCESS_THRESHOLD}", "run folder"], rows))
    for note in dict.fromkeys(note for s in summaries for note in s.notes):
        print(f"note: {note}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain text table, columns aligned (numbers to the right)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(values, widths)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _numeric(text: str) -> bool:
    return text.replace(",", "").replace(".", "").replace(" s", "").replace("-", "").replace("±", "").strip().isdigit()


def _cmd_sweep(args: argparse.Namespace) -> int:
    from herl.distributed.cluster import require_ray

    require_ray("herl sweep")
    from herl.distributed.sweep import SweepSpec, parse_search, read_spec, resume_sweep, run_sweep

    if args.resume is not None:
        settings_flags = {"--algo": args.algo, "--timesteps": args.timesteps, "--n-envs": args.n_envs, "--her": args.her,
                          "--no-her": args.no_her or None, "--device": args.device, "--threads": args.threads,
                          "--set": args.set or None, "--seeds": args.seeds, "--search": args.search,
                          "--sweep-dir": args.sweep_dir}
        given = [flag for flag, value in settings_flags.items() if value is not None]
        if given:
            raise CLIError(f"--resume continues a sweep with its own settings (its sweep.json); it takes --address "
                           f"and --cpus, not {', '.join(given)}")
        if args.env is None:  # before any trial makes the env, which would import a module:Id env's module
            _confirm_env_module(read_spec(args.resume).env, args.resume)
        result = resume_sweep(args.resume, env=args.env, preset=args.preset or (str(args.config) if args.config else None),
                              address=args.address, cpus=args.cpus)
    else:
        settings = _settings(args)
        search = [parse_search(text, settings["algo"]) for text in args.search or []]
        spec = SweepSpec.create(settings, seeds=args.seeds, search=search, trials=args.trials, seed=args.seed,
                                metric=args.metric, mode=args.mode, scheduler=args.scheduler,
                                max_failures=args.max_failures)
        result = run_sweep(spec, args.sweep_dir or spec.default_dir(), address=args.address, cpus=args.cpus)
    print(format_table(result.headers, result.rows))
    for line in result.notes:
        print(line)
    if result.rows and not result.evaluated:
        print("herl sweep: error: no trial reached an evaluation (their status above; each trial's error is in "
              "Ray's output before it)", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------------------------------------------------
# eval, plot


def _env_set(assignments: list[str]) -> dict[str, Any]:
    from herl.run.config import parse_assignment

    kwargs = {}
    for text in assignments:
        key, value = parse_assignment(text)
        if not key.startswith("env.") or key == "env.":
            raise CLIError(f"this command's --set takes env arguments only (env.NAME=VALUE), got {key!r}")
        kwargs[key[4:]] = value
    return kwargs


def _check_video_output(args: argparse.Namespace, models: list[Path]) -> None:
    """``--video`` names a new file or one of the user's, never a model being evaluated or a file of its run folder;
    ``--video-episodes`` are some of the evaluated episodes (the frames are held in memory until the file is
    written)."""
    from herl.run.folders import run_folder_of

    if args.video_episodes is not None and args.video_episodes > args.episodes:
        raise CLIError(f"--video-episodes {args.video_episodes} is more than the --episodes {args.episodes} evaluated: "
                       "the video shows some of them; raise --episodes or lower --video-episodes")
    video = args.video.resolve()
    for model in models:
        run = run_folder_of(model)
        if video == model.resolve() or (args.video.exists() and os.path.samefile(args.video, model)) or (
                run is not None and args.video.exists() and video.is_relative_to(run.resolve())):
            what = "the model evaluated" if run is None else f"a file of the run folder {run}"
            raise CLIError(f"--video {args.video} is {what}: write the video to another file")


def _cmd_eval(args: argparse.Namespace) -> int:
    from herl.run.evaluate import evaluate, find_models, load_model, record_video

    left_out: list[str] = []
    models = find_models(args.target, left_out=left_out)
    for message in left_out:
        print(f"herl eval: note: {message}", file=sys.stderr)
    env_kwargs = _env_set(args.set)
    if args.video is not None:
        _check_video_output(args, [item.path for item in models])
    results, video_done = [], False
    for item in models:
        env_id = args.env or item.env
        if env_id is None:
            raise CLIError(f"{item.path} is not in a run folder, so its env is unknown: pass --env ID")
        if args.env is None:
            _confirm_env_module(env_id, item.path)
        # the run's env settings are its env's: another env named with --env takes only the --set ones
        kwargs = {**(item.env_kwargs if env_id == item.env else {}), **env_kwargs}
        if _batched_id(env_id):
            from herl.run.batched import evaluate_model

            if args.video is not None:
                raise CLIError(f"{env_id} is a batched env, which draws no frames: leave out --video, or record the "
                               f"model on a gymnasium env of the same spaces (--env {_twin(env_id)})")
            model = load_model(item.path, args.device)
            results.append(evaluate_model(model, env_id, kwargs, episodes=args.episodes,
                                          deterministic=args.deterministic, seed=args.seed, name=item.name))
            continue
        model = load_model(item.path, args.device)
        results.append(evaluate(model, env_id, kwargs, episodes=args.episodes, deterministic=args.deterministic,
                                seed=args.seed, name=item.name))
        if args.video is not None and not video_done:  # the first model's episodes
            episodes = args.video_episodes or min(3, args.episodes)
            print(record_video(model, env_id, kwargs, args.video, episodes=episodes, deterministic=args.deterministic,
                               seed=args.seed))
            video_done = True
    rows = [[r.name, f"{r.steps:,}", r.episodes, _fmt(r.success_rate), _fmt_interval(r.success_interval),
             f"{r.mean_return:.2f} ± {r.std_return:.2f}", f"{r.mean_length:.1f}"] for r in results]
    rates = [r.success_rate for r in results if r.success_rate is not None]
    if len(results) > 1 and len(rates) == len(results):
        rows.append([f"median of {len(rates)}", "", "", _fmt(statistics.median(rates)), "", "", ""])
    print(format_table(["model", "trained steps", "episodes", "success rate", "95% interval", "mean return",
                        "episode length"], rows))
    return 0


def _twin(env_id: str) -> str:
    from herl.batched.registry import GYMNASIUM_TWINS

    return GYMNASIUM_TWINS.get(env_id, "ID")


def _fmt_interval(interval: tuple[float, float] | None) -> str:
    return "-" if interval is None else f"{interval[0]:.2f}-{interval[1]:.2f}"


def _confirm_env_module(env_id: str, source: Path, *, run: bool = True) -> None:
    """An env id ``module:Id`` read from a run's config.json (or, ``run=False``, from the file ``source``: a preset
    file's only env) imports ``module``, which runs its code: ask first (or, without a terminal, refuse), unless the
    module is imported already or the user named the id with ``--env``. ``herl eval``, ``herl train --resume`` and
    ``--config`` without ``--env`` ask here."""
    import importlib.util

    module = env_id.rpartition(":")[0]
    if not module or module in sys.modules:
        return
    named_by = f"{source}'s config" if run else str(source)
    try:
        where = importlib.util.find_spec(module.split(".")[0])
    except (ImportError, ValueError):
        where = None
    if where is None:  # nothing to trust yet: the module is not where Python looks
        raise CLIError(f"{named_by} names the env {env_id!r}, whose module {module!r} is not found from here: "
                       f"add the folder that holds it to PYTHONPATH, then name the env with --env "
                       f"{shlex.quote(env_id)} (e.g. PYTHONPATH=DIR herl ... --env {shlex.quote(env_id)})")
    origin = getattr(where, "origin", None) or str(list(getattr(where, "submodule_search_locations", None) or []))
    question = (f"{named_by} names the env {env_id!r}: making it imports the Python module {module!r} "
                f"({origin}), which runs its code.")
    if sys.stdin is not None and sys.stdin.isatty():
        answer = input(f"{question} Import it? [y/N] ").strip().lower()
        if answer in ("y", "yes"):
            return
    raise CLIError(f"{question} Not imported: if you trust it, say so with --env {shlex.quote(env_id)}")


def _cmd_plot(args: argparse.Namespace) -> int:
    from herl.run.plot import parse_reference, plot_runs

    references = [parse_reference(text) for text in args.reference or []]
    output = plot_runs(args.runs, args.output, metric=args.metric, x=args.x, band=args.band, labels=args.label,
                       title=args.title, references=references)
    print(f"wrote {output}")
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    from herl.run.demos import record
    from herl.run.envs import resolve_env_id

    if _batched_id(args.env):  # before the id is resolved: batched ids are not gymnasium's
        raise CLIError(f"herl record plays gymnasium envs; {args.env} is a batched env: record the matching single env "
                       "(herl/PointReach-v0 for herl/BatchedPointReach-v0, herl/BitFlipping-v0 for bit flipping, "
                       "FetchPush-v4 for herl/MJXFetchPush-v0)")
    env_id = resolve_env_id(args.env)
    preset = _preset(args, env_id)
    set_layer = _env_set(args.set)
    if preset is None:
        env_kwargs, settings_from = set_layer, "no preset"
    else:
        algo = args.algo or preset.algo
        if algo is None:
            raise CLIError(f"{args.config} names no algo: add algo = \"tqc\" (or another) to it, or give --algo")
        env_kwargs = {**preset.env_kwargs(algo), **set_layer}
        settings_from = f"herl train's env with preset {preset.name}, {algo}" + (", then --set" if set_layer else "")
    print(record(env_id, args.policy, episodes=args.episodes, output=args.output, seed=args.seed,
                 env_kwargs=env_kwargs, successful_only=args.successful_only, device=args.device,
                 settings_from=settings_from))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from herl.run.demos import export

    print(export(args.target, args.output, fmt=args.format, check=args.check, device=args.device))
    return 0


# ---------------------------------------------------------------------------------------------------------------------
# check-env, list


def _cmd_check_env(args: argparse.Namespace) -> int:
    import warnings

    from herl.envs import GoalEnvError, check_goal_env
    from herl.envs.checks import action_space_fix
    from herl.run.envs import make_env

    if _batched_id(args.env):
        return _check_batched_env(args)
    env = make_env(args.env, _env_set(args.set))
    print(f"{args.env}\n  observation space: {env.observation_space}\n  action space: {env.action_space}")
    limit = env.spec.max_episode_steps if env.spec is not None else None
    print(f"  episode limit: {limit if limit is not None else 'none set by gymnasium'}")

    def check() -> None:
        env.reset(seed=0)
        env.action_space.seed(0)
        with warnings.catch_warnings():  # said below as a failure: herl train refuses such an env
            warnings.filterwarnings("ignore", message="no herl algorithm takes")
            check_goal_env(env, n_steps=args.steps)
        if limit is None:
            _check_episodes_end(env)
        fix = action_space_fix(env.action_space)
        if fix is not None:
            raise GoalEnvError(f"HER could relabel it, but {fix}")

    try:
        if not _reported_check(check):
            return 1
    finally:
        env.close()
    print(f"OK: {args.env} can be trained with HER (checked over {args.steps} random steps)")
    return 0


ENDING_CHECK_STEPS = 10_000
"""How many random steps ``herl check-env`` takes to see an episode end, in an env without a registered limit."""


def _check_episodes_end(env: Any) -> None:
    """A GoalEnvError unless an episode of ``env`` (which gymnasium sets no time limit) ends within
    :data:`ENDING_CHECK_STEPS` random steps."""
    from herl.envs import GoalEnvError
    from herl.run.envs import TIME_LIMIT_FIX

    env.reset(seed=0)
    for _ in range(ENDING_CHECK_STEPS):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            return
    raise GoalEnvError(f"no episode ended within {ENDING_CHECK_STEPS:,} random steps, and gymnasium sets the env no "
                       f"time limit: an episode that never ends holds herl's evaluations forever; {TIME_LIMIT_FIX}")


def _reported_check(check: Any) -> bool:
    """Run an env check: print ``FAIL: why`` and return False if it raises a GoalEnvError, or (after its traceback)
    if the env's own code raises; else print the goal-env warnings it gave and return True."""
    import traceback
    import warnings

    from herl.envs import GoalEnvError, GoalEnvWarning

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GoalEnvWarning)
            check()
    except GoalEnvError as err:
        print(f"FAIL: {err}")
        return False
    except Exception as err:  # the env's own code (its step, reset or compute_reward) failed
        traceback.print_exc()
        print(f"FAIL: the env raised {type(err).__name__}: {err} (traceback above)")
        return False
    for warning in caught:
        if issubclass(warning.category, GoalEnvWarning):
            print(f"warning: {warning.message}")
    return True


def _check_batched_env(args: argparse.Namespace) -> int:
    """check-env of a batched env id: 16 envs on the CPU through :func:`herl.batched.check_batched_goal_env`."""
    from herl.batched import check_batched_goal_env
    from herl.batched.registry import make_batched_env

    try:
        env = make_batched_env(args.env, 16, "cpu", **_env_set(args.set))
    except (TypeError, ValueError) as err:
        raise CLIError(str(err)) from None
    print(f"{args.env} (batched: 16 envs on the CPU)\n  observation space (each env): {env.single_observation_space}"
          f"\n  action space (each env): {env.single_action_space}\n  episode limit: {env.max_episode_steps}")
    if not _reported_check(lambda: check_batched_goal_env(env, steps=args.steps)):
        return 1
    print(f"OK: {args.env} can be trained with HER on batched envs (checked over {args.steps} steps of every env)")
    return 0


STRATEGIES = {
    "future": "a goal achieved later in the same episode (the HER paper's best; the default)",
    "final": "the goal achieved at the end of the episode",
    "episode": "a goal achieved anywhere in the same episode",
    "random": "a goal achieved anywhere in the replay buffer",
}
ALGORITHMS = {
    "dqn": "Deep Q-Network (Discrete actions), e.g. bit flipping",
    "ddpg": "Deep Deterministic Policy Gradient (Box actions), the HER paper's algorithm",
    "td3": "Twin Delayed DDPG (Box actions)",
    "sac": "Soft Actor-Critic (Box actions)",
    "tqc": "Truncated Quantile Critics: SAC with distributional critics (Box actions), zoo's Fetch algorithm",
    "crossq": "CrossQ: SAC with batch renormalization and no target networks (Box actions)",
}


def _cmd_list(args: argparse.Namespace) -> int:
    import importlib.util

    from herl.run.envs import PROVIDERS, action_repeat
    from herl.run.presets import load_presets

    rows = []
    for preset in load_presets().values():
        provider = next((p for p in PROVIDERS if any(e.startswith(p.prefixes) for e in preset.envs)), None)
        installed = provider is None or importlib.util.find_spec(provider.module) is not None
        needs = "" if installed else f"pip install 'herl[{provider.extra}]'"
        settings = {**preset.common, **preset.per_algo.get(preset.algo, {})}  # what the default algorithm runs
        env_kwargs = {k.removeprefix("env."): v for k, v in settings.items() if k.startswith("env.")}
        steps, repeat = settings.get("timesteps"), action_repeat(env_kwargs)
        steps_text = "" if not steps else f"{steps:,}" + (f" decisions (x{repeat})" if repeat > 1 else "")
        rows.append([preset.name, ", ".join(preset.envs) or "(--preset NAME)", preset.algo, steps_text,
                     preset.description, needs])
    print("Envs with a preset (herl train --env ID uses the preset matching ID):")
    print(_indent(format_table(["preset", "env ids", "algo", "steps", "what", "needs"], rows)))
    print("\nAlgorithms (--algo):")
    print(_indent(format_table(["name", "what"], [[k, v] for k, v in ALGORITHMS.items()])))
    print("\nGoal selection strategies (--her STRATEGY:K):")
    print(_indent(format_table(["name", "relabels a transition with"], [[k, v] for k, v in STRATEGIES.items()])))
    return 0


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


if __name__ == "__main__":
    sys.exit(main())
