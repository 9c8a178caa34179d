"""The error audit: bad input, hostile files and faults, tried as a careless user and a hostile file would, each case
classified automatically. Re-runnable; a few minutes in all.

    python benchmarks/error_audit.py                 # every case, one line each, then the summary
    python benchmarks/error_audit.py --only A0 B08   # cases whose id or title matches one of these regexes
    python benchmarks/error_audit.py --list          # the cases, without running them

Verdicts:

- CLEAR: herl refuses (or handles) it: its own exception type (``herl.errors.HerlError``; or a ``ValueError``,
  ``TypeError`` or ``AssertionError`` raised by herl's own code) or, for the command line, exit status 2 with one
  ``herl <command>: error:`` line and no traceback; the message names the cause (and what to do: each case checks the
  words it must hold), and nothing the user saved is lost or changed.
- WEAK: a raw traceback (an exception raised inside numpy, torch, zipfile, json, ray, h5py), or a message that does
  not name what the case expects (it blames the wrong thing).
- FAIL: data lost or changed, code executed from a file, a hang, a process that aborts, or a silently wrong result
  (accepted without a word).

The cases (152 = 41 + 111):

A01-A41, the new surfaces (export, sweeps, Ray workers, demonstration datasets) and the cases found on them: each
bullet of that audit is one case, or one per value or file it names (the full disk for TorchScript and ONNX; an export
onto its input by its path and through a link; the two malformed datasets; SAC's and DQN's predict; the five buffer
files; the three constructor arguments, rllte's add and SB2's predict), 26 in all. The 15 others are the clear cases
tried on the same surfaces, as the error catalogue lists them: export of a diverged model and into a missing folder;
a sweep resumed on a local Ray over crafted pickles; sweep folders damaged, naming a folder outside, importing a
module, of another env, already there, and an unknown --search key; more workers than CPUs and an unreachable
cluster; datasets with wide actions, an external link, a virtual dataset and NaN.

B001-B111, the first audit's 111 cases, reconstructed from its categories (its cases were never listed one by one):
every phrase of it becomes one or more concrete cases:

- B001-B007 (7): NaN or infinity from the env (observation, achieved goal, desired goal, reward), from compute_reward,
  and a loss (SAC's critic, DQN's Q-network).
- B008-B025 (18): hyperparameters that broke training, each value the issue names, through the Python API, ``--set``,
  a preset file and a model file.
- B026-B027 (2): a HER buffer whose episode book-keeping lies (on load, and edited in memory: sampling must end).
- B028-B029 (2): the run folder's lock (two ``--resume`` at once; a refused process leaves the holder's lock).
- B030-B035 (6): the cpprb and rllte adapters (a failed ``on_episode_end`` keeps the episode; counts 2.5 and "3").
- B036-B056 (21): model and buffer files: decompression bombs, absurd spaces, wrong shapes, missing and mistyped
  fields, NaN weights, settings that redirect writing, a folder, not a zip, truncated, huge layers, optimizer
  settings, arrays against config, a pickle member, a member named ``../``.
- B057-B065 (9): run folders: latest.json damaged or pointing outside, config.json damaged, checkpoints deleted,
  truncated or all damaged, stale temporary files, a ``module:Id`` env on eval and on resume.
- B066-B074 (9): buffers: compute_reward returning text, a fixed-size array, NaN, not vectorized; add() with text,
  None, NaN (for an int8 MultiBinary observation) and infinity; an offline buffer too small for its copies.
- B075-B079 (5): the command line's settings (``--set env.dim=abc``, ``policy.net_arch=64``, ``batch_size=1e400``,
  ``buffer_size=20``, a misspelt key).
- B080-B081 (2): predict with a missing key and a wrong inner shape.
- B082-B093 (12): the command line under real use: SIGTERM and Ctrl-C, an explicit buffer_size kept, ``--label A B``,
  fps after an evaluation, the ``module:Id`` suggestion, shell quoting, the licence string, an existing run folder,
  SIGKILL and resume (bit-identical), SIGTERM to ``--jobs``, a crash while checkpointing.
- B094-B111 (18): what the issue's "what holds" and "how to check it" promise: a pickle in a buffer file never
  unpickled, fuzzed model/buffer files (bytes, metadata, arrays), files of the stored rows only with new-file
  permissions, NaN at reset and in an info entry, and the errors of the catalogue that go with these (a bare model
  without --env, --resume with start-only flags or of no run, the wrong class, a newer format, a foreign zip, an eval
  video into a missing folder, ent_coef and misspelt keyword arguments).

C001-C008 (8): what two later audits found (a researcher building on herl as a library; users' own goal envs of
unusual forms), each a silent wrong result or a misleading error before its fix: a buffer subclass's model loaded
where its module is not imported, prioritized replay for SAC, NumPy-typed buffer settings in a file, a reward that
reads a string info entry, boolean goals, a Discrete goal's shape, MultiDiscrete actions at check-env, an env that
ends on success without compute_terminated.

Each case runs in a folder of its own under a temporary folder (command-line cases as ``python -m herl`` subprocesses)
with small budgets (BitFlipping, PointReach, a few hundred steps). The files are built with the test suite's own helpers
(tests/io, tests/demos, tests/training, tests/distributed), so the audit and the tests try the same files.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for _folder in ("tests/io", "tests/demos", "tests/cli", "tests/training", "tests/distributed", ""):
    sys.path.insert(0, str(ROOT / _folder))

CASE_SECONDS = 240  # a case running longer hangs (FAIL)
ERROR_LINE = re.compile(r"^herl [\w-]+: error: ")


# ---------------------------------------------------------------------------------------------------------------------
# verdicts


@dataclass
class Outcome:
    verdict: str
    detail: str


def clear(detail: str) -> Outcome:
    return Outcome("CLEAR", detail)


def weak(detail: str) -> Outcome:
    return Outcome("WEAK", detail)


def fail(detail: str) -> Outcome:
    return Outcome("FAIL", detail)


def _raised_by_herl(err: BaseException) -> bool:
    """Whether the innermost frame of ``err``'s traceback is herl's own code (not numpy's, torch's, zipfile's, ...)."""
    tb, last = err.__traceback__, None
    while tb is not None:
        last, tb = tb.tb_frame.f_code.co_filename, tb.tb_next
    import herl

    return last is not None and Path(last).resolve().is_relative_to(Path(herl.__file__).resolve().parent)


def _origin(err: BaseException) -> str:
    tb, last = err.__traceback__, None
    while tb is not None:
        last, tb = tb.tb_frame.f_code.co_filename, tb.tb_next
    return last or "?"


def judge(err: BaseException, *says: str) -> Outcome:
    """An exception herl let out: CLEAR when it is herl's own and its message matches each regex of ``says``."""
    from herl.errors import HerlError

    text = f"{type(err).__name__}: {' '.join([str(err), *getattr(err, '__notes__', [])])}"
    if not isinstance(err, HerlError) and not (isinstance(err, (ValueError, TypeError, AssertionError, OSError))
                                               and _raised_by_herl(err)):
        return weak(f"raw {text[:240]} (raised in {_origin(err)})")
    missing = [s for s in says if not re.search(s, text, re.S)]
    if missing:
        return weak(f"{text[:240]} -- does not say {missing}")
    return clear(text)


def refused(call: Callable[[], object], *says: str) -> Outcome:
    """``call()`` must raise herl's own error naming ``says``; returning means it was accepted silently (FAIL)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call()
    except Exception as err:  # noqa: BLE001 - judged
        return judge(err, *says)
    return fail("accepted without an error")


def warns(call: Callable[[], object], *says: str) -> Outcome:
    """``call()`` must succeed with a warning naming ``says`` (a file or buffer that works but is suspect)."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
    except Exception as err:  # noqa: BLE001 - judged
        return judge(err, *says)
    texts = [str(w.message) for w in caught]
    hit = [t for t in texts if all(re.search(s, t, re.S) for s in says)]
    return clear(f"warns: {hit[0]}") if hit else fail(f"no warning naming {list(says)} (warnings: {texts[:3]})")


def digest(path: Path) -> str | None:
    """What ``path`` holds (a file's bytes, a folder's names and bytes); None when it is gone."""
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    if path.is_dir():
        h = hashlib.sha256()
        for p in sorted(path.rglob("*")):
            h.update(str(p.relative_to(path)).encode())
            if p.is_file():
                h.update(p.read_bytes())
        return h.hexdigest()
    return None


class Kept:
    """The user's files that a case must leave exactly as they were."""

    def __init__(self, *paths: Path) -> None:
        self.before = {Path(p): digest(Path(p)) for p in paths}

    def lost(self) -> Outcome | None:
        for path, before in self.before.items():
            now = digest(path)
            if now != before:
                return fail(f"{path.name} was {'deleted' if now is None else 'changed'}")
        return None

    def then(self, outcome: Outcome) -> Outcome:
        return self.lost() or outcome


# ---------------------------------------------------------------------------------------------------------------------
# the command line


@dataclass
class Done:
    rc: int | None
    out: str
    err: str
    seconds: float


def herl(*args: object, cwd: Path, timeout: float = 200, preexec_fn: Callable[[], None] | None = None) -> Done:
    """``python -m herl ARGS`` in ``cwd``; rc None when it ran past ``timeout`` (then killed)."""
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "herl", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, preexec_fn=preexec_fn)
    except subprocess.TimeoutExpired as err:
        return Done(None, str(err.stdout or ""), str(err.stderr or ""), time.monotonic() - start)
    return Done(done.returncode, done.stdout, done.stderr, time.monotonic() - start)


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:240] if lines else ""


def judge_cli(done: Done, *says: str) -> Outcome:
    """A command that must stop with one ``herl CMD: error:`` line (status 2) naming ``says``."""
    if done.rc is None:
        return fail(f"still running after {done.seconds:.0f} s")
    if "Traceback (most recent call last)" in done.err:
        return weak(f"traceback, exit {done.rc}: {_tail(done.err)}")
    if done.rc == 0:
        return fail(f"exit 0: accepted ({_tail(done.out)})")
    if done.rc < 0 or done.rc > 128:
        return fail(f"exit {done.rc}: the process was killed or aborted ({_tail(done.err)})")
    err = done.err.splitlines()
    lines = [i for i, line in enumerate(err) if ERROR_LINE.match(line)]
    if done.rc != 2 or len(lines) != 1:
        return weak(f"exit {done.rc} with {len(lines)} error line(s): {_tail(done.err)}")
    message = err[lines[0]]  # and the indented lines that go on with it (a list of damaged checkpoints)
    for line in err[lines[0] + 1:]:
        if not line.startswith("  "):
            break
        message += "\n" + line
    missing = [s for s in says if not re.search(s, message)]
    if missing:
        return weak(f"{message[:240]} -- does not say {missing}")
    return clear(message)


def cli_ok(done: Done, what: str = "") -> Outcome | None:
    """None when a command that must succeed did; its verdict otherwise."""
    if done.rc is None:
        return fail(f"{what} still running after {done.seconds:.0f} s")
    if "Traceback (most recent call last)" in done.err:
        return weak(f"{what} traceback, exit {done.rc}: {_tail(done.err)}")
    if done.rc != 0:
        return fail(f"{what} exit {done.rc}: {_tail(done.err)}")
    return None


def file_size_limit(size: int) -> Callable[[], None]:
    """A child whose writes past ``size`` bytes fail (EFBIG), as on a full disk."""
    import resource

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # stays ignored across exec: writes fail instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return limit


# ---------------------------------------------------------------------------------------------------------------------
# files the cases start from (built once, with the test suite's helpers)


