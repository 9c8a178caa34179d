"""The peers' own tests against herl: Stable-Baselines3's and sb3-contrib's test files, run twice, once as the peers
wrote them and once with only their import lines changed to take herl's classes.

The test files are read from git directories (``git show REF:path``; e.g. bare mirrors of DLR-RM/stable-baselines3 and
Stable-Baselines-Team/stable-baselines3-contrib) into a work folder, never into this repository:

    WORK/peer/{sb3,contrib}/   the files as the peers wrote them (plus their pyproject.toml, for the pytest settings)
    WORK/herl/{sb3,contrib}/   the same files, import lines rewritten (WORK/rewrites.txt lists every change)

Import rule -- "a user changes the import line of the library's classes":

- Only module-level ``from stable_baselines3... import ...`` / ``from sb3_contrib... import ...`` statements change;
  imports inside functions are left alone (``test_her.py::test_import_error`` checks SB3's removed ``HER``, which herl's
  unrelated SB2-style ``HER`` must not answer). Nothing else in a file changes, and line numbers are kept (a rewritten
  statement takes one line, padded with blank lines), so tracebacks compare line for line.
- A name is taken from ``herl`` when it comes from one of the library's class modules -- ``stable_baselines3`` and
  ``sb3_contrib`` themselves (algorithms, ``HerReplayBuffer``), ``sb3_contrib.tqc`` / ``sb3_contrib.crossq``,
  ``stable_baselines3.her*`` (``HerReplayBuffer``, ``GoalSelectionStrategy``), ``common.buffers``, ``common.callbacks``,
  ``common.noise``, ``common.evaluation`` (``evaluate_policy``) and ``common.logger`` (``configure``) -- AND ``herl``
  exports the same name (checked by importing herl with the Python that runs the tests, so names herl adds later swap
  by themselves). Names herl lacks (A2C, PPO, QRDQN, TRPO, ARS, EveryNTimesteps, StopTrainingOnMaxEpisodes, ...) keep
  the peer's import, so the file still imports.
- Environments: a class from ``stable_baselines3.common.envs`` is taken from ``herl.envs`` when herl ships one of the
  same name (``BitFlippingEnv``, which herl writes to SB3's signature); the other test envs stay SB3's.
- Everything else is an env or tooling utility a user keeps: ``env_util.make_vec_env``, ``vec_env.*``, ``monitor``,
  ``env_checker``, ``base_class``, ``save_util``, ``utils``, ``preprocessing``, ``torch_layers``, ``running_mean_std``,
  ``sb3_contrib.common.*``.
- ``--keep-sb3 NAME`` (repeatable) keeps a name on the peer's import, to tell a herl class's fault from a helper's.

The cases (``GROUPS``) are chosen per file with pytest ``-k`` (case-insensitive; SB3's files also ``-m "not
expensive"``), the same expression for both copies; the peer copy's selection is the reference list, and a case the
herl copy does not collect counts as an error. pytest runs in a subprocess per (copy, file) with one torch thread,
``PYTHONHASHSEED=0`` and this file as a plugin (``-p``) that logs each outcome to JSON lines and stops a test past
``--test-timeout`` seconds.

    python benchmarks/peer_tests.py --sb3-git SB3.git --contrib-git CONTRIB.git [--ref HEAD] [--contrib-ref REF]
        --out peer_tests.json [--work DIR] [--groups sb3_save_load,...] [--variants peer,herl] [--jobs 1]

Prints passed/total per file and group for herl and the peer and herl's failures grouped by their first line; writes
per test id both outcomes and first failure lines to ``--out``.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

SB3_ALGOS = "DQN or DDPG or TD3 or SAC"
# (group, repo, file, -k expression or None for the whole file). At SB3 e05d2dbe and sb3-contrib 0ca7fdd8 the peer copy
# selects 43, 9, 22, 48, 171 and 38 cases (6, 0, 0, 3, 7 and 1 of them skipped by the peer tests themselves).
GROUPS: list[tuple[str, str, str, str | None]] = [
    # parametrizations with the four algorithms (-k also takes test_dqn_target_update_interval), plus the two
    # non-parametrized tests that use only SAC or DQN
    ("sb3_save_load", "sb3", "tests/test_save_load.py", f"{SB3_ALGOS} or pytorch_var or no_target_params"),
    # parametrizations with the four algorithms, plus the two non-parametrized DQN tests that are not HER's
    ("sb3_callbacks", "sb3", "tests/test_callbacks.py",
     f"({SB3_ALGOS} or eval_callback_logs_are_written or checkpoint_additional_info) and not eval_success_logging"),
    ("sb3_n_step", "sb3", "tests/test_n_step_replay.py", None),
    ("sb3_her", "sb3", "tests/test_her.py", None),
    ("sb3_her", "sb3", "tests/test_envs.py", "BitFlipping or bit_flipping"),
    ("sb3_her", "sb3", "tests/test_callbacks.py", "eval_success_logging"),
    ("sb3_her", "sb3", "tests/test_vec_normalize.py", "her_normalization"),
    # the rest of SB3's files that parametrize over the off-policy algorithms: their cases with DQN, DDPG, TD3 or SAC
    *[("sb3_more", "sb3", f"tests/{name}.py", SB3_ALGOS)
      for name in ("test_run", "test_predict", "test_deterministic", "test_train_eval_mode", "test_dict_env",
                   "test_spaces", "test_identity", "test_custom_policy", "test_cnn", "test_tensorboard", "test_logger",
                   "test_utils", "test_vec_normalize")],
    # TQC and CrossQ parametrizations, plus test_run's test_n_critics and test_save_load's test_save_load_pytorch_var
    # (TQC only, not parametrized)
    *[("contrib_tqc_crossq", "contrib", f"tests/{name}.py", "TQC or CrossQ or n_critics or pytorch_var")
      for name in ("test_run", "test_save_load", "test_cnn", "test_dict_env", "test_train_eval_mode",
                   "test_deterministic")],
]
REPO_MARKERS = {"sb3": "not expensive", "contrib": None}
# helper files copied beside the tests when the ref has them
HELPERS = ["pyproject.toml", "setup.cfg", "conftest.py", "tests/__init__.py", "tests/conftest.py"]

# modules whose names are "the library's classes": swapped when herl exports the name
CLASS_MODULES = re.compile(
    r"^(stable_baselines3|sb3_contrib|sb3_contrib\.(tqc|crossq)(\..*)?|stable_baselines3\.her(\..*)?|"
    r"stable_baselines3\.common\.(buffers|callbacks|noise|evaluation|logger))$")
ENV_MODULES = re.compile(r"^stable_baselines3\.common\.envs(\..*)?$")
PEER_PACKAGES = ("stable_baselines3", "sb3_contrib")

LOG_ENV, TIMEOUT_ENV = "PEER_TESTS_LOG", "PEER_TESTS_TIMEOUT"
PLUGIN = "_peer_tests_plugin"


# --------------------------------------------------------------------------------------------------------------------
# pytest plugin side (this file is loaded with ``-p _peer_tests_plugin`` inside each pytest subprocess)

def _log(record: dict) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _first_line(report) -> str:
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # skip: (path, lineno, reason)
        return str(longrepr[2]).splitlines()[0] if longrepr[2] else ""
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr)
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0].strip() if lines else ""


def _short_path(path: str) -> str:
    """A frame's file from its package on (``herl/training/base.py``, ``torch/nn/...``), or relative to the tests."""
    if not os.path.isabs(path):
        return path
    parts = Path(path).parts
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] in ("site-packages", "src") and i + 1 < len(parts):
            return "/".join(parts[i + 1:])
    return os.path.relpath(path) if path.startswith(os.getcwd()) else path


