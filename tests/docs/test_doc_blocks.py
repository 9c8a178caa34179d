"""Every command block of README.md and docs/*.md runs, with short settings, so a documented path cannot break
unnoticed.

The docs' text is the source of truth: the blocks are parsed from the files when the tests are collected, one test
per block, with the id ``FILE:LINE`` (the line of the opening fence). Nothing here edits the docs; the short
settings are rewrites of each block's own text, by the rules below.

Which blocks run
    * A fenced block (```` ``` ```` or ``~~~``) runs when its language is ``python`` (``py``, ``python3``) or a shell
      (``bash``, ``sh``, ``shell``, ``console``). Every other language never runs: ``text``, ``diff``, ``toml``,
      ``json`` and unlabeled blocks are outputs, synopses, folder trees, diffs and tables.
    * ``<!-- not run: WHY -->`` on the nearest non-blank line above a block's fence: the block is a fragment (a
      signature, a line that needs objects from the prose). It is reported as skipped, with WHY.
    * ``<!-- file: NAME.py -->`` above a python block: the prose asks the reader to save the block as ``NAME.py``.
      It is written there (in the doc's folder, below) and run; later blocks of the doc can import it.
    * A block that names a MuJoCo env (``Fetch...-vN``, ``gymnasium_robotics``), a Panda env, or Ray (``herl
      sweep``, ``--workers``) is marked ``slow``: ``-m "not slow"`` leaves them out. A block is skipped when it
      needs an optional package that is not installed (:data:`OPTIONAL_MODULES`: rllte, Stable-Baselines 2,
      panda-gym, ...).

Where they run
    The blocks of one doc run in document order, one after another, in one temporary folder per doc, as a reader
    who runs them in turn would: ``herl eval runs/bits`` finds the run the line above trained, and a block can
    load the file an earlier block saved. (Run alone with ``-k``, a block that needs an earlier one's output fails;
    ``file:`` blocks are always written first.) The folder holds ``examples`` (a link to the checkout's, for
    ``python examples/...`` and ``PYTHONPATH=examples``) and an empty ``docs/images`` (plots written with
    ``-o docs/images/...`` never touch the committed ones). Subprocesses get ``MPLBACKEND=Agg`` and one OpenMP
    thread (``OMP_NUM_THREADS=1``, as the suite's learning tests).

Python blocks
    Each runs as a script (``python _doc_block_LINE.py`` in the doc's folder, so the folder is on ``sys.path``) and
    must exit 0. Short settings, by regular expression on the block's text: ``learn(N)`` and
    ``total_timesteps=N`` become 200, ``n_episodes=N`` and ``n_eval_episodes=N`` become 2, ``n_epochs=N`` becomes 1.
    When the paragraph just above the block says ``PYTHONPATH=DIR`` (guide.md: "run with ``PYTHONPATH=examples``"),
    the block runs with it.

Shell blocks
    Lines ending in ``\\`` are joined; ``# comments`` dropped; in a ``console`` block only ``$ `` lines are commands.
    A line's leading ``NAME=VALUE`` words are its environment, and a leading ``time`` or ``/usr/bin/time -v`` is
    dropped. Then:

    * ``herl ...`` (or ``python -m herl ...``) and ``python examples/NAME.py ...`` lines run, rewritten to short
      settings (:func:`shorten_herl`, :func:`shorten_example`), and must exit 0. The block stops at its first
      failing line.
    * ``pip``, ``make``, ``git``, ``tensorboard`` and ``cd`` lines are set-up or viewers: skipped.
    * Any other line (``python benchmarks/...``: benchmark scripts with no common short setting; ``mkdir``,
      ``ln``, ``cp``; a line joined with ``;``, ``&&``, ``|`` or a redirection) is skipped.
    * A line with a placeholder word (``...``, or one capital letter as an option's value: ``--seed S``) is a
      template, and the whole block is skipped: its later lines need what the template would have made. A ``<name>``
      inside a path (``runs/FetchReach-v4_sac_<time>``) is resolved, when the line runs, to the one path that
      matches it with ``<name>`` read as ``*`` (what an earlier line created); none or several fail the test.
    * A line naming a Panda env is skipped when panda-gym is not installed.

    Short settings of ``herl``: ``train`` gets ``--timesteps 200`` (400 with ``--resume``: a new, longer total),
    keeps only the first of several ``--seed`` values, records 2 episodes for ``--demos scripted[:N]``, and gets
    ``--set eval.episodes=2`` (not with ``--resume``, whose settings are the run's); ``sweep`` gets
    ``--timesteps 200``, ``--seeds 2``, ``--trials 2`` and ``--set eval.episodes=2``; ``eval`` and ``record`` get
    ``--episodes 2`` (``--video-episodes 1``). ``python examples/NAME.py`` gets ``--steps 200`` (each example has
    it).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

PYTHON_LANGS = {"python", "py", "python3"}
SHELL_LANGS = {"bash", "sh", "shell", "console"}
SETUP_COMMANDS = {"pip", "pip3", "make", "git", "tensorboard", "cd"}
SHELL_OPERATORS = {";", "&&", "||", "|", ">", ">>", "<", "&"}
# herl's optional extras and the peers the docs compare with; a block that imports a missing one is skipped
OPTIONAL_MODULES = {"rllte", "stable_baselines", "panda_gym", "ray", "optuna", "gymnasium_robotics", "mujoco",
                    "minari", "onnx", "onnxruntime", "matplotlib", "tensorboard", "imageio", "cpprb",
                    "stable_baselines3", "sb3_contrib"}

SHORT_STEPS = 200
SHORT_EPISODES = 2
TIMEOUT_S = 300
SLOW_TIMEOUT_S = 900

MARKER = re.compile(r"^\s*<!--\s*(not run|file)\s*:\s*(.*?)\s*-->\s*$")
OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
SLOW = re.compile(r"\b(Fetch\w*|Panda\w*)-v\d|gymnasium_robotics|\bherl sweep\b|--workers\b|\bimport ray\b")
PANDA = re.compile(r"\bPanda\w*-v\d")
ANGLE = re.compile(r"<[^<>/\s]+>")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTHONPATH_IN_PROSE = re.compile(r"PYTHONPATH=([^\s`'\")]+)")
PYTHON_SHORTENINGS = [  # (pattern, replacement) on a python block's text
    (re.compile(r"(\.learn\(\s*(?:total_timesteps\s*=\s*)?)[\d_]+(?:\.\d*)?(?:[eE]\+?\d+)?"), rf"\g<1>{SHORT_STEPS}"),
    (re.compile(r"(\btotal_timesteps\s*=\s*)[\d_]+(?:\.\d*)?(?:[eE]\+?\d+)?"), rf"\g<1>{SHORT_STEPS}"),
    (re.compile(r"(\bn_(?:eval_)?episodes\s*=\s*)[\d_]+"), rf"\g<1>{SHORT_EPISODES}"),
    (re.compile(r"(\bn_epochs\s*=\s*)[\d_]+"), r"\g<1>1"),
]
IMPORT = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    marker: tuple[str, str] | None  # ("not run", why) or ("file", name)
    prose: str  # the paragraph just above the block

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def parse_blocks(doc: Path) -> list[Block]:
    """The fenced blocks of a markdown file, with the marker comment and paragraph just above each."""
    lines = doc.read_text(encoding="utf-8").split("\n")
    blocks, i = [], 0
    while i < len(lines):
        opening = OPENING.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        end = i + 1
        while end < len(lines) and not re.fullmatch(rf"\s*{re.escape(fence[0])}{{{len(fence)},}}\s*", lines[end]):
            end += 1
        body = "\n".join(line[indent:] if not line[:indent].strip() else line.lstrip() for line in lines[i + 1:end])
        above = i - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        found = MARKER.match(lines[above]) if above >= 0 else None
        start = above
        while start >= 0 and lines[start].strip():
            start -= 1
        prose = "\n".join(lines[start + 1:above + 1])
        blocks.append(Block(doc, i + 1, opening["lang"].lower(), body + "\n",
                            (found[1], found[2]) if found else None, prose))
        i = end + 1
    return blocks


# ---------------------------------------------------------------------------------------------------- shell lines


@dataclass
class Command:
    line: int  # 1-based line in the doc
    text: str  # as the doc has it (continuations joined)
    env: dict[str, str]
    argv: list[str]  # as it runs, short settings applied; empty when skipped
    skip: str | None = None  # why it is not run
    template: bool = False


def shell_commands(block: Block) -> list[Command]:
    """The block's command lines, each either to run (argv) or skipped (skip says why)."""
    commands, pending, first = [], "", 0
    for offset, raw in enumerate(block.text.split("\n")):
        if block.lang == "console" and not pending:
            if not raw.startswith("$ "):
                continue
            raw = raw[2:]
        if not pending:
            first = block.line + 1 + offset
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        text, pending = (pending + raw).strip(), ""
        if text and not text.startswith("#"):
            commands.append(classify(first, text))
    return commands