class _Folders:
    """What pytest's tmp_path_factory gives a fixture: ``mktemp(name)``, a new folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def mktemp(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.root))


class Fixtures:
    def __init__(self, root: Path) -> None:
        self.root, self._cache = root, {}
        self.folders = _Folders(root)

    def _once(self, name: str, build: Callable[[], object]) -> object:
        if name not in self._cache:
            self._cache[name] = build()
        return self._cache[name]

    def files(self) -> dict[str, bytes]:
        """A SAC model, its HER buffer and a prioritized plain buffer (bit flipping, 4 bits), as bytes."""
        import test_fuzz_files

        return self._once("files", lambda: test_fuzz_files.files.__wrapped__(self.folders))

    def write(self, folder: Path, name: str, data: bytes | None = None) -> Path:
        path = folder / name
        path.write_bytes(self.files()[name] if data is None else data)
        return path

    def edited(self, name: str, edit: Callable[[dict, dict], None]) -> bytes:
        """The file ``name`` with ``edit(meta, arrays)`` applied."""
        import test_fuzz_files

        meta, arrays = test_fuzz_files._unpack(self.files()[name])
        arrays = {k: v.copy() for k, v in arrays.items()}
        edit(meta, arrays)
        return test_fuzz_files._pack(meta, arrays)

    def run(self) -> Path:
        """A finished herl train run (bit flipping, 300 steps, checkpoints at 200 and 300): RUN/seed_0."""
        def build() -> Path:
            from test_cli import TINY

            folder = self.folders.mktemp("run")
            done = herl("train", *TINY, "--run-dir", folder / "run", cwd=folder)
            assert done.rc == 0, done.err
            return folder / "run" / "seed_0"
        return self._once("run", build)

    def copy_run(self, tmp: Path) -> Path:
        target = tmp / "run" / "seed_0"
        shutil.copytree(self.run(), target)
        return target

    def dataset(self) -> Path:
        """Three PointReach demonstrations of 10 steps (a Minari dataset folder)."""
        import test_malformed_datasets

        return self._once("dataset", lambda: test_malformed_datasets.dataset.__wrapped__(self.folders))

    def point_model(self, tmp: Path, algo: str = "SAC") -> Path:
        import herl
        from herl.envs import PointReachEnv

        model = getattr(herl, algo)("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[16]), seed=0)
        return Path(model.save(tmp / "model.zip") or tmp / "model.zip")

    def sweep(self, tmp: Path, *search: str) -> Path:
        """A sweep folder as ``herl sweep`` leaves it before its trials start (sweep.json, trials.json): two seeds, or
        two trials of ``search``. Made without Ray: ``herl sweep`` runs in this process with Ray's session and Tune's
        run replaced by nothing (an unreachable address no longer leaves a folder behind)."""
        def build(search: tuple[str, ...]) -> Path:
            import contextlib
            from unittest import mock

            from herl.cli import main
            from herl.distributed import sweep as sweep_module
            from herl.distributed import tuner

            folder = self.folders.mktemp("sweep")
            what = [x for s in search for x in ("--search", s)] + ["--trials", "2"] if search else ["--seeds", "2"]
            args = ["sweep", "--env", "herl/BitFlipping-v0", "--set", "env.n_bits=4", "--timesteps", "200",
                    "--set", "eval.freq=100", "--set", "eval.episodes=5", "--set", "learning_starts=50",
                    "--set", "policy.net_arch=[16]", "--set", "batch_size=16", *what,
                    "--sweep-dir", str(folder / "sweep")]
            with mock.patch.object(sweep_module, "ray_session", lambda *a, **k: contextlib.nullcontext()), \
                    mock.patch.object(tuner, "fit", lambda *a, **k: None), \
                    contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                with contextlib.suppress(Exception, SystemExit):  # the summary of a sweep with no trial run
                    main(args)
            assert (folder / "sweep" / "sweep.json").exists() and (folder / "sweep" / "trials.json").exists()
            return folder / "sweep"
        source = self._once(f"sweep{search}", lambda: build(search))
        shutil.copytree(source, tmp / "sweep")
        return tmp / "sweep"


F: Fixtures  # set by main()


# ---------------------------------------------------------------------------------------------------------------------
# the cases


@dataclass
class Case:
    ident: str
    title: str
    run: Callable[[Path], Outcome]


CASES: list[Case] = []


def _adder(prefix: str, width: int) -> Callable[[str], Callable]:
    def add(title: str) -> Callable:
        def register(fn: Callable[[Path], Outcome]) -> Callable[[Path], Outcome]:
            number = sum(c.ident.startswith(prefix) for c in CASES) + 1
            CASES.append(Case(f"{prefix}{number:0{width}d}", title, fn))
            return fn
        return register
    return add


A = _adder("A", 2)
B = _adder("B", 3)


def _marker_module(folder: Path, name: str) -> Path:
    """A Python module ``name`` in ``folder`` whose import creates ``folder/imported``; returns that marker's path."""
    marker = folder / "imported"
    (folder / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    return marker


def _executed(marker: Path) -> Outcome | None:
    return fail(f"code from a file ran ({marker.name} was created)") if marker.exists() else None


# ============================================================================================== A: the new surfaces
# ---- export


def _export_onto_a_full_disk(tmp: Path, fmt: str) -> Outcome:
    model = F.point_model(tmp)
    out = tmp / ("policy.pt" if fmt == "torchscript" else "policy.onnx")
    out.write_bytes(b"the previous export")
    kept = Kept(out, model)
    done = herl("export", model, "-o", out, "--format", fmt, cwd=tmp, preexec_fn=file_size_limit(4096))
    return kept.then(judge_cli(done, r"cannot write", r"left as it was"))


for _fmt in ("torchscript", "onnx"):
    A(f"herl export --format {_fmt} onto an existing file when the disk fills: that file stays")(
        lambda tmp, fmt=_fmt: _export_onto_a_full_disk(tmp, fmt))


@A("herl export m.zip -o m.zip: refused, the model kept")
def _(tmp: Path) -> Outcome:
    model = F.point_model(tmp)
    kept = Kept(model)
    return kept.then(judge_cli(herl("export", model, "-o", model, cwd=tmp), r"is the model being exported",
                               r"another file"))


@A("herl export m.zip -o link (a symlink to m.zip), TorchScript: refused, the model kept")
def _(tmp: Path) -> Outcome:
    model = F.point_model(tmp)
    (tmp / "link.zip").symlink_to(model)
    kept = Kept(model)
    done = herl("export", model, "-o", tmp / "link.zip", "--format", "torchscript", cwd=tmp)
    return kept.then(judge_cli(done, r"is the model being exported", r"another file"))


def _nan_td3():
    import torch

    import herl
    from herl.envs import PointReachEnv

    model = herl.TD3("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[16]), seed=0)
    with torch.no_grad():
        for p in model.actor.parameters():
            p.fill_(float("nan"))
    return model


@A("check_onnx(model, path) of an export whose actions are NaN fails")
def _(tmp: Path) -> Outcome:
    from herl.export import check_onnx

    model = _nan_td3()
    path = model.export_onnx(tmp / "nan.onnx")
    return refused(lambda: check_onnx(model, path, n_observations=50), r"NaN")


@A("herl export of a diverged (NaN) model: not written, the file at -o kept")
def _(tmp: Path) -> Outcome:
    _nan_td3().save(tmp / "nan.zip")
    out = tmp / "policy.onnx"
    out.write_bytes(b"the previous export")
    kept = Kept(out)
    return kept.then(judge_cli(herl("export", tmp / "nan.zip", "-o", out, cwd=tmp), r"not written", r"NaN"))


@A("herl export -o into a folder that does not exist: refused, no folder made")
def _(tmp: Path) -> Outcome:
    model = F.point_model(tmp)
    done = herl("export", model, "-o", tmp / "missing" / "deeper" / "p.onnx", cwd=tmp)
    if (tmp / "missing").exists():
        return fail("the missing folders were created")
    return judge_cli(done, r"does not exist", r"create it first")


# ---- sweeps


@A("herl sweep --resume of a crafted folder whose Tune pickles (tuner.pkl, ...) run code: nothing unpickled")
def _(tmp: Path) -> Outcome:
    from test_distributed import _plant_pickles

    sweep = F.sweep(tmp, "learning_rate=loguniform:1e-4:1e-3")
    (sweep / "trials.json").unlink()  # a search begun by an older herl: Tune's pickles hold its trials
    (sweep / "runs" / "trial_4f2a1_00000").mkdir(parents=True)
    marker = tmp / "unpickled"
    _plant_pickles(sweep, marker)
    done = herl("sweep", "--resume", sweep, cwd=tmp)
    return _executed(marker) or judge_cli(done, r"has no trials\.json", r"herl train --resume")


@A("herl sweep --resume on a local Ray of a sweep whose tune/ holds crafted pickles: finishes, nothing unpickled")
def _(tmp: Path) -> Outcome:
    from test_distributed import _plant_pickles

    sweep = F.sweep(tmp)
    marker = tmp / "unpickled"
    _plant_pickles(sweep, marker)
    done = herl("sweep", "--resume", sweep, "--cpus", "2", cwd=tmp, timeout=230)
    if (bad := _executed(marker) or cli_ok(done, "the resumed sweep")):
        return bad
    rows = (sweep / "summary.csv").read_text().strip().splitlines()[1:] if (sweep / "summary.csv").exists() else []
    return clear(f"both trials done, no pickle read ({len(rows)} rows)") if len(rows) == 2 else \
        fail(f"summary.csv holds {len(rows)} trials, not 2")


@A("herl sweep --resume of a folder whose trials.json is truncated")
def _(tmp: Path) -> Outcome:
    sweep = F.sweep(tmp)
    (sweep / "trials.json").write_text((sweep / "trials.json").read_text()[:20])
    return judge_cli(herl("sweep", "--resume", sweep, cwd=tmp), r"trials\.json is damaged", r"restore it")


@A("herl sweep --resume of a trials.json naming a run folder outside the sweep (../../elsewhere)")
def _(tmp: Path) -> Outcome:
    sweep = F.sweep(tmp)
    trials = {"version": 1, "trials": [{"run": "../../elsewhere", "seed": 0, "params": {}, "status": "running",
                                        "resumed_from": 0}]}
    (sweep / "trials.json").write_text(json.dumps(trials))
    done = herl("sweep", "--resume", sweep, cwd=tmp)
    if (tmp / "elsewhere").exists() or (sweep.parent.parent / "elsewhere").exists():
        return fail("a folder outside the sweep was made")
    return judge_cli(done, r"trials\.json is damaged", r"not a trial folder name")


@A("herl sweep --resume of a sweep.json naming a module:Id env: asks, imports nothing")
def _(tmp: Path) -> Outcome:
    sweep = F.sweep(tmp)
    marker = _marker_module(tmp, "auditevil")
    spec = json.loads((sweep / "sweep.json").read_text())
    (sweep / "sweep.json").write_text(json.dumps({**spec, "env": "auditevil:Evil-v0"}))
    done = herl("sweep", "--resume", sweep, cwd=tmp)
    return _executed(marker) or judge_cli(done, r"imports the Python module 'auditevil'", r"--env auditevil:Evil-v0")


@A("herl sweep --sweep-dir of a folder holding a sweep: refused, the sweep kept")
def _(tmp: Path) -> Outcome:
    sweep = F.sweep(tmp)
    kept = Kept(sweep)
    done = herl("sweep", "--env", "herl/PointReach-v0", "--seeds", "2", "--sweep-dir", sweep, cwd=tmp)
    return kept.then(judge_cli(done, r"already holds", r"herl sweep --resume"))


@A("herl sweep --search learnin_rate=...: the misspelt key named with the valid ones")
def _(tmp: Path) -> Outcome:
    done = herl("sweep", "--env", "herl/BitFlipping-v0", "--search", "learnin_rate=loguniform:1e-4:1e-3",
                "--sweep-dir", tmp / "s", cwd=tmp)
    return judge_cli(done, r"unknown key 'learnin_rate'", r"did you mean learning_rate")


@A("herl sweep --resume DIR --env of another env: refused")
def _(tmp: Path) -> Outcome:
    sweep = F.sweep(tmp)
    done = herl("sweep", "--resume", sweep, "--env", "herl/PointReach-v0", cwd=tmp)
    return judge_cli(done, r"is a sweep of herl/BitFlipping-v0", r"without --env")


# ---- workers


@A("herl train --workers 1: the actor's process killed mid-episode is restarted, the run finishes")
def _(tmp: Path) -> Outcome:
    from test_distributed import BITS, CRASHING

    trigger = tmp / "crash"
    trigger.touch()
    run = tmp / "run"
    done = herl("train", "--env", CRASHING, *BITS[2:], "--timesteps", "400", "--workers", "1", "--cpus", "2",
                "--set", f"env.trigger={trigger}", "--set", "env.after_episodes=20", "--progress", "off",
                "--run-dir", run, cwd=ROOT, timeout=230)
    if (bad := cli_ok(done, "the run")):
        return bad
    if trigger.exists():
        return weak("the actor never died (the crash was not triggered): nothing tried")
    summary = json.loads((run / "seed_0" / "summary.json").read_text())
    if not (re.search(r"actor died", done.err) and summary["steps"] >= 400):
        return weak(f"finished without saying an actor died: {_tail(done.err)}")
    return clear(f"restarted; {[n for n in summary['notes'] if 'dropped' in n][:1]}")


@A("herl train --workers 3 --cpus 2: refused before Ray starts, no run folder made")
def _(tmp: Path) -> Outcome:
    done = herl("train", "--env", "herl/BitFlipping-v0", "--workers", "3", "--cpus", "2", "--timesteps", "100",
                "--progress", "off", "--run-dir", tmp / "run", cwd=tmp)
    if (tmp / "run").exists():
        return fail("a run folder was left behind")
    return judge_cli(done, r"3 workers need 3 CPUs", r"Ray has 2")


@A("herl train --workers 1 --address of no cluster: one line within seconds")
def _(tmp: Path) -> Outcome:
    done = herl("train", "--env", "herl/BitFlipping-v0", "--workers", "1", "--timesteps", "100", "--progress", "off",
                "--address", "127.0.0.1:1", "--run-dir", tmp / "run", cwd=tmp)
    if done.seconds > 40:
        return weak(f"took {done.seconds:.0f} s")
    return judge_cli(done, r"cannot reach the Ray cluster at 127\.0\.0\.1:1", r"ray start --head")


# ---- demonstration datasets


def _dataset(tmp: Path, edit: Callable) -> Path:
    import test_malformed_datasets

    return test_malformed_datasets.edited(F.dataset(), tmp, edit)


def _demo_buffer(path: Path):
    import test_malformed_datasets

    return test_malformed_datasets.load(path)


@A("herl train --demos of a dataset whose episode is one row short: one line naming file, episode, field")
def _(tmp: Path) -> Outcome:
    import test_malformed_datasets

    path = _dataset(tmp, test_malformed_datasets.CASES["one row short"][0])
    done = herl("train", "--env", "herl/PointReach-v0", "--algo", "sac", "--timesteps", "100", "--progress", "off",
                "--demos", path, "--run-dir", tmp / "run", cwd=tmp)
    return judge_cli(done, r"main_data\.hdf5: episode 1: observation 'observation' has shape \(10, 4\)",
                     r"expected shape \(11, 4\)")


@A("demonstrations whose episode lacks desired_goal: named, not a KeyError")
def _(tmp: Path) -> Outcome:
    path = _dataset(tmp, lambda f: f.__delitem__("episode_2/observations/desired_goal"))
    return refused(lambda: _demo_buffer(path), r"episode 2", r"desired_goal is missing", r"expected")


@A("demonstrations whose actions are too wide: named with the expected shape")
def _(tmp: Path) -> Outcome:
    import test_malformed_datasets

    path = _dataset(tmp, test_malformed_datasets.CASES["actions wide"][0])
    return refused(lambda: _demo_buffer(path), r"episode 1", r"actions has shape \(10, 5\), expected shape \(10, 2\)")


def _hdf5_from_elsewhere(tmp: Path, how: str, target: Path | None = None) -> Outcome:
    import h5py
    import test_malformed_datasets

    if target is None:
        target = tmp / "other.h5"
        with h5py.File(target, "w") as other:
            other["data"] = np.arange(10, dtype="<f4")
    path = _dataset(tmp, getattr(test_malformed_datasets, how)(target))
    return refused(lambda: _demo_buffer(path), r"main_data\.hdf5: /episode_\d/\w+ ",
                   r"herl reads only data held in main_data\.hdf5 itself")


def _external_storage(tmp: Path) -> Outcome:
    target = Path("/etc/hostname")
    if not target.exists() or target.stat().st_size < 40:
        target = tmp / "secret.bin"
        target.write_bytes(np.arange(10, dtype="<f4").tobytes())
    return _hdf5_from_elsewhere(tmp, "_external_storage", target)


A("an HDF5 dataset whose rewards are external storage in /etc/hostname: refused before reading")(_external_storage)
for _how, _what in (("_external_link", "an external link to another file"),
                    ("_virtual", "a virtual dataset made of another file")):
    A(f"an HDF5 dataset with {_what}: refused")(lambda tmp, how=_how: _hdf5_from_elsewhere(tmp, how))


@A("a dataset holding NaN at one step: named by file, episode, field and step")
def _(tmp: Path) -> Outcome:
    import test_malformed_datasets

    def poison(file):
        values = file["episode_1/observations/desired_goal"][:]
        values[4, 1] = np.nan
        test_malformed_datasets.replace(file, "episode_1/observations/desired_goal", values)

    path = _dataset(tmp, poison)
    return refused(lambda: _demo_buffer(path), r"main_data\.hdf5: episode 1: observation 'desired_goal' holds NaN",
                   r"at step 4")


# ---- training, predict, buffers


SMALL = dict(learning_starts=8, batch_size=8, buffer_size=1000, policy_kwargs=dict(net_arch=[8]))


@A("SAC with learning_rate=1e30: the diverged policy is named, not the env")
def _(tmp: Path) -> Outcome:
    from herl import SAC, HerReplayBuffer
    from herl.envs import PointReachEnv

    model = SAC("MultiInputPolicy", PointReachEnv(), replay_buffer_class=HerReplayBuffer, seed=0,
                **{**SMALL, "learning_rate": 1e30})
    outcome = refused(lambda: model.learn(200), r"the policy diverged", r"[Ll]ower learning_rate")
    if "Find where the env" in outcome.detail or "next_obs" in outcome.detail:
        return weak(f"blames the env: {outcome.detail[:200]}")
    return outcome


@A("herl train whose run diverges: one error line (status 2) naming the checkpoint to resume from")
def _(tmp: Path) -> Outcome:
    from test_non_finite_stop import DIVERGING

    done = herl("train", *DIVERGING, "--set", "checkpoint.freq=50", "--run-dir", tmp / "run", cwd=tmp)
    return judge_cli(done, r"training stopped at env step \d+", r"policy diverged", r"herl train --resume")


def _nan_observation(obs: dict) -> dict:
    bad = {k: np.array(v, np.float32) for k, v in obs.items()}
    bad["observation"][0] = np.nan
    return bad


@A("SAC predict of a NaN observation: refused, not NaN actions")
def _(tmp: Path) -> Outcome:
    from herl import SAC
    from herl.envs import PointReachEnv

    env = PointReachEnv()
    model = SAC("MultiInputPolicy", env, seed=0, **SMALL)
    return refused(lambda: model.predict(_nan_observation(env.reset(seed=0)[0])), r"observation\['observation'\]",
                   r"nan")


@A("DQN predict of a NaN observation: refused, not action 0")
def _(tmp: Path) -> Outcome:
    from herl import DQN
    from herl.envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=4)
    model = DQN("MultiInputPolicy", env, seed=0, **SMALL)
    return refused(lambda: model.predict(_nan_observation(env.reset(seed=0)[0])), r"observation\['observation'\]",
                   r"nan")


def _load_her(path: Path):
    from herl import HerReplayBuffer
    from herl.envs import BitFlippingEnv

    buffer = HerReplayBuffer.load(path, env=BitFlippingEnv(n_bits=4, continuous=True), device="cpu")
    buffer.sample(8)
    return buffer


@A("a buffer file whose rewards are NaN: refused, not sampled")
def _(tmp: Path) -> Outcome:
    data = F.edited("her.zip", lambda meta, arrays: arrays["storage/transition/reward"].__setitem__((3, 0), np.nan))
    return refused(lambda: _load_her(F.write(tmp, "her.zip", data)), r"reward holds NaN or infinity at row 3")


@A("a buffer file claiming buffer_size=10**13: refused before allocating")
def _(tmp: Path) -> Outcome:
    data = F.edited("her.zip", lambda meta, arrays: meta["config"].__setitem__("buffer_size", 10**13))
    return refused(lambda: _load_her(F.write(tmp, "her.zip", data)), r"buffer_size=10,000,000,000,000",
                   r"more than this machine's")


@A("a buffer file whose zip members carry the encrypted flag: refused")
def _(tmp: Path) -> Outcome:
    data = bytearray(F.files()["her.zip"])
    for signature, flag_offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(signature)
        while at >= 0:
            data[at + flag_offset] |= 0x1
            at = data.find(signature, at + 4)
    return refused(lambda: _load_her(F.write(tmp, "her.zip", bytes(data))), r"encrypted")


@A("a buffer file with a 5,000-digit number in meta.json: refused naming the file")
def _(tmp: Path) -> Outcome:
    import test_fuzz_files

    data = test_fuzz_files._raw_meta(F.files()["her.zip"], lambda text: text.replace(
        '"format_version": ', '"format_version": ' + "7" * 5000, 1))
    path = F.write(tmp, "her.zip", data)
    return refused(lambda: _load_her(path), re.escape(str(path)), r"4,300 digits")


@A("a float64 observation of 1e300 (inf as float32): named as an overflow, not an info entry")
def _(tmp: Path) -> Outcome:
    from test_non_finite_causes import Float64Overflow

    from herl import SAC, HerReplayBuffer
    from herl.envs import PointReachEnv

    model = SAC("MultiInputPolicy", Float64Overflow(PointReachEnv()), replay_buffer_class=HerReplayBuffer, seed=0,
                **SMALL)
    outcome = refused(lambda: model.learn(20), r"holds 1e\+300, which overflows float32")
    return weak(f"blames an info entry: {outcome.detail}") if "info entry" in outcome.detail else outcome


def _point_spaces():
    from herl.envs import PointReachEnv

    env = PointReachEnv()
    return env, env.observation_space, env.action_space


@A("HerReplayBuffer(n_sampled_goal=nan): a ConfigError naming n_sampled_goal")
def _(tmp: Path) -> Outcome:
    from herl import HerReplayBuffer

    env, obs_space, act_space = _point_spaces()
    return refused(lambda: HerReplayBuffer(1000, obs_space, act_space, env=env, n_sampled_goal=float("nan")),
                   r"n_sampled_goal=nan is not allowed")


@A("HerReplayBuffer(n_sampled_goal=None): a ConfigError naming n_sampled_goal")
def _(tmp: Path) -> Outcome:
    from herl import HerReplayBuffer

    env, obs_space, act_space = _point_spaces()
    return refused(lambda: HerReplayBuffer(1000, obs_space, act_space, env=env, n_sampled_goal=None),
                   r"n_sampled_goal=None is not allowed")


@A("ReplayBuffer(buffer_size=nan): a ConfigError naming buffer_size")
def _(tmp: Path) -> Outcome:
    from herl import ReplayBuffer

    _, obs_space, act_space = _point_spaces()
    return refused(lambda: ReplayBuffer(float("nan"), obs_space, act_space), r"buffer_size=nan is not allowed")


@A("rllte HerReplayStorage.add() without desired_goal: named, not a KeyError")
def _(tmp: Path) -> Outcome:
    import torch

    from herl.compat.rllte import HerReplayStorage

    env, obs_space, act_space = _point_spaces()
    storage = HerReplayStorage(obs_space, act_space, reward_fn=env, storage_size=1000)
    full = {k: torch.as_tensor(v[None]) for k, v in env.reset(seed=0)[0].items()}
    partial = {k: v for k, v in full.items() if k != "desired_goal"}
    zeros = torch.zeros(1)
    return refused(lambda: storage.add(partial, torch.zeros(1, 2), zeros, zeros, zeros, {}, full),
                   r"lacks the key\(s\) \['desired_goal'\]")


@A("SB2 HER.predict of an observation of the wrong size: says what it expected")
def _(tmp: Path) -> Outcome:
    import herl
    from herl.compat.sb2 import HER
    from herl.envs import BitFlippingEnv

    model = HER("MlpPolicy", BitFlippingEnv(n_bits=10), herl.DQN, seed=0)
    return refused(lambda: model.predict(np.zeros(7)), r"flat one of 30 numbers", r"got shape \(7,\)")


@A("herl plot -o into folders that do not exist: refused, none made")
def _(tmp: Path) -> Outcome:
    output = tmp / "nonexistent" / "dir" / "x.png"
    done = herl("plot", F.run(), "-o", output, cwd=tmp)
    if (tmp / "nonexistent").exists():
        return fail("the missing folders were created")
    return judge_cli(done, r"does not exist", r"create it first")


@A("diagnostics/goal_moved_episodes after a resume equals the run never stopped")
def _(tmp: Path) -> Outcome:
    import csv

    args = ["--env", "herl/BitFlipping-v0", "--progress", "off", "--set", "env.n_bits=4", "--set", "learning_starts=50",
            "--set", "eval.freq=100", "--set", "eval.episodes=2", "--set", "checkpoint.freq=100",
            "--set", "batch_size=16", "--set", "policy.net_arch=[16,16]", "--set", "log_interval=1",
            "--set", "exploration_fraction=0"]
    for done in (herl("train", *args, "--timesteps", "300", "--run-dir", tmp / "whole", cwd=tmp),
                 herl("train", *args, "--timesteps", "150", "--run-dir", tmp / "parts", cwd=tmp),
                 herl("train", "--resume", tmp / "parts", "--timesteps", "300", "--progress", "off", cwd=tmp)):
        if (bad := cli_ok(done)):
            return bad

    def logged(run: Path) -> list[tuple[int, str]]:
        with open(run / "seed_0" / "progress.csv") as f:
            return [(int(float(r["time/total_timesteps"])), r["diagnostics/goal_moved_episodes"])
                    for r in csv.DictReader(f) if r.get("diagnostics/goal_moved_episodes") not in (None, "")
                    and float(r["time/total_timesteps"]) > 150]

    whole, resumed = logged(tmp / "whole"), logged(tmp / "parts")
    if not whole:
        return weak("the run logged no diagnostics/goal_moved_episodes: nothing to compare")
    return clear(f"{len(whole)} rows equal") if whole and whole == resumed else \
        fail(f"differs after the resume: {resumed[:3]} against {whole[:3]}")


# ============================================================================================== B: the first audit
# ---- NaN and infinity during training


def _poisoned(key: str | None, value: float = np.nan) -> Outcome:
    import torch
    from test_guards import PoisonOnce

    from herl import SAC, HerReplayBuffer
    from herl.envs import PointReachEnv

    model = SAC("MultiInputPolicy", PoisonOnce(PointReachEnv(), at_step=12, key=key, value=value),
                replay_buffer_class=HerReplayBuffer, seed=0, **SMALL)
    outcome = refused(lambda: model.learn(40), r"env step 11", r"env 0", re.escape(f"next_obs[{key!r}]") if key
                      else r"reward", r"nothing of this add\(\) was stored")
    finite = all(torch.isfinite(p).all() for p in model.nets.parameters())
    return outcome if finite else fail(f"weights became NaN ({outcome.detail[:120]})")


@B("NaN in the env's observation during learn: stops naming env, key and step; weights stay finite")
def _(tmp: Path) -> Outcome:
    return _poisoned("observation")


@B("infinity in the env's achieved_goal during learn")
def _(tmp: Path) -> Outcome:
    return _poisoned("achieved_goal", np.inf)


@B("NaN in the env's desired_goal during learn")
def _(tmp: Path) -> Outcome:
    return _poisoned("desired_goal")


@B("a NaN reward from the env during learn")
def _(tmp: Path) -> Outcome:
    return _poisoned(None)


@B("compute_reward returning NaN for relabeled goals during learn")
def _(tmp: Path) -> Outcome:
    import gymnasium as gym

    from herl import SAC, HerReplayBuffer
    from herl.envs import PointReachEnv

    class NanRewards(gym.Wrapper):
        def compute_reward(self, achieved, desired, info):
            reward = np.asarray(self.env.unwrapped.compute_reward(achieved, desired, info), np.float64)
            return np.where(np.ndim(reward) and len(reward) > 2, np.nan, reward)  # the probe passes, sampling not

    model = SAC("MultiInputPolicy", NanRewards(PointReachEnv()), replay_buffer_class=HerReplayBuffer, seed=0, **SMALL)
    return refused(lambda: model.learn(40), r"compute_reward returned NaN or infinity")


@B("a loss that became NaN (SAC's critic weights NaN): names the critic loss")
def _(tmp: Path) -> Outcome:
    from test_guards import _broken_sac

    model = _broken_sac()
    return refused(lambda: model.train(100), r"SAC's critic loss")


@B("DQN's Q-network with infinite weights: names the Q-network loss")
def _(tmp: Path) -> Outcome:
    import torch

    from herl import DQN
    from herl.envs import BitFlippingEnv

    dqn = DQN("MultiInputPolicy", BitFlippingEnv(n_bits=4), seed=0, **SMALL)
    dqn.learn(20)
    with torch.no_grad():
        dqn.q_net.layers[0].bias.fill_(float("inf"))

    def train() -> None:
        dqn.train(1)
        dqn.train_info()
    return refused(train, r"DQN's Q-network loss")


# ---- hyperparameters


def _refused_setting(algo: str, field: str, **kwargs: object) -> Outcome:
    import herl
    from herl.envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=4, continuous=algo != "DQN")
    return refused(lambda: getattr(herl, algo)("MultiInputPolicy", env, **kwargs), rf"\b{field}=", r"must be")