def _where(report) -> dict:
    """The deepest frame (file:line) and the test file's failing source line, for failures."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is None:
        return {}
    out = {"where": f"{_short_path(str(crash.path))}:{crash.lineno}"}
    entries = getattr(getattr(longrepr, "reprtraceback", None), "reprentries", [])
    for entry in reversed(entries):
        location = getattr(entry, "reprfileloc", None)
        if location is not None and location.path.startswith("tests"):
            source = [line[1:].strip() for line in getattr(entry, "lines", []) if line.startswith(">")]
            if source:
                out["test_line"] = f"{location.path}:{location.lineno}: {source[-1]}"
            break
    return out


def pytest_collection_finish(session) -> None:
    _log({"event": "selected", "ids": [item.nodeid for item in session.items]})


def pytest_collectreport(report) -> None:
    if report.failed:
        _log({"event": "collect_error", "id": report.nodeid, "message": _first_line(report)})


def pytest_runtest_logreport(report) -> None:
    wasxfail = hasattr(report, "wasxfail")
    _log({"event": "report", "id": report.nodeid, "when": report.when, "outcome": report.outcome,
          "xfail": wasxfail, "duration": round(report.duration, 3), "message": _first_line(report),
          **(_where(report) if report.failed else {})})


class PeerTestTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise PeerTestTimeout(f"test ran past {os.environ.get(TIMEOUT_ENV)} s (peer_tests --test-timeout)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    seconds = int(os.environ.get(TIMEOUT_ENV, "0") or 0)
    previous = signal.signal(signal.SIGALRM, _on_alarm) if seconds else None
    if seconds:
        signal.alarm(seconds)
    try:
        yield
    finally:
        if seconds:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------------------------------------------------
# harness side

def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True).stdout


def git_blob(git_dir: str, commit: str, path: str) -> str | None:
    result = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else None


def herl_names(python: str) -> dict:
    """What herl exports (top level, herl.envs) and the versions in play, as the Python running the tests sees them."""
    code = ("import json, herl, herl.envs, stable_baselines3, sb3_contrib, torch, gymnasium\n"
            "print(json.dumps({'herl': sorted(n for n in dir(herl) if not n.startswith('_')),"
            " 'herl.envs': sorted(n for n in dir(herl.envs) if not n.startswith('_')),"
            " 'herl_file': herl.__file__, 'versions': {m.__name__: m.__version__ for m in"
            " (herl, stable_baselines3, sb3_contrib, torch, gymnasium)}}))")
    return json.loads(subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout)


def swap_target(module: str, name: str, exported: dict, keep: set[str]) -> str | None:
    if name in keep:
        return None
    if CLASS_MODULES.match(module) and name in exported["herl"]:
        return "herl"
    if ENV_MODULES.match(module) and name in exported["herl.envs"]:
        return "herl.envs"
    return None


def rewrite_imports(source: str, exported: dict, keep: set[str]) -> tuple[str, list[dict]]:
    """Rewrite the module-level peer imports of ``source`` by the rule in the module docstring; line numbers kept."""
    lines = source.splitlines(keepends=True)
    changes = []
    for node in reversed(ast.parse(source).body):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and node.module.split(".")[0] in PEER_PACKAGES):
            continue
        kept, swapped = [], defaultdict(list)
        for alias in node.names:
            text = alias.name + (f" as {alias.asname}" if alias.asname else "")
            target = swap_target(node.module, alias.name, exported, keep)
            (swapped[target] if target else kept).append(text)
        if not swapped:
            continue
        statements = ([f"from {node.module} import {', '.join(kept)}"] if kept else []) + [
            f"from {target} import {', '.join(names)}" for target, names in swapped.items()]
        start, end = node.lineno - 1, node.end_lineno
        old = "".join(lines[start:end])
        lines[start:end] = ["; ".join(statements) + "\n"] + ["\n"] * (end - start - 1)
        changes.append({"line": node.lineno, "old": " ".join(old.split()), "new": "; ".join(statements)})
    return "".join(lines), sorted(changes, key=lambda c: c["line"])


def prepare(work: Path, repos: dict, exported: dict, keep: set[str]) -> dict:
    """Write WORK/peer/<repo> and WORK/herl/<repo>; return the import changes per file."""
    rewrites = {}
    for key, repo in repos.items():
        files = sorted({path for _, r, path, _ in GROUPS if r == key})
        for path in HELPERS + files:
            text = git_blob(repo["git_dir"], repo["commit"], path)
            if text is None:
                if path in files:
                    raise SystemExit(f"{path} not found at {repo['commit']} in {repo['git_dir']}")
                continue
            for variant in ("peer", "herl"):
                out = work / variant / key / path
                out.parent.mkdir(parents=True, exist_ok=True)
                if variant == "herl" and path.endswith(".py"):
                    text_out, changes = rewrite_imports(text, exported, keep)
                    if changes:
                        rewrites[f"{key}/{path}"] = changes
                else:
                    text_out = text
                out.write_text(text_out)
    with open(work / "rewrites.txt", "w") as f:
        for path, changes in rewrites.items():
            for c in changes:
                f.write(f"{path}:{c['line']}\n  - {c['old']}\n  + {c['new']}\n")
    return rewrites


def run_pytest(work: Path, variant: str, index: int, repo: str, path: str, kexpr: str | None, args) -> dict:
    """One pytest subprocess; returns {selected, outcomes, collect_errors, rc, seconds, log}."""
    root = work / variant / repo
    tag = f"{variant}-{index:02d}"
    log, out = work / "logs" / f"{tag}.jsonl", work / "logs" / f"{tag}.txt"
    log.unlink(missing_ok=True)
    cmd = [args.python, "-m", "pytest", path, "-q", "-rN", "-p", "no:cacheprovider", "-p", PLUGIN,
           "--basetemp", str(work / "basetemp" / tag)]
    if kexpr:
        cmd += ["-k", kexpr]
    if REPO_MARKERS[repo]:
        cmd += ["-m", REPO_MARKERS[repo]]
    python_path = os.pathsep.join(filter(None, [str(work / "plugin"), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=python_path, PYTHONHASHSEED="0", OMP_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads), MPLBACKEND="Agg",
               **{LOG_ENV: str(log), TIMEOUT_ENV: str(args.test_timeout)})
    start = time.time()
    with open(out, "w") as f:
        f.write(" ".join(cmd) + "\n\n")
        f.flush()
        try:
            rc = subprocess.run(cmd, cwd=root, env=env, stdout=f, stderr=subprocess.STDOUT,
                                timeout=args.file_timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "file-timeout"
    selected, reports, collect_errors = [], defaultdict(dict), []
    if log.exists():
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if record["event"] == "selected":
                selected = record["ids"]
            elif record["event"] == "collect_error":
                collect_errors.append(record)
            else:
                reports[record["id"]][record["when"]] = record
    outcomes = {test_id: combine(reports.get(test_id, {})) for test_id in selected}
    return {"selected": selected, "outcomes": outcomes, "collect_errors": collect_errors, "rc": rc,
            "seconds": round(time.time() - start, 1), "log": str(out)}


def combine(phases: dict) -> dict:
    """setup/call/teardown reports -> one outcome (passed, failed, error, skipped, xfailed, xpassed, not run)."""
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    if setup is None:
        return {"outcome": "not run", "message": "no report (killed by --file-timeout?)"}
    if setup["outcome"] == "failed":
        return {"outcome": "error", "message": "setup: " + setup["message"], **_location(setup)}
    if setup["outcome"] == "skipped":
        return {"outcome": "xfailed" if setup["xfail"] else "skipped", "message": setup["message"]}
    if call is None:
        return {"outcome": "not run", "message": "no call report (killed mid-test?)"}
    outcome, message, location = call["outcome"], call["message"], _location(call)
    if call["xfail"]:
        outcome = "xfailed" if outcome == "skipped" else "xpassed"
    if teardown is not None and teardown["outcome"] == "failed" and outcome == "passed":
        outcome, message, location = "error", "teardown: " + teardown["message"], _location(teardown)
    return {"outcome": outcome, "message": message, **location, "seconds": call["duration"]}


def _location(record: dict) -> dict:
    return {k: record[k] for k in ("where", "test_line") if k in record}


def counts(outcomes: dict, ids: list[str]) -> dict:
    c = Counter(outcomes.get(i, {}).get("outcome", "not collected") for i in ids)
    return {"passed": c["passed"], "total": len(ids), **{k: v for k, v in sorted(c.items()) if k != "passed"}}


def fmt(c: dict | None) -> str:
    if c is None:
        return "-"
    extra = ", ".join(f"{v} {k}" for k, v in sorted(c.items()) if k not in ("passed", "total", "seconds", "log") and v)
    return f"{c['passed']}/{c['total']}" + (f" ({extra})" if extra else "")


def failure_key(result: dict) -> str:
    """herl failures are grouped by first line; a bare ``assert ...`` line also by the test line that failed."""
    message = re.sub(r"0x[0-9a-f]+", "0x..", result["message"])
    message = re.sub(r"/\S+/", ".../", message)[:160]
    if message.startswith("assert") and "test_line" in result:
        message += "  <-  " + result["test_line"].split(": ", 1)[-1][:120]
    return message


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group_names = list(dict.fromkeys(g[0] for g in GROUPS))
    add = parser.add_argument
    add("--sb3-git", required=True, help="git directory of DLR-RM/stable-baselines3")
    add("--contrib-git", required=True, help="git directory of Stable-Baselines-Team/stable-baselines3-contrib")
    add("--ref", default="HEAD", help="tag or commit of the test files (default HEAD)")
    add("--contrib-ref", help="sb3-contrib's ref, when not --ref")
    add("--out", required=True, help="JSON summary to write")
    add("--work", help="work folder (default: a new temporary folder, kept and printed)")
    add("--groups", help="comma-separated subset of: " + ", ".join(group_names))
    add("--variants", default="peer,herl", help="peer,herl (default both)")
    add("--keep-sb3", action="append", default=[], metavar="NAME", help="keep NAME on the peer's import")
    add("--python", default=sys.executable, help="Python that runs pytest (default: this one)")
    add("--jobs", type=int, default=1, help="pytest subprocesses at once (default 1)")
    add("--threads", type=int, default=1, help="torch/OpenMP threads per subprocess (default 1)")
    add("--test-timeout", type=int, default=300, help="seconds one test may run (default 300)")
    add("--file-timeout", type=int, default=3600, help="seconds one pytest run may take (default 3600)")
    add("--prepare-only", action="store_true", help="write the copies and rewrites.txt, run nothing")
    args = parser.parse_args()
    args.groups = args.groups.split(",") if args.groups else group_names
    if set(args.groups) - set(group_names):
        parser.error(f"unknown groups: {sorted(set(args.groups) - set(group_names))}")
    args.variants = args.variants.split(",")
    if set(args.variants) - {"peer", "herl"}:
        parser.error("--variants takes peer, herl or both")
    return args


def resolve(git_dir: str, ref: str) -> dict:
    commit = git(git_dir, "rev-parse", f"{ref}^{{commit}}").strip()
    return {"git_dir": os.path.abspath(git_dir), "ref": ref, "commit": commit,
            "date": git(git_dir, "log", "-1", "--format=%ci", commit).strip()}


def herl_tree(herl_file: str) -> dict:
    """The commit of the herl checkout under test and its uncommitted paths (src/ changes while others work)."""
    package = str(Path(herl_file).parent)
    state = {"file": herl_file}
    try:
        state["commit"] = git_in(package, "rev-parse", "HEAD").strip()
        state["uncommitted"] = git_in(package, "status", "--porcelain", "--", ".").splitlines()
    except (subprocess.CalledProcessError, FileNotFoundError):
        pass
    return state


def git_in(folder: str, *args: str) -> str:
    return subprocess.run(["git", "-C", folder, *args], check=True, capture_output=True, text=True).stdout


def summarize(results: dict, args, summary: dict) -> None:
    """Fill summary["groups"], ["tests"] and ["herl_failures_by_message"], printing the table as it goes."""
    failures = defaultdict(list)
    reference = "peer" if "peer" in args.variants else args.variants[0]
    print(f"\n{'group':20} {'file':33} {'herl':28} {'peer':28} -k")
    for group in args.groups:
        totals = {v: Counter() for v in args.variants}
        files = []
        for i, (g, repo, path, kexpr) in enumerate(GROUPS):
            if g != group:
                continue
            ids = results[(reference, i)]["selected"]
            row = {"repo": repo, "path": path, "k": kexpr}
            for v in args.variants:
                res = results[(v, i)]
                outcomes = dict(res["outcomes"])
                why = res["collect_errors"][0]["message"] if res["collect_errors"] else f"pytest rc {res['rc']}"
                for t in ids:
                    outcomes.setdefault(t, {"outcome": "error", "message": f"not collected: {why}"})
                    entry = summary["tests"].setdefault(f"{repo}/{t}", {"group": group})
                    entry[v] = outcomes[t]
                    if v == "herl" and outcomes[t]["outcome"] in ("failed", "error", "not run"):
                        failures[failure_key(outcomes[t])].append(f"{repo}/{t}")
                row[v] = counts(outcomes, ids)
                totals[v].update(row[v])
                row[v] = {**row[v], "seconds": res["seconds"], "log": res["log"]}
            files.append(row)
            print(f"{group:20} {repo + '/' + Path(path).name:33} {fmt(row.get('herl')):28} {fmt(row.get('peer')):28}"
                  f" {kexpr or ''}")
        summary["groups"][group] = {"files": files, **{v: dict(totals[v]) for v in args.variants}}
        print(f"{'':20} {'= ' + group:33} {fmt(dict(totals.get('herl', {})) or None):28}"
              f" {fmt(dict(totals.get('peer', {})) or None):28}")
    summary["herl_failures_by_message"] = dict(sorted(failures.items(), key=lambda kv: -len(kv[1])))


def main() -> None:
    args = parse_args()
    repos = {"sb3": resolve(args.sb3_git, args.ref), "contrib": resolve(args.contrib_git, args.contrib_ref or args.ref)}
    work = Path(args.work or tempfile.mkdtemp(prefix="peer_tests_")).resolve()
    for sub in ("peer", "herl", "plugin", "logs", "basetemp"):
        shutil.rmtree(work / sub, ignore_errors=True)
        (work / sub).mkdir(parents=True)
    shutil.copy(__file__, work / "plugin" / f"{PLUGIN}.py")

    exported = herl_names(args.python)
    herl_state = herl_tree(exported["herl_file"])
    rewrites = prepare(work, repos, exported, set(args.keep_sb3))
    print(f"work folder: {work}")
    for key, repo in repos.items():
        print(f"{key}: {repo['git_dir']} {repo['ref']} = {repo['commit'][:12]} ({repo['date']})")
    print(f"versions: {exported['versions']}; herl at {herl_state.get('commit', '?')[:12]}"
          f" with {len(herl_state.get('uncommitted', []))} uncommitted paths under its package")
    print(f"import rewrites: {sum(len(c) for c in rewrites.values())} statements in {len(rewrites)} files,"
          f" listed in {work / 'rewrites.txt'}")
    if args.prepare_only:
        return

    started = dt.datetime.now().astimezone()
    jobs = [(v, i) for v in args.variants for i, g in enumerate(GROUPS) if g[0] in args.groups]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        outputs = pool.map(lambda job: run_pytest(work, job[0], job[1], *GROUPS[job[1]][1:], args), jobs)
        results = dict(zip(jobs, outputs))
    summary = {"started": started.isoformat(timespec="seconds"),
               "finished": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
               "command": " ".join([sys.executable, *sys.argv]), "repos": repos, "versions": exported["versions"],
               "herl": herl_state, "work": str(work), "rewrites": rewrites, "groups": {}, "tests": {}}
    summarize(results, args, summary)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    if summary["herl_failures_by_message"]:
        print("\nherl failures by first line:")
        for message, ids in summary["herl_failures_by_message"].items():
            where = summary["tests"][ids[0]]["herl"].get("where", "")
            print(f"{len(ids):4}  {message}\n      e.g. {ids[0]}  ({where})")
    print(f"\nwritten: {args.out} (started {summary['started']}, finished {summary['finished']})")


if __name__ == "__main__":
    main()