def classify(line: int, text: str) -> Command:
    try:
        words = shlex.split(text, comments=True)
    except ValueError as error:
        return Command(line, text, {}, [], skip=f"not shell syntax ({error})")
    env = {}
    while words and ENV_ASSIGNMENT.match(words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if words and words[0] in ("time", "/usr/bin/time"):
        words.pop(0)
        while words and words[0].startswith("-"):
            words.pop(0)
    command = Command(line, text, env, [])
    if not words:
        command.skip = "no command"
    elif words[0] in SETUP_COMMANDS:
        command.skip = f"set-up or viewer command ({words[0]})"
    elif any(word in SHELL_OPERATORS or word.endswith(";") for word in words) or any(
            value.endswith(";") for value in env.values()):
        command.skip = "compound shell line"
    elif any(is_placeholder(words, i) for i in range(len(words))):
        command.skip, command.template = "template line (a placeholder word)", True
    elif PANDA.search(text) and importlib.util.find_spec("panda_gym") is None:
        command.skip = "needs panda-gym, not installed"
    elif words[0] == "herl":
        command.argv = ["herl", *shorten_herl(words[1:])]
    elif words[0] in ("python", "python3") and words[1:3] == ["-m", "herl"]:
        command.argv = ["herl", *shorten_herl(words[3:])]
    elif words[0] in ("python", "python3") and len(words) > 1 and words[1].startswith("examples/"):
        command.argv = ["python", *shorten_example(words[1:])]
    else:
        command.skip = f"not a herl or examples command ({words[0]})"
    return command


def is_placeholder(words: list[str], i: int) -> bool:
    """``...`` anywhere, or one capital letter as an option's value (``--seed S``; not a ``--label``'s text)."""
    if words[i] == "...":
        return True
    return bool(re.fullmatch(r"[A-Z]", words[i])) and i > 0 and words[i - 1].startswith("--") and words[i - 1] not in (
        "--label", "--title", "--reference")


def option(words: list[str], flag: str, value: str | None, *, insert: bool = True) -> list[str]:
    """words with ``flag``'s value (``flag V`` or ``flag=V``) replaced by value, or appended when absent."""
    out, found, i = [], False, 0
    while i < len(words):
        if words[i] == flag:
            found = True
            out += [flag, value]
            i += 2
            continue
        if words[i].startswith(flag + "="):
            found = True
            out.append(f"{flag}={value}")
        else:
            out.append(words[i])
        i += 1
    return out + [flag, value] if not found and insert else out


def setting(words: list[str], key: str, value: str) -> list[str]:
    """words with ``--set key=...`` replaced, or appended when absent."""
    out, found = list(words), False
    for i in range(len(out) - 1):
        if out[i] == "--set" and out[i + 1].startswith(key + "="):
            out[i + 1], found = f"{key}={value}", True
    return out if found else out + ["--set", f"{key}={value}"]


def first_seed_only(words: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(words):
        out.append(words[i])
        if words[i] == "--seed" and i + 1 < len(words):
            out.append(words[i + 1])
            i += 2
            while i < len(words) and not words[i].startswith("-"):
                i += 1
            continue
        i += 1
    return out


def shorten_herl(words: list[str]) -> list[str]:
    """A herl command's arguments with short settings (the module docstring lists them)."""
    if not words:
        return words
    sub, rest = words[0], words[1:]
    if sub == "train":
        resume = "--resume" in rest
        rest = option(rest, "--timesteps", str(2 * SHORT_STEPS if resume else SHORT_STEPS))
        rest = first_seed_only(rest)
        if "--demos" in rest:
            at = rest.index("--demos") + 1
            if at < len(rest) and rest[at].split(":")[0] == "scripted":
                rest[at] = f"scripted:{SHORT_EPISODES}"
        if not resume:
            rest = setting(rest, "eval.episodes", str(SHORT_EPISODES))
    elif sub == "sweep":
        rest = option(rest, "--timesteps", str(SHORT_STEPS), insert="--resume" not in rest)
        rest = option(rest, "--seeds", "2", insert=False)
        rest = option(rest, "--trials", "2", insert=False)
        if "--resume" not in rest:
            rest = setting(rest, "eval.episodes", str(SHORT_EPISODES))
    elif sub in ("eval", "record"):
        rest = option(rest, "--episodes", str(SHORT_EPISODES))
        rest = option(rest, "--video-episodes", "1", insert=False)
    return [sub, *rest]


def shorten_example(words: list[str]) -> list[str]:
    """``examples/NAME.py ARGS`` with ``--steps 200`` (replaced, or added when the script has the option)."""
    script = REPO / words[0]
    has_steps = script.exists() and '"--steps"' in script.read_text(encoding="utf-8")
    return [words[0], *option(words[1:], "--steps", str(SHORT_STEPS), insert=has_steps)]


def resolve_placeholders(argv: list[str], cwd: Path) -> list[str]:
    """``runs/X_<time>`` → the one path that exists matching ``runs/X_*`` (an earlier line made it)."""
    out = []
    for word in argv:
        if ANGLE.search(word) and " " not in word:  # a path, not a label's text
            pattern = ANGLE.sub("*", word)
            matches = sorted(glob.glob(pattern, root_dir=cwd))
            if len(matches) != 1:
                pytest.fail(f"placeholder {word!r}: {len(matches)} paths match {pattern!r} in {cwd}: {matches}")
            word = matches[0]
        out.append(word)
    return out


# ---------------------------------------------------------------------------------------------------- cases


def shorten_python(text: str) -> str:
    for pattern, replacement in PYTHON_SHORTENINGS:
        text = pattern.sub(replacement, text)
    return text


def missing_optional(text: str) -> list[str]:
    return sorted({name for name in IMPORT.findall(text)
                   if name in OPTIONAL_MODULES and importlib.util.find_spec(name) is None})


def case(block: Block):
    marks = [pytest.mark.slow] if SLOW.search(block.text) else []
    skip = None
    if block.marker and block.marker[0] == "not run":
        skip = f"not run: {block.marker[1]}"
    elif block.lang in PYTHON_LANGS and missing_optional(block.text):
        skip = f"needs {', '.join(missing_optional(block.text))}, not installed"
    elif block.lang in SHELL_LANGS:
        commands = shell_commands(block)
        templates = [c for c in commands if c.template]
        if templates:
            skip = f"template line {templates[0].line}: {templates[0].text[:60]}"
        elif not any(c.argv for c in commands):
            skip = "no line to run: " + "; ".join(f"{c.line}: {c.skip}" for c in commands)
    if skip:
        marks.append(pytest.mark.skip(reason=f"{block.id}: {skip}"))
    return pytest.param(block, id=block.id, marks=marks)


BLOCKS = [block for doc in DOC_FILES for block in parse_blocks(doc) if block.lang in PYTHON_LANGS | SHELL_LANGS]


@pytest.fixture(scope="session")
def doc_folder(tmp_path_factory):
    """One working folder per doc, shared by its blocks (they run in document order)."""
    folders: dict[Path, Path] = {}

    def folder(doc: Path) -> Path:
        if doc not in folders:
            path = tmp_path_factory.mktemp(re.sub(r"\W", "_", doc.stem))
            (path / "examples").symlink_to(REPO / "examples")
            (path / "docs" / "images").mkdir(parents=True)
            folders[doc] = path
        return folders[doc]

    return folder


def environment(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(MPLBACKEND="Agg", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: int, where: str) -> None:
    executable = {"herl": str(Path(sys.executable).parent / "herl"), "python": sys.executable}
    argv = [executable.get(argv[0], argv[0]), *argv[1:]]
    try:
        result = subprocess.run(argv, cwd=cwd, env=environment(env), capture_output=True, text=True,
                                timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where}: still running after {timeout} s: {shlex.join(argv)}")
    if result.returncode != 0:
        output = (result.stdout[-3000:] + "\n" + result.stderr[-3000:]).strip()
        pytest.fail(f"{where}: exit status {result.returncode}\n$ {shlex.join(argv)}\n{output}", pytrace=False)


def write_files(block: Block, cwd: Path) -> None:
    """The doc's ``file:`` blocks up to this one, where the prose asks the reader to save them."""
    for earlier in parse_blocks(block.doc):
        if earlier.line > block.line:
            break
        if earlier.marker and earlier.marker[0] == "file":
            (cwd / earlier.marker[1]).write_text(earlier.text, encoding="utf-8")


@pytest.mark.parametrize("block", [case(block) for block in BLOCKS])
def test_doc_block(block: Block, doc_folder):
    cwd = doc_folder(block.doc)
    timeout = SLOW_TIMEOUT_S if SLOW.search(block.text) else TIMEOUT_S
    write_files(block, cwd)
    if block.lang in PYTHON_LANGS:
        if block.marker and block.marker[0] == "file":
            script = cwd / block.marker[1]
        else:
            script = cwd / f"_doc_block_{block.line}.py"
            script.write_text(shorten_python(block.text), encoding="utf-8")
        prose_path = PYTHONPATH_IN_PROSE.search(block.prose)
        env = {"PYTHONPATH": prose_path[1]} if prose_path else {}
        run(["python", script.name], cwd, env, timeout, block.id)
        return
    for command in shell_commands(block):
        if command.argv:
            where = f"{block.doc.relative_to(REPO)}:{command.line}"
            run(resolve_placeholders(command.argv, cwd), cwd, command.env, timeout, where)


# ---------------------------------------------------------------------------------------------------- the rules


def test_short_settings_rewrite_the_documented_commands():
    train = classify(1, "PYTHONPATH=. herl train --env E1 --seed 0 1 2 --timesteps 3000 --demos scripted:50  # c")
    assert train.env == {"PYTHONPATH": "."}
    assert train.argv == ["herl", "train", "--env", "E1", "--seed", "0", "--timesteps", "200",
                          "--demos", "scripted:2", "--set", "eval.episodes=2"]
    resume = classify(1, "herl train --resume runs/a --timesteps 85000")
    assert resume.argv == ["herl", "train", "--resume", "runs/a", "--timesteps", "400"]
    assert classify(1, "herl eval runs/bits --episodes 50").argv == ["herl", "eval", "runs/bits", "--episodes", "2"]
    assert classify(1, "herl sweep --env E1 --seeds 4").argv == ["herl", "sweep", "--env", "E1", "--seeds", "2",
                                                                "--timesteps", "200", "--set", "eval.episodes=2"]
    assert classify(1, "python examples/custom_goal_env.py --seed 0").argv == [
        "python", "examples/custom_goal_env.py", "--seed", "0", "--steps", "200"]
    assert classify(1, "herl train --env E1 --seed S").template
    assert classify(1, "herl train ... --run-dir x").template
    assert classify(1, "mkdir -p a && ln -s b a/c").skip == "compound shell line"
    assert classify(1, "pip install herl").skip.startswith("set-up")
    assert classify(1, "python benchmarks/x.py").skip.startswith("not a herl")
    assert shorten_python("m.learn(5_000)\nm.learn(total_timesteps=1e6)\nf(n_eval_episodes=50, n_episodes=100)") == (
        "m.learn(200)\nm.learn(total_timesteps=200)\nf(n_eval_episodes=2, n_episodes=2)")


def test_markers_are_read_from_the_line_above(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("Text.\n\n<!-- not run: a fragment -->\n```python\nx\n```\n\nSave it, run with `PYTHONPATH=ex`:\n"
                   "<!-- file: mod.py -->\n\n```python\ny = 1\n```\n\n    ```bash\n    herl list\n    ```\n")
    fragment, saved, indented = parse_blocks(doc)
    assert (fragment.line, fragment.marker, fragment.text) == (4, ("not run", "a fragment"), "x\n")
    assert saved.marker == ("file", "mod.py") and PYTHONPATH_IN_PROSE.search(saved.prose)[1] == "ex"
    assert (indented.lang, indented.text, indented.marker) == ("bash", "herl list\n", None)