for _algo, _field, _kwargs in [
    ("SAC", "learning_rate", dict(learning_rate=float("inf"))),
    ("SAC", "learning_rate", dict(learning_rate=float("nan"))),
    ("DQN", "train_freq", dict(train_freq=0)),
    ("DQN", "train_freq", dict(train_freq=-1)),
    ("SAC", "clip_observations", dict(clip_observations=0.0)),
    ("SAC", "clip_observations", dict(clip_observations=float("nan"))),
    ("SAC", "target_entropy", dict(target_entropy=float("nan"))),
    ("SAC", "net_arch", dict(policy_kwargs=dict(net_arch="64"))),
    ("SAC", "net_arch", dict(policy_kwargs=dict(net_arch=[0]))),
    ("TD3", "n_critics", dict(policy_kwargs=dict(n_critics=0))),
]:
    B(f"{_algo}({', '.join(f'{k}={v!r}' for k, v in _kwargs.items())}): refused at construction")(
        lambda tmp, a=_algo, f=_field, k=_kwargs: _refused_setting(a, f, **k))


@B("herl train --set policy.n_critics=0: refused, nothing trained")
def _(tmp: Path) -> Outcome:
    done = herl("train", "--env", "herl/PointReach-v0", "--algo", "td3", "--set", "policy.n_critics=0", "--timesteps",
                "100", "--progress", "off", "--run-dir", tmp / "run", cwd=tmp)
    return judge_cli(done, r"n_critics=0", r"must be")


@B("SAC(stats_window_size=0): refused at construction")
def _(tmp: Path) -> Outcome:
    return _refused_setting("SAC", "stats_window_size", stats_window_size=0)


@B("learn(-5): refused")
def _(tmp: Path) -> Outcome:
    from herl import DQN
    from herl.envs import BitFlippingEnv

    model = DQN("MultiInputPolicy", BitFlippingEnv(n_bits=4), **SMALL)
    return refused(lambda: model.learn(-5), r"total_timesteps=-5")


@B("SAC(seed='abc'): refused at construction")
def _(tmp: Path) -> Outcome:
    return _refused_setting("SAC", "seed", seed="abc")


@B("SAC(device='tpu'): refused at construction")
def _(tmp: Path) -> Outcome:
    return _refused_setting("SAC", "device", device="tpu")


@B("a preset file (--config) with learning_rate = -1: one error line before anything runs")
def _(tmp: Path) -> Outcome:
    (tmp / "bad.toml").write_text('algo = "sac"\n[algos.sac]\nlearning_rate = -1\n')
    done = herl("train", "--env", "herl/PointReach-v0", "--config", tmp / "bad.toml", "--timesteps", "100",
                "--progress", "off", "--run-dir", tmp / "run", cwd=tmp)
    return judge_cli(done, r"learning_rate=-1", r"must be")


@B("herl train --set learning_rate=nan: one error line")
def _(tmp: Path) -> Outcome:
    from test_cli import TINY

    done = herl("train", *TINY, "--set", "learning_rate=nan", "--run-dir", tmp / "run", cwd=tmp)
    return judge_cli(done, r"learning_rate=nan", r"must be")


@B("a model file whose config says learning_rate=inf: refused by the constructor's rules")
def _(tmp: Path) -> Outcome:
    from herl import SAC

    data = F.edited("model.zip", lambda meta, arrays: meta["config"].__setitem__("learning_rate", float("inf")))
    return refused(lambda: SAC.load(F.write(tmp, "model.zip", data), device="cpu"), r"learning_rate=inf is not allowed")


# ---- a buffer whose book-keeping lies


@B("a HER buffer file whose episode book-keeping contradicts itself: refused on load, no endless sampling")
def _(tmp: Path) -> Outcome:
    def lie(meta: dict, arrays: dict) -> None:
        arrays["storage/episode_rows"][0, 0, 1] += 1

    return refused(lambda: _load_her(F.write(tmp, "her.zip", F.edited("her.zip", lie))), r"inconsistent")


@B("a HER buffer edited in memory so no row is a transition: sample() ends with an error")
def _(tmp: Path) -> Outcome:
    buffer = _load_her(F.write(tmp, "her.zip"))
    buffer.storage.is_transition[:] = False
    buffer.storage.n_transitions -= 1
    return refused(lambda: buffer.sample(8), r"book-keeping contradicts its rows")


# ---- the run folder's lock


@B("two herl train --resume of one run at once: it is trained once, the other is refused")
def _(tmp: Path) -> Outcome:
    run = F.copy_run(tmp)
    command = [sys.executable, "-m", "herl", "train", "--resume", str(run), "--timesteps", "3000", "--progress", "off"]
    procs = [subprocess.Popen(command, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p, *p.communicate(timeout=200)) for p in procs]
    codes = sorted(p.returncode for p, _, _ in results)
    refused_err = [err for p, _, err in results if p.returncode == 2]
    if codes == [0, 0]:
        return fail("both processes trained the run")
    if codes != [0, 2] or not all("is being trained by process" in e for e in refused_err):
        return weak(f"exit statuses {codes}: {[_tail(e) for _, _, e in results]}")
    return judge_cli(Done(2, "", refused_err[0], 0), r"is being trained by process \d+", r"wait for it")


@B("a resume refused by the lock leaves the holder's lock file; the lock of a killed holder does not block")
def _(tmp: Path) -> Outcome:
    run = F.copy_run(tmp)
    lock = run / "train.pid"
    lock.touch()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); "
        "os.ftruncate(fd, 0); os.write(fd, str(os.getpid()).encode()); print('locked', flush=True); time.sleep(120)"),
        str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        refused_run = herl("train", "--resume", run, "--timesteps", "400", "--progress", "off", cwd=tmp)
        if lock.read_text() != str(holder.pid):
            return fail("the refused process changed the holder's lock file")
    finally:
        holder.kill()
        holder.wait()
    if (bad := cli_ok(herl("train", "--resume", run, "--timesteps", "400", "--progress", "off", cwd=tmp),
                      "the resume after the holder died")):
        return bad
    return judge_cli(refused_run, rf"is being trained by process {holder.pid}")


# ---- the adapters


@B("cpprb: on_episode_end with a goal of the wrong shape, then the right one: the episode is stored")
def _(tmp: Path) -> Outcome:
    from test_guards import _cpprb

    buffer = _cpprb()
    for t in range(3):
        buffer.add(obs=[t, 0], act=[0.0], next_obs=[t + 1, 0])
    outcome = refused(lambda: buffer.on_episode_end([1.0, 2.0, 3.0]), r"goal has shape")
    buffer.on_episode_end([5.0, 0.0])
    stored = buffer.get_stored_size()
    return outcome if stored == 15 else fail(f"the retry stored {stored} transitions, not 15")


@B("cpprb: a reward_func failing on the relabeled goals leaves the buffer as it was, the episode staged")
def _(tmp: Path) -> Outcome:
    from test_guards import _cpprb

    buffer = _cpprb()
    for episode in range(2):
        for t in range(4):
            buffer.add(obs=[t, episode], act=[0.0], next_obs=[t + 1, episode])
        if episode == 1:
            good = buffer.reward_func
            buffer.reward_func = lambda s, a, g: (good(s, a, g) if (g[:, 0] == 5.0).all()
                                                  else np.full(len(s), np.nan))
            outcome = refused(lambda: buffer.on_episode_end([5.0, 0.0]), r"reward_func")
            if buffer.get_stored_size() != 20:
                return fail(f"a failed on_episode_end changed the store ({buffer.get_stored_size()} rows, not 20)")
            buffer.reward_func = good
        buffer.on_episode_end([5.0, 0.0])
    return outcome if buffer.get_stored_size() == 40 else fail("the retry did not store the episode")


def _adapter(name: str, **kwargs: object):
    """cpprb's HindsightReplayBuffer (the suite's small one) or rllte's HerReplayStorage, with ``kwargs``."""
    from test_guards import _cpprb

    from herl.compat.rllte import HerReplayStorage
    from herl.envs import BitFlippingEnv

    if name == "cpprb":
        return _cpprb(**kwargs)
    env = BitFlippingEnv(n_bits=4, continuous=True)
    return HerReplayStorage(observation_space=env.observation_space, action_space=env.action_space,
                            reward_fn=env.compute_reward, **kwargs)


for _name, _argument, _value in [("cpprb", "additional_goals", 2.5), ("cpprb", "additional_goals", "3"),
                                 ("rllte", "num_goals", 2.5), ("rllte", "storage_size", "3")]:
    B(f"{_name} adapter with {_argument}={_value!r}: refused, not truncated")(
        lambda tmp, n=_name, a=_argument, v=_value: refused(lambda: _adapter(n, **{a: v}), re.escape(f"{a}={v!r}")))


# ---- model and buffer files


def _load_sac(path: Path) -> None:
    import test_fuzz_files

    test_fuzz_files._use("model.zip", path)


def _model_case(tmp: Path, edit: Callable[[dict, dict], None], *says: str) -> Outcome:
    return refused(lambda: _load_sac(F.write(tmp, "model.zip", F.edited("model.zip", edit))), *says)


@B("a model file whose arrays member inflates 1000x (a decompression bomb): refused before reading")
def _(tmp: Path) -> Outcome:
    from herl import SAC
    from herl.io.archive import ARRAYS_NAME, META_NAME

    path = tmp / "bomb.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(META_NAME, json.dumps({"format": "herl", "kind": "model", "format_version": 1}))
        archive.writestr(ARRAYS_NAME, b"\0" * 200_000_000)
    return refused(lambda: SAC.load(path), r"decompression bomb")


@B("a model file whose meta.json claims 100 MB: refused before reading")
def _(tmp: Path) -> Outcome:
    from herl import SAC
    from herl.io.archive import ARRAYS_NAME, META_NAME

    path = tmp / "big.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(META_NAME, b'{"format": "herl", "pad": "' + b" " * 100_000_000 + b'"}')
        archive.writestr(ARRAYS_NAME, b"")
    return refused(lambda: SAC.load(path), r"meta\.json")


@B("a model file with Discrete n=10**12: refused")
def _(tmp: Path) -> Outcome:
    return _model_case(tmp, lambda meta, arrays: meta.__setitem__("action_space", {"type": "Discrete", "n": 10**12}),
                       r"Discrete n must be a whole number")


@B("a model file whose observation space is a Box of 10**12 elements: refused")
def _(tmp: Path) -> Outcome:
    def edit(meta: dict, arrays: dict) -> None:
        meta["observation_space"]["spaces"]["observation"] = {"type": "Box", "low": 0.0, "high": 1.0,
                                                              "shape": [10**6, 10**6], "dtype": "float32"}

    return _model_case(tmp, edit, r"more than 100,000,000 elements")


@B("a model file with a weight of the wrong shape: refused naming the mismatch")
def _(tmp: Path) -> Outcome:
    def edit(meta: dict, arrays: dict) -> None:
        name = next(k for k in arrays if k.startswith("nets/actor/") and k.endswith("weight"))
        arrays[name] = np.zeros((3, 5), np.float32)

    return _model_case(tmp, edit, r"do not fit a SAC")


for _title, _edit, _says in [
    ("lacking its 'policy' field", lambda meta, arrays: meta.pop("policy"), r"lacks its 'policy' field"),
    ("lacking its 'algorithm' field", lambda meta, arrays: meta.pop("algorithm"), r"lacks its 'algorithm' field"),
    ("whose format_version is the string '1'", lambda meta, arrays: meta.__setitem__("format_version", "1"),
     r"format version '1'"),
    ("whose counters hold strings", lambda meta, arrays: meta["counters"].__setitem__("num_timesteps", "12"),
     r"counters must be whole numbers"),
    ("whose random generator state is damaged", lambda meta, arrays: meta["rng_state"].__setitem__("state", "x"),
     r"rng_state"),
]:
    B(f"a model file {_title}: refused naming it")(lambda tmp, e=_edit, s=_says: _model_case(tmp, e, s))


@B("a model file whose actor weights are NaN: loads with a warning")
def _(tmp: Path) -> Outcome:
    from herl import SAC

    def edit(meta: dict, arrays: dict) -> None:
        name = next(k for k in arrays if k.startswith("nets/actor/"))
        arrays[name] = np.full_like(arrays[name], np.nan)

    path = F.write(tmp, "model.zip", F.edited("model.zip", edit))
    return warns(lambda: SAC.load(path, device="cpu"), r"hold NaN")


@B("a model file whose config sets tensorboard_log: refused, never honoured")
def _(tmp: Path) -> Outcome:
    return _model_case(tmp, lambda meta, arrays: meta["config"].__setitem__("tensorboard_log", str(tmp / "elsewhere")),
                       r"tensorboard_log", r"never taken from a file")


@B("a model file whose config sets verbose: refused, never honoured")
def _(tmp: Path) -> Outcome:
    return _model_case(tmp, lambda meta, arrays: meta["config"].__setitem__("verbose", 2), r"verbose",
                       r"never taken from a file")


@B("SAC.load of a folder")
def _(tmp: Path) -> Outcome:
    from herl import SAC

    return refused(lambda: SAC.load(tmp), r"is a folder")


@B("SAC.load of a text file")
def _(tmp: Path) -> Outcome:
    from herl import SAC

    (tmp / "notes.zip").write_text("not a model\n")
    return refused(lambda: SAC.load(tmp / "notes.zip"), r"not a herl model file")


@B("SAC.load of a model file cut short")
def _(tmp: Path) -> Outcome:
    from herl import SAC

    data = F.files()["model.zip"]
    path = F.write(tmp, "model.zip", data[: len(data) * 2 // 3])
    return refused(lambda: SAC.load(path), r"not a herl model file|damaged|truncated")


@B("a model file whose net_arch is edited to layers of 10**6: refused before allocating")
def _(tmp: Path) -> Outcome:
    return _model_case(tmp, lambda meta, arrays: meta["policy_kwargs"].__setitem__("net_arch", [10**6, 10**6]),
                       r"imply a layer of [\d,]+ weights|net_arch")


@B("a model file whose optimizer lr is 'fast': refused")
def _(tmp: Path) -> Outcome:
    def edit(meta: dict, arrays: dict) -> None:
        for groups in meta["optimizers"].values():
            for group in groups:
                group["lr"] = "fast"

    return _model_case(tmp, edit, r"lr='fast'")


@B("a buffer file whose config's buffer_size is smaller than its rows: refused")
def _(tmp: Path) -> Outcome:
    data = F.edited("her.zip", lambda meta, arrays: meta["config"].__setitem__("buffer_size", 10))
    return refused(lambda: _load_her(F.write(tmp, "her.zip", data)), r"buffer_size|rows|damaged")


class _Payload:
    """A pickle whose loading creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _with_member(data: bytes, name: str, payload: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as archive:
        for member in source.namelist():
            archive.writestr(member, payload if member == name else source.read(member))
        if name not in source.namelist():
            archive.writestr(name, payload)
    return out.getvalue()


@B("a model file whose arrays member is a pickle that runs code: refused, never unpickled")
def _(tmp: Path) -> Outcome:
    import pickle

    from herl import SAC
    from herl.io.archive import ARRAYS_NAME

    marker = tmp / "unpickled"
    path = F.write(tmp, "model.zip", _with_member(F.files()["model.zip"], ARRAYS_NAME, pickle.dumps(_Payload(marker))))
    outcome = refused(lambda: SAC.load(path), r"arrays\.safetensors is damaged|not a herl")
    return _executed(marker) or outcome


@B("a model file with a member named ../../escaped: nothing written outside, the file loads or is refused")
def _(tmp: Path) -> Outcome:
    from herl import SAC

    (tmp / "inner").mkdir()
    path = F.write(tmp / "inner", "model.zip", _with_member(F.files()["model.zip"], "../../escaped", b"x"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            SAC.load(path)
        outcome = clear("loaded; the extra member ignored")
    except Exception as err:  # noqa: BLE001 - judged
        outcome = judge(err)
    escaped = [p for p in (tmp / "escaped", tmp.parent / "escaped") if p.exists()]
    return fail(f"{escaped[0]} was written") if escaped else outcome


# ---- run folders


def _resume(tmp: Path, run: Path, timesteps: int = 400) -> Done:
    return herl("train", "--resume", run, "--timesteps", timesteps, "--progress", "off", cwd=tmp)


@B("herl train --resume of a run whose latest.json is damaged: resumes from the newest checkpoint, says so")
def _(tmp: Path) -> Outcome:
    run = F.copy_run(tmp)
    (run / "checkpoints" / "latest.json").write_text("{not json")
    done = _resume(tmp, run)
    if (bad := cli_ok(done)):
        return bad
    return clear(_tail(re.sub(r"\n\s*warnings\.warn.*", "", done.err))) if re.search(r"resuming from", done.err) \
        else fail("resumed without saying latest.json was damaged")


@B("herl train --resume of a run whose config.json is damaged")
def _(tmp: Path) -> Outcome:
    run = F.copy_run(tmp)
    (run / "config.json").write_text("{")
    return judge_cli(_resume(tmp, run), r"config\.json is damaged", r"restore it")


@B("herl train --resume after the newest checkpoint was deleted: falls back to the one before, says so")
def _(tmp: Path) -> Outcome:
    from herl.run.checkpoint import complete_checkpoints

    run = F.copy_run(tmp)
    newest, previous = complete_checkpoints(run)[:2]
    shutil.rmtree(newest.path)
    done = _resume(tmp, run)
    if (bad := cli_ok(done)):
        return bad
    return clear(f"resumed from {previous.path.name}") if previous.path.name in done.err else \
        fail(f"did not say it resumed from {previous.path.name}: {_tail(done.err)}")


@B("herl train --resume after the newest checkpoint's model was cut short: falls back, says so")
def _(tmp: Path) -> Outcome:
    from herl.run.checkpoint import complete_checkpoints

    run = F.copy_run(tmp)
    newest, previous = complete_checkpoints(run)[:2]
    model = newest.path / "model.zip"
    model.write_bytes(model.read_bytes()[:1000])
    (run / "model.zip").unlink()
    (run / "summary.json").unlink()
    done = _resume(tmp, run)
    if (bad := cli_ok(done)):
        return bad
    said = re.search(rf"{re.escape(str(newest.path))} cannot be loaded", done.err) and previous.path.name in done.err
    return clear("fell back and said so") if said else fail(f"did not say what it skipped: {_tail(done.err)}")


@B("a latest.json pointing outside the run folder (../../../etc): never followed")
def _(tmp: Path) -> Outcome:
    from herl.run.checkpoint import complete_checkpoints, latest_checkpoint

    run = F.copy_run(tmp)
    outside = tmp / "outside"
    shutil.copytree(complete_checkpoints(run)[0].path, outside / "step_000000009999")
    (run / "checkpoints" / "latest.json").write_text(json.dumps({"step": 9999, "path": "../../../outside/"
                                                                 "step_000000009999"}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = latest_checkpoint(run)
    if found is None or not found.path.resolve().is_relative_to(run.resolve()):
        return fail(f"followed latest.json to {found}")
    said = [str(w.message) for w in caught if "latest.json" in str(w.message)]
    return clear(said[0][:200]) if said else fail("ignored latest.json without saying so")


@B("herl train --resume removes the temporary files a killed process left")
def _(tmp: Path) -> Outcome:
    run = F.copy_run(tmp)
    (run / ".config.json.abc123.tmp").write_text("left by a killed process")
    (run / "checkpoints" / ".latest.json.x.tmp").write_text("")
    if (bad := cli_ok(_resume(tmp, run))):
        return bad
    left = [*run.glob(".*.tmp"), *(run / "checkpoints").glob(".*.tmp")]
    return fail(f"left {[p.name for p in left]}") if left else clear("removed")


def _module_env_run(tmp: Path) -> tuple[Path, Path]:
    run = F.copy_run(tmp)
    marker = _marker_module(tmp, "auditmod")
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "env": "auditmod:herl/BitFlipping-v0"}))
    return run, marker


@B("herl eval of a run whose config names a module:Id env: asks before importing (refused without a terminal)")
def _(tmp: Path) -> Outcome:
    run, marker = _module_env_run(tmp)
    done = herl("eval", run, "--episodes", "1", cwd=tmp)
    return _executed(marker) or judge_cli(done, r"imports the Python module 'auditmod'", r"--env")


@B("herl train --resume of a run whose config names a module:Id env: asks before importing")
def _(tmp: Path) -> Outcome:
    run, marker = _module_env_run(tmp)
    return _executed(marker) or judge_cli(_resume(tmp, run), r"imports the Python module 'auditmod'", r"--env")


@B("herl train --resume of a run whose every checkpoint is damaged")
def _(tmp: Path) -> Outcome:
    from herl.run.checkpoint import complete_checkpoints

    run = F.copy_run(tmp)
    for checkpoint in complete_checkpoints(run):
        (checkpoint.path / "model.zip").write_bytes(b"damaged")
    (run / "model.zip").unlink()
    (run / "summary.json").unlink()
    return judge_cli(_resume(tmp, run), r"no checkpoint of .* can be loaded", r"another folder")


# ---- buffers


def _sampled_with(compute_reward: Callable) -> Callable[[], object]:
    from test_guards import _her_buffer

    return lambda: _her_buffer(compute_reward).sample(64)


@B("compute_reward returning strings: named when sampling")
def _(tmp: Path) -> Outcome:
    return refused(_sampled_with(lambda a: np.array(["yes"] * len(a))), r"compute_reward", r"not numbers")


@B("compute_reward returning a fixed-size array: named when sampling")
def _(tmp: Path) -> Outcome:
    return refused(_sampled_with(lambda a: np.zeros(3)), r"compute_reward returned shape \(3,\)")


@B("compute_reward returning NaN: named when sampling")
def _(tmp: Path) -> Outcome:
    return refused(_sampled_with(lambda a: np.full(len(a), np.nan)), r"compute_reward returned NaN or infinity")


def _bits_buffer():
    from herl import HerReplayBuffer
    from herl.envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=4, continuous=True)
    buffer = HerReplayBuffer(1000, env.observation_space, env.action_space, env=env, seed=0)
    return buffer, env.reset(seed=0)[0]


def _add(buffer, obs: dict, next_obs: dict | None = None, action: object = None, reward: object = 0.0) -> None:
    buffer.add(obs, obs if next_obs is None else next_obs, np.zeros(4, np.float32) if action is None else action,
               reward, terminated=False, truncated=False)


def _nothing_stored(buffer, outcome: Outcome) -> Outcome:
    return fail("a refused add() stored a row") if outcome.verdict != "FAIL" and len(buffer) else outcome


@B("add() with strings as the action: named, nothing stored")
def _(tmp: Path) -> Outcome:
    buffer, obs = _bits_buffer()
    outcome = refused(lambda: _add(buffer, obs, action="abc"), r"action holds", r"not numbers")
    return _nothing_stored(buffer, outcome)


@B("add() with None as the reward: named, nothing stored")
def _(tmp: Path) -> Outcome:
    buffer, obs = _bits_buffer()
    outcome = refused(lambda: _add(buffer, obs, reward=None), r"reward")
    return _nothing_stored(buffer, outcome)


@B("add() of a NaN next observation: refused, nothing stored")
def _(tmp: Path) -> Outcome:
    buffer, obs = _bits_buffer()
    bad = {**obs, "observation": np.full(4, np.nan, np.float32)}
    outcome = refused(lambda: _add(buffer, obs, next_obs=bad), r"next_obs\['observation'\] of env 0 holds NaN")
    return _nothing_stored(buffer, outcome)


@B("add() of an infinite action: refused, nothing stored")
def _(tmp: Path) -> Outcome:
    buffer, obs = _bits_buffer()
    outcome = refused(lambda: _add(buffer, obs, action=np.array([np.inf, 0, 0, 0], np.float32)), r"action of env 0")
    return _nothing_stored(buffer, outcome)


@B("an offline HER buffer too small for an episode's copies: warns")
def _(tmp: Path) -> Outcome:
    from herl import HerReplayBuffer
    from herl.envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=4, continuous=True)
    buffer = HerReplayBuffer(10, env.observation_space, env.action_space, env=env, n_sampled_goal=4,
                             online_sampling=False, max_episode_length=4, seed=0)
    obs, _ = env.reset(seed=0)

    def episode() -> None:
        nonlocal obs
        for t in range(4):
            next_obs, reward, *_ = env.step(env.action_space.sample())
            buffer.add(obs, next_obs, np.zeros(4, np.float32), reward, terminated=False, truncated=t == 3)
            obs = next_obs
    return warns(episode, r"Raise buffer_size")


@B("a compute_reward that is not vectorized: refused at construction")
def _(tmp: Path) -> Outcome:
    from herl import HerReplayBuffer
    from herl.envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=4, continuous=True)
    return refused(lambda: HerReplayBuffer(100, env.observation_space, env.action_space,
                                           compute_reward=lambda a, d, i: float(np.all(a == d))), r"vectorized")


# ---- the command line's settings


@B("herl train --env herl/PointReach-v0 --set env.dim=abc")
def _(tmp: Path) -> Outcome:
    done = herl("train", "--env", "herl/PointReach-v0", "--set", "env.dim=abc", "--timesteps", "100", "--progress",
                "off", "--run-dir", tmp / "run", cwd=tmp)
    return judge_cli(done, r"env\.dim='abc'", r"constructor takes")


@B("herl train --set policy.net_arch=64")
def _(tmp: Path) -> Outcome:
    from test_cli import TINY

    return judge_cli(herl("train", *TINY, "--set", "policy.net_arch=64", "--run-dir", tmp / "run", cwd=tmp),
                     r"net_arch=64", r"must be")


@B("herl train --set batch_size=1e400")
def _(tmp: Path) -> Outcome:
    from test_cli import TINY

    return judge_cli(herl("train", *TINY, "--set", "batch_size=1e400", "--run-dir", tmp / "run", cwd=tmp),
                     r"batch_size=inf", r"must be")


@B("herl train --env herl/PointReach-v0 --set buffer_size=20: refused before training")
def _(tmp: Path) -> Outcome:
    done = herl("train", "--env", "herl/PointReach-v0", "--algo", "sac", "--set", "buffer_size=20", "--progress", "off",
                "--run-dir", tmp / "run", cwd=tmp)
    if (tmp / "run" / "seed_0" / "progress.csv").exists():
        return fail("training started")
    return judge_cli(done, r"cannot hold one whole episode of 50 steps")


@B("herl train --set learning_rat=1e-3 (misspelt)")
def _(tmp: Path) -> Outcome:
    from test_cli import TINY

    return judge_cli(herl("train", *TINY, "--set", "learning_rat=1e-3", "--run-dir", tmp / "run", cwd=tmp),
                     r"unknown key 'learning_rat'", r"did you mean learning_rate")


# ---- predict


def _bits_sac():
    from herl import SAC
    from herl.envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=4, continuous=True)
    return SAC("MultiInputPolicy", env, seed=0, **SMALL), env.reset(seed=0)[0]


@B("predict of an observation without desired_goal: names the key")
def _(tmp: Path) -> Outcome:
    model, obs = _bits_sac()
    return refused(lambda: model.predict({k: v for k, v in obs.items() if k != "desired_goal"}),
                   r"lacks the key 'desired_goal'")


@B("predict of an observation entry of the wrong shape: names the key and the expected shape")
def _(tmp: Path) -> Outcome:
    model, obs = _bits_sac()
    return refused(lambda: model.predict({**obs, "observation": np.zeros(5, np.float32)}),
                   r"observation\['observation'\] has shape", r"expected numbers shaped \(4,\)")


# ---- the command line under real use


def _signalled(tmp: Path, signum: int) -> Outcome:
    from test_cli import TINY
    from test_robustness import _logged_steps

    from herl.run.checkpoint import latest_checkpoint

    args = [*TINY, "--timesteps", "200000", "--set", "checkpoint.freq=100000", "--set", "eval.freq=0"]
    process = subprocess.Popen([sys.executable, "-m", "herl", "train", *args, "--run-dir", str(tmp)], cwd=tmp,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run = tmp / "seed_0"
    deadline = time.monotonic() + 120
    while _logged_steps(run / "progress.csv") <= 100:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            return fail(f"the run ended or never started: {_tail(process.stderr.read())}")
        time.sleep(0.05)
    sent = time.monotonic()
    process.send_signal(signum)
    try:
        _, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        return fail("still running a minute after the signal")
    checkpoint = latest_checkpoint(run)
    if process.returncode != 130 or "Traceback" in err or checkpoint is None or checkpoint.step <= 100:
        return fail(f"exit {process.returncode}, checkpoint {checkpoint}: {_tail(err)}")
    if (bad := cli_ok(herl("train", "--resume", tmp, "--timesteps", checkpoint.step + 100, "--progress", "off",
                           cwd=tmp), "the resume")):
        return bad
    line = next((line for line in err.splitlines() if "interrupted" in line), _tail(err))
    return clear(f"{time.monotonic() - sent:.1f} s: {line}") if "herl train --resume" in err else \
        weak(f"did not say how to resume: {line}")


@B("SIGTERM during herl train: a checkpoint within seconds, says how to resume, exit 130")
def _(tmp: Path) -> Outcome:
    return _signalled(tmp, signal.SIGTERM)


@B("Ctrl-C (SIGINT) during herl train")
def _(tmp: Path) -> Outcome:
    return _signalled(tmp, signal.SIGINT)


@B("herl train --set buffer_size=1000000 on a short run: kept (not capped), and kept by --resume")
def _(tmp: Path) -> Outcome:
    from test_cli import TINY

    if (bad := cli_ok(herl("train", *TINY, "--set", "buffer_size=1000000", "--run-dir", tmp / "r", cwd=tmp))):
        return bad
    if (bad := cli_ok(_resume(tmp, tmp / "r", 400))):
        return bad
    run = tmp / "r" / "seed_0"
    size = json.loads((run / "config.json").read_text())["hyperparameters"]["buffer_size"]
    from herl.run.checkpoint import latest_checkpoint

    header = json.loads(zipfile.ZipFile(latest_checkpoint(run).path / "replay_buffer.zip").read("meta.json"))
    stored = header["config"]["buffer_size"]
    notes = [note for note in json.loads((run / "summary.json").read_text())["notes"] if "buffer_size" in note]
    if size != 1_000_000 or stored != 1_000_000:
        return fail(f"buffer_size became {size} in config.json, {stored} in the buffer")
    return clear("kept, no note on it") if not notes else weak(f"kept, but a note: {notes}")


@B("herl plot --label A B (labels after one flag)")
def _(tmp: Path) -> Outcome:
    runs = F.run().parent
    done = herl("plot", runs, runs, "--label", "A", "B", "-o", tmp / "a.png", cwd=tmp)
    return cli_ok(done) or clear("drawn")


@B("herl train --progress log: the rate shown is not 0 fps once training runs")
def _(tmp: Path) -> Outcome:
    from test_cli import TINY

    done = herl("train", *[a if a != "off" else "log" for a in TINY], "--timesteps", "3000", "--set", "eval.freq=1000",
                "--set", "checkpoint.freq=1000", "--run-dir", tmp / "run", cwd=tmp)
    if (bad := cli_ok(done)):
        return bad
    rates = [int(m) for m in re.findall(r"steps \(\d+%\), (\d+) fps", done.err)]
    zero = [i for i, rate in enumerate(rates) if rate == 0 and i > 0]
    return fail(f"{len(zero)} of {len(rates)} lines show 0 fps: {rates}") if zero or not rates else \
        clear(f"rates {rates}")


@B("herl check-env parking-v0 suggests highway_env:parking-v0")
def _(tmp: Path) -> Outcome:
    return judge_cli(herl("check-env", "parking-v0", cwd=tmp), r"did you mean highway_env:parking-v0")


@B("the follow-up commands herl train prints are shell-quoted (a run folder with a space)")
def _(tmp: Path) -> Outcome:
    from test_cli import TINY

    folder = tmp / "with space"
    done = herl("train", *TINY, "--timesteps", "100", "--run-dir", folder, cwd=tmp)
    return cli_ok(done) or (clear("quoted") if f"herl plot '{folder}'" in done.out else
                            fail(f"not quoted: {_tail(done.out)}"))


@B("pip install prints no licence deprecation: the licence is an SPDX string")
def _(tmp: Path) -> Outcome:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return clear("license = \"MIT\"") if isinstance(project.get("license"), str) else \
        fail(f"license is {project.get('license')!r}")


@B("herl train --run-dir of an existing run: refused, the run kept")
def _(tmp: Path) -> Outcome:
    from test_cli import TINY

    run = F.copy_run(tmp)
    kept = Kept(run)
    return kept.then(judge_cli(herl("train", *TINY, "--run-dir", run.parent, cwd=tmp), r"already holds a run",
                               r"--resume"))


@B("SIGKILL during herl train, then --resume: the same weights as a run never stopped")
def _(tmp: Path) -> Outcome:
    import torch
    from test_cli import TINY

    from herl.run.checkpoint import latest_checkpoint
    from herl.training.base import OffPolicyAlgorithm

    args = [*TINY, "--timesteps", "1500", "--set", "checkpoint.freq=150", "--set", "eval.freq=500"]
    if (bad := cli_ok(herl("train", *args, "--run-dir", tmp / "whole", cwd=tmp))):
        return bad
    process = subprocess.Popen([sys.executable, "-m", "herl", "train", *args, "--run-dir", str(tmp / "killed")],
                               cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = tmp / "killed" / "seed_0"
    deadline = time.monotonic() + 120
    while ((checkpoint := latest_checkpoint(run) if run.exists() else None) is None or checkpoint.step < 300) \
            and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.kill()
    process.wait()
    if (run / "model.zip").exists():
        return weak("the run finished before it could be killed: nothing tried")
    if (bad := cli_ok(herl("train", "--resume", tmp / "killed", "--progress", "off", cwd=tmp))):
        return bad
    whole, resumed = (OffPolicyAlgorithm.load(p / "seed_0" / "model.zip") for p in (tmp / "whole", tmp / "killed"))
    differ = [f"{name}.{key}" for name, state in whole.get_parameters().items() if not name.endswith("optimizer")
              for key, tensor in state.items() if not torch.equal(tensor, resumed.get_parameters()[name][key])]
    if differ or resumed.num_timesteps != whole.num_timesteps:
        return fail(f"the resumed run differs: {differ[:3]}, {resumed.num_timesteps} steps")
    return clear(f"killed after step {checkpoint.step if checkpoint else '?'}, resumed bit-identical")


@B("SIGTERM to the parent of herl train --jobs 2: each seed writes its checkpoint, the parent says where each resumes")
def _(tmp: Path) -> Outcome:
    from test_cli import TINY

    args = [*TINY, "--timesteps", "200000", "--set", "checkpoint.freq=100000", "--set", "eval.freq=0"]
    process = subprocess.Popen([sys.executable, "-m", "herl", "train", *args, "--seed", "0", "1", "--jobs", "2",
                                "--run-dir", str(tmp)], cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    runs = [tmp / "seed_0", tmp / "seed_1"]
    deadline = time.monotonic() + 200
    while not all((r / "progress.csv").exists() and (r / "progress.csv").stat().st_size > 200 for r in runs):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            return fail(f"the runs ended or never started: {_tail(process.stderr.read())}")
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        return fail("still running two minutes after the signal")
    from herl.run.checkpoint import latest_checkpoint

    steps = [latest_checkpoint(r).step if latest_checkpoint(r) else 0 for r in runs]
    named = all(f"{r}: resumes from step {s:,}" in err for r, s in zip(runs, steps))
    if process.returncode != 130 or not all(steps) or not named:
        return fail(f"exit {process.returncode}, checkpoints at {steps}: {_tail(err)}")
    return clear(f"checkpoints at {steps}")


@B("a crash while a checkpoint is written leaves the previous checkpoint named and loadable")
def _(tmp: Path) -> Outcome:
    from test_cli import test_a_crash_while_writing_a_checkpoint_leaves_the_previous_one as crash_while_checkpointing

    try:
        crash_while_checkpointing(tmp)  # the suite's case, run as it is: its checks are this case's
    except AssertionError as err:
        return fail(f"the previous checkpoint was not kept: {err}")
    return clear("the previous checkpoint kept, named and loadable")


# ---- what holds, and the catalogue's errors that go with it


@B("a buffer file whose arrays member is a pickle that runs code: refused, never unpickled")
def _(tmp: Path) -> Outcome:
    import pickle

    from herl.io.archive import ARRAYS_NAME

    marker = tmp / "unpickled"
    path = F.write(tmp, "her.zip", _with_member(F.files()["her.zip"], ARRAYS_NAME, pickle.dumps(_Payload(marker))))
    outcome = refused(lambda: _load_her(path), r"arrays\.safetensors is damaged|not a herl")
    return _executed(marker) or outcome


def _fuzzed(kind: str, strategy: str, tmp: Path) -> Outcome:
    """Mutated files (the fuzz test's strategies, 40 each): each loads and is usable, or is refused by herl."""
    import test_fuzz_files
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    meta, arrays = test_fuzz_files._unpack(F.files()[kind])
    data = F.files()[kind]
    if strategy == "bytes":
        mutations = st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(1, 255)), min_size=1, max_size=4)
    else:
        mutations = (test_fuzz_files.meta_mutation(meta) if strategy == "meta" else
                     test_fuzz_files.array_mutation(arrays))
    tried = [0]

    @settings(max_examples=40, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(mutated=mutations)
    def case(mutated):
        tried[0] += 1
        if strategy == "bytes":
            flipped = bytearray(data)
            for at, xor in mutated:
                flipped[at] ^= xor
            mutated = bytes(flipped)
        else:
            mutated = test_fuzz_files._pack(mutated, arrays) if strategy == "meta" else test_fuzz_files._pack(meta,
                                                                                                           mutated)
        test_fuzz_files._check(kind, mutated, tmp)

    try:
        with np.errstate(all="ignore"):
            case()
    except test_fuzz_files.Hang as err:
        return fail(f"a mutated {kind} hung: {err}")
    except Exception as err:  # noqa: BLE001 - judged
        return weak(f"a mutated {kind}: raw {type(err).__name__}: {str(err)[:200]}")
    return clear(f"{tried[0]} mutated files loaded and usable, or refused by herl")


for _kind, _strategy, _what in [("model.zip", "bytes", "model files, bytes flipped"),
                                ("model.zip", "meta", "model files, metadata mutated"),
                                ("her.zip", "meta", "HER buffer files, metadata mutated"),
                                ("her.zip", "arrays", "HER buffer files, arrays mutated")]:
    B(f"fuzzed {_what}: each loaded and usable, or refused by herl")(
        lambda tmp, k=_kind, s=_strategy: _fuzzed(k, s, tmp))


@B("save_replay_buffer of a 60-row buffer of capacity 1,000,000 writes the rows only")
def _(tmp: Path) -> Outcome:
    from herl import SAC, HerReplayBuffer
    from herl.envs import BitFlippingEnv

    model = SAC("MultiInputPolicy", BitFlippingEnv(n_bits=8, continuous=True), replay_buffer_class=HerReplayBuffer,
                buffer_size=1_000_000, learning_starts=50, batch_size=8, policy_kwargs=dict(net_arch=[8]), seed=0)
    model.learn(60)
    model.save_replay_buffer(tmp / "b.zip")
    size = (tmp / "b.zip").stat().st_size
    return clear(f"{size:,} bytes") if size < 100_000 else fail(f"{size:,} bytes for 60 rows")


@B("files herl saves get the permissions of new files (0644 under umask 022), no temporary file left")
def _(tmp: Path) -> Outcome:
    mask = os.umask(0o022)
    try:
        model, _ = _bits_sac()
        model.save(tmp / "m.zip")
    finally:
        os.umask(mask)
    mode = (tmp / "m.zip").stat().st_mode & 0o777
    left = list(tmp.glob(".*.tmp"))
    return fail(f"mode {mode:o}, left {left}") if mode != 0o644 or left else clear("0644")


@B("NaN in an episode's first observation (from reset): blamed on the reset, not on the action")
def _(tmp: Path) -> Outcome:
    from test_non_finite_causes import NanAtSecondReset

    from herl import SAC, HerReplayBuffer
    from herl.envs import PointReachEnv

    model = SAC("MultiInputPolicy", NanAtSecondReset(PointReachEnv(max_episode_steps=10)),
                replay_buffer_class=HerReplayBuffer, seed=0, **SMALL)
    outcome = refused(lambda: model.learn(40), r"obs\['observation'\] of env 0 holds NaN", r"first observation")
    return weak(f"blames the policy: {outcome.detail}") if "policy diverged" in outcome.detail else outcome


@B("NaN in an info entry stored with copy_info_dict: named as that entry")
def _(tmp: Path) -> Outcome:
    from herl import HerReplayBuffer

    env, obs_space, act_space = _point_spaces()
    buffer = HerReplayBuffer(1000, obs_space, act_space, env=env, copy_info_dict=True, info_keys=["distance"])
    obs, _ = env.reset(seed=0)
    return refused(lambda: buffer.add(obs, obs, np.zeros(2, np.float32), 0.0, infos=[{"distance": np.nan}],
                                      terminated=False, truncated=False), r"info entry 'distance' of env 0")


@B("herl eval of a bare model file (outside a run folder) without --env")
def _(tmp: Path) -> Outcome:
    shutil.copy(F.run() / "model.zip", tmp / "bare.zip")
    return judge_cli(herl("eval", tmp / "bare.zip", "--episodes", "1", cwd=tmp), r"its env is unknown",
                     r"pass --env")


@B("herl train --resume RUN --set ... (a start-only flag): refused naming the flag")
def _(tmp: Path) -> Outcome:
    return judge_cli(herl("train", "--resume", F.run(), "--set", "learning_rate=1e-3", cwd=tmp),
                     r"--resume continues a run with its own settings", r"not --set")


@B("herl train --resume of a folder holding no run")
def _(tmp: Path) -> Outcome:
    (tmp / "empty").mkdir()
    return judge_cli(herl("train", "--resume", tmp / "empty", cwd=tmp), r"empty|no run|not a run")


@B("DQN.load of a SAC model file: names the class to load it with")
def _(tmp: Path) -> Outcome:
    from herl import DQN

    return refused(lambda: DQN.load(F.write(tmp, "model.zip")), r"holds a SAC model, not a DQN")


@B("a model file of format version 99: says to upgrade herl")
def _(tmp: Path) -> Outcome:
    return _model_case(tmp, lambda meta, arrays: meta.__setitem__("format_version", 99), r"upgrade herl")


@B("SAC.load of a zip without herl's members (an SB3 file)")
def _(tmp: Path) -> Outcome:
    from herl import SAC

    with zipfile.ZipFile(tmp / "sb3.zip", "w") as archive:
        archive.writestr("data", "{}")
        archive.writestr("policy.pth", b"\x80\x04K\x01.")
    return refused(lambda: SAC.load(tmp / "sb3.zip"), r"lacks meta\.json")


@B("herl eval --video into a folder that does not exist: no folder made, the video skipped saying why")
def _(tmp: Path) -> Outcome:
    done = herl("eval", F.run(), "--episodes", "1", "--video", tmp / "missing" / "v.gif", cwd=tmp)
    if (tmp / "missing").exists():
        return fail("the missing folder was created")
    if done.rc == 0:  # the video is best-effort (an env that cannot render skips it too): said, not an error
        said = re.search(r"no video: cannot write .*does not exist", done.out)
        return clear(said.group(0)) if said else fail(f"no video and no word why: {_tail(done.out)}")
    return judge_cli(done, r"does not exist")


@B("SAC(ent_coef='auto_x'): refused at construction")
def _(tmp: Path) -> Outcome:
    return _refused_setting("SAC", "ent_coef", ent_coef="auto_x")


@B("SAC(learning_rat=1e-3) (a misspelt keyword): lists the known ones")
def _(tmp: Path) -> Outcome:
    from herl import SAC
    from herl.envs import PointReachEnv

    return refused(lambda: SAC("MultiInputPolicy", PointReachEnv(), learning_rat=1e-3), r"learning_rat",
                   r"known hyperparameters")


# ---------------------------------------------------------------------------------------------------------------------
# C: the faults two later audits found (a researcher building on herl as a library; users' own goal envs of unusual
# forms), each a silent wrong result or a misleading error before its fix


def _bits(n_bits: int = 4) -> Any:
    from gymnasium.wrappers import TimeLimit

    from herl.envs import BitFlippingEnv

    return TimeLimit(BitFlippingEnv(n_bits=n_bits), n_bits)


C = _adder("C", 3)


@C("a model trained with a HerReplayBuffer subclass, loaded with an env where its module is not imported")
def _(tmp: Path) -> Outcome:
    import types

    from herl import DQN, HerReplayBuffer

    module = types.ModuleType("audit_buffers")
    Sub = type("Sub", (HerReplayBuffer,), {"__module__": "audit_buffers"})
    module.Sub = Sub
    sys.modules["audit_buffers"] = module
    try:
        DQN("MultiInputPolicy", _bits(), replay_buffer_class=Sub, learning_starts=20).save(tmp / "m.zip")
    finally:
        del sys.modules["audit_buffers"]
    return refused(lambda: DQN.load(tmp / "m.zip", env=_bits()), r"'audit_buffers:Sub' is not loaded",
                   r"import its module \(audit_buffers\)")


@C("SAC with replay_buffer_kwargs prioritized=True (no priority would ever be fed back)")
def _(tmp: Path) -> Outcome:
    from herl import SAC, HerReplayBuffer
    from herl.envs import PointReachEnv

    return refused(lambda: SAC("MultiInputPolicy", PointReachEnv(), replay_buffer_class=HerReplayBuffer,
                               replay_buffer_kwargs=dict(prioritized=True)), r"prioritized=True is not allowed",
                   r"feeds back no priorities")


@C("replay_buffer_kwargs of NumPy types (a sweep's values) saved and loaded")
def _(tmp: Path) -> Outcome:
    from herl import DQN, HerReplayBuffer

    DQN("MultiInputPolicy", _bits(), replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs=dict(n_sampled_goal=np.int64(8))).save(tmp / "m.zip")
    loaded = DQN.load(tmp / "m.zip", env=_bits())
    k = loaded.replay_buffer.n_sampled_goal
    return clear("n_sampled_goal 8 kept") if k == 8 else fail(f"n_sampled_goal came back as {k}")


@C("a reward that reads a string info entry: named, not blamed on vectorization")
def _(tmp: Path) -> Outcome:
    from herl.envs import PointReachEnv, check_goal_env

    class Mode(PointReachEnv):
        def compute_reward(self, achieved_goal, desired_goal, info):
            distance = np.linalg.norm(np.asarray(achieved_goal) - desired_goal, axis=-1)
            return -(distance > self.distance_threshold * (2.0 if info["mode"] == "wide" else 1.0)).astype(np.float32)

        def step(self, action):
            observation, _, terminated, truncated, info = super().step(action)
            info = {**info, "mode": "wide"}
            return (observation, float(self.compute_reward(observation["achieved_goal"], observation["desired_goal"],
                                                           info)), terminated, truncated, info)

    return refused(lambda: check_goal_env(Mode(), copy_info_dict=True), r"reads info\['mode'\], a str",
                   r"only numeric info entries")


@C("goals of dtype bool: training logs its diagnostics")
def _(tmp: Path) -> Outcome:
    from gymnasium import spaces

    from herl import DQN, HerReplayBuffer
    from herl.envs import BitFlippingEnv

    class Bools(BitFlippingEnv):
        def __init__(self):
            super().__init__(n_bits=4, max_steps=4)
            goal = spaces.Box(0, 1, (4,), dtype=np.bool_)
            self.observation_space = spaces.Dict({"observation": goal, "achieved_goal": goal, "desired_goal": goal})

        def _get_obs(self):
            return {k: np.asarray(v).astype(bool) for k, v in super()._get_obs().items()}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        DQN("MultiInputPolicy", Bools(), replay_buffer_class=HerReplayBuffer, learning_starts=50).learn(300)
    return clear("trained")


@C("a Discrete goal space: compute_reward gets goals shaped (batch,), as documented")
def _(tmp: Path) -> Outcome:
    from gymnasium import spaces

    from herl import HerReplayBuffer

    cell = spaces.Discrete(9)
    obs_space = spaces.Dict({"observation": spaces.Box(0, 8, (1,), np.float32), "achieved_goal": cell,
                             "desired_goal": cell})
    shapes = set()

    def reward(achieved_goal, desired_goal, info):
        shapes.add(np.shape(achieved_goal))
        return (achieved_goal == desired_goal).astype(np.float32) - 1.0

    buffer = HerReplayBuffer(100, obs_space, spaces.Discrete(2), compute_reward=reward, device="cpu", seed=0)
    for t in range(12):
        obs = {"observation": np.array([[t % 9]], np.float32), "achieved_goal": np.array([t % 9]),
               "desired_goal": np.array([4])}
        reward = np.array([0.0 if (t + 1) % 9 == 4 else -1.0])
        buffer.add(obs, {**obs, "achieved_goal": np.array([(t + 1) % 9])}, np.array([1]), reward,
                   terminated=np.array([False]), truncated=np.array([t % 6 == 5]))
    buffer.sample(32)
    wrong = sorted(shape for shape in shapes if len(shape) != 1)
    return clear(f"shapes {sorted(shapes)}") if not wrong else fail(f"compute_reward got goals shaped {wrong}")


@C("herl check-env of an env with MultiDiscrete actions, which no algorithm takes")
def _(tmp: Path) -> Outcome:
    (tmp / "auditmulti.py").write_text(
        "import gymnasium as gym\nimport numpy as np\nfrom herl.envs import BitFlippingEnv\n\n"
        "class Multi(BitFlippingEnv):\n"
        "    def __init__(self):\n"
        "        super().__init__(n_bits=3, max_steps=3)\n"
        "        self.action_space = gym.spaces.MultiDiscrete([3, 3, 3])\n\n"
        "    def step(self, action):\n"
        "        return super().step(int(np.asarray(action)[0]))\n\n"
        "gym.register('AuditMulti-v0', entry_point=Multi)\n")
    done = herl("check-env", "auditmulti:AuditMulti-v0", cwd=tmp)
    if done.rc == 1 and "Discrete(27)" in done.out and "FAIL:" in done.out:
        return clear(done.out.strip().splitlines()[-1])
    return fail(f"exit {done.rc}: {(done.out + done.err).strip()[-300:]}")


@C("an env that ends on success without compute_terminated: the buffer says relabeled dones would be wrong")
def _(tmp: Path) -> Outcome:
    from herl import DQN, HerReplayBuffer
    from herl.envs import BitFlippingEnv

    class NoTerminated(BitFlippingEnv):
        compute_terminated = None

        def compute_reward(self, achieved_goal, desired_goal, info):
            return -np.any(np.asarray(achieved_goal) != np.asarray(desired_goal), axis=-1).astype(np.float32)

        def compute_truncated(self, achieved_goal, desired_goal, info):
            return np.zeros(np.shape(achieved_goal)[:-1], dtype=bool)

    return warns(lambda: DQN("MultiInputPolicy", NoTerminated(n_bits=2, max_steps=4),
                             replay_buffer_class=HerReplayBuffer, learning_starts=1_000).learn(400),
                 r"terminated=True, and there is no compute_terminated")


# ---------------------------------------------------------------------------------------------------------------------
# the run


def _run_case(case: Case, folder: Path) -> Outcome:
    import test_fuzz_files

    try:
        with test_fuzz_files.time_limit(CASE_SECONDS):
            return case.run(folder)
    except test_fuzz_files.Hang:
        return fail(f"ran longer than {CASE_SECONDS} s")
    except Exception as err:  # noqa: BLE001 - a case that did not judge what was raised
        return weak(f"escaped the case: {type(err).__name__}: {str(err)[:200]} (raised in {_origin(err)})"
                    + ("\n" + traceback.format_exc() if VERBOSE else ""))


VERBOSE = False


def main(argv: list[str] | None = None) -> int:
    global F, VERBOSE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="REGEX", help="cases whose id or title matches")
    parser.add_argument("--list", action="store_true", help="list the cases, run none")
    parser.add_argument("--keep", action="store_true", help="keep the cases' folders")
    parser.add_argument("--verbose", action="store_true", help="whole details and tracebacks")
    args = parser.parse_args(argv)
    VERBOSE = args.verbose
    counts = {p: sum(c.ident.startswith(p) for c in CASES) for p in "ABC"}
    assert counts == {"A": 41, "B": 111, "C": 8}, counts
    cases = [c for c in CASES if not args.only or any(re.search(p, f"{c.ident} {c.title}") for p in args.only)]
    if args.list:
        for c in cases:
            print(f"{c.ident:5} {c.title}")
        return 0
    root = Path(tempfile.mkdtemp(prefix="herl-audit-"))
    F = Fixtures(root / "fixtures")
    F.root.mkdir()
    totals = {"CLEAR": 0, "WEAK": 0, "FAIL": 0}
    start = time.monotonic()
    try:
        for c in cases:
            folder = root / c.ident
            folder.mkdir()
            began = time.monotonic()
            outcome = _run_case(c, folder)
            totals[outcome.verdict] += 1
            detail = " ".join(outcome.detail.split()) if not VERBOSE else outcome.detail
            print(f"{c.ident:5} {outcome.verdict:5} {time.monotonic() - began:5.1f}s  {c.title}"
                  f"\n      {detail if VERBOSE else detail[:300]}", flush=True)
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"CLEAR {totals['CLEAR']} / WEAK {totals['WEAK']} / FAIL {totals['FAIL']} of {len(cases)}"
          f"  ({time.monotonic() - start:.0f} s)")
    return 1 if totals["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
