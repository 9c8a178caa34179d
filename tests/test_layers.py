"""herl's layers point down: a module imports only modules of its own layer or of the layers below it.

Every module under ``src/herl`` is parsed with ``ast`` and all its imports are read, those at module level and those
inside functions alike (a lazy import is still a dependency). The layers, lowest first, as the code has them:

 1. ``errors``                      messages and their rules
 2. ``utils``                       devices, denormals
 3. ``io``                          the file format: zip archives of JSON and safetensors, model files. A model
                                    file names its classes; the layer that loads it resolves the names
                                    (``herl.training.base.model_classes``), so io imports no class above it.
 4. ``envs``                        goal envs and their wrappers
 5. ``nn``                          networks, normalizer, acting
 6. ``export``                      ONNX and TorchScript out of a model's networks
 7. ``demos``                       datasets of demonstrations, scripted experts
 8. ``buffers``                     storage and the HER engine
 9. ``training``                    the off-policy loop, its base class, callbacks, logging; with it
                                    ``algorithms.bc`` (the demonstrations' BC loss and its checks, which
                                    ``training.base`` imports)
10. ``algorithms``                  DQN, DDPG, TD3, SAC, TQC, CrossQ: networks' use, losses, update
11. ``compat``                      the peers' HER interfaces (SB2, cpprb, rllte)
12. ``herl`` (the package's own ``__init__``: the public names), ``her`` (SB2's namespace), ``demo`` (``make demo``)
13. ``run``                         what the ``herl`` command does: run folders, presets, checkpoints, eval, plots
14. ``distributed``                 Ray: workers and sweeps. Only the command line imports it (a run with workers gets
                                    its learner handed down), so a plain run never imports Ray.
15. ``cli``, ``__main__``           the command line

``from herl import __version__`` is allowed anywhere: the version is set on the first line of ``herl/__init__.py``,
before it imports anything. Inside ``herl.run``, no module may import itself back through others (no circle):
``train``, ``evaluate``, ``plot`` and ``demos`` read run folders through ``run.folders``, below them all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
LAYERS: list[tuple[str, ...]] = [
    ("errors",), ("utils",), ("io",), ("envs",), ("nn",), ("export",), ("demos",), ("buffers",),
    ("training", "algorithms.bc"), ("algorithms",), ("compat",), ("", "her", "demo"), ("batched",), ("run",), ("distributed",),
    ("cli", "__main__"),
]
"""Units of each layer, lowest first: a package or module under ``herl`` ("" for ``herl/__init__.py`` itself), or a
module placed apart from its package."""
NO_CIRCLES = ("run",)
"""Packages whose modules import one another without a circle."""


def modules() -> dict[str, Path]:
    """Every module under src/herl by its dotted name (a package by its own name)."""
    found = {}
    for path in sorted((SRC / "herl").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = modules()


def imports(name: str) -> list[tuple[str, int]]:
    """``(imported module, line)`` for every import of herl in module ``name``; ``from pkg import sub`` counts as
    an import of ``pkg.sub`` when that is a module."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if source == "herl" and alias.name == "__version__":
                    found.append(("herl.__version__", node.lineno))
                else:
                    found.append((sub if sub in MODULES else source, node.lineno))
    return sorted({(target, line) for target, line in found if target == "herl" or target.startswith("herl.")})


def layer(name: str) -> int:
    """The layer of module ``name`` (its most specific unit wins: ``algorithms.bc`` over ``algorithms``)."""
    if name == "herl.__version__":
        return -1
    rest = name.removeprefix("herl").removeprefix(".")
    best, depth = None, -1
    for index, units in enumerate(LAYERS):
        for unit in units:
            matches = rest == unit or (unit and rest.startswith(unit + ".")) or (unit == "" and rest == "")
            if matches and len(unit) > depth:
                best, depth = index, len(unit)
    if best is None:
        raise AssertionError(f"herl.{rest} belongs to no layer: add its package to LAYERS in {__file__}")
    return best


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        layer(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_a_layer_above_its_own(name: str) -> None:
    def named(index: int) -> str:
        return f"layer {index + 1}, {', '.join(unit or 'herl' for unit in LAYERS[index])}"

    own = layer(name)
    above = [f"line {line}: {target} ({named(layer(target))})" for target, line in imports(name) if layer(target) > own]
    assert not above, (f"{name} ({named(own)}) imports from above it:\n  " + "\n  ".join(above)
                       + "\nmove what it needs down, or have the upper layer pass it in")


def test_only_the_command_line_imports_distributed() -> None:
    importers = sorted({name for name in MODULES if not name.startswith("herl.distributed")
                        for target, _ in imports(name) if target.startswith("herl.distributed")})
    assert importers == ["herl.cli"]


def circles(graph: dict[str, list[str]]) -> list[str]:
    """The circles a depth-first walk of ``graph`` (module -> modules it imports) closes, as "a -> b -> a"."""
    found: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for target in graph.get(name, []):
            if state.get(target) == "open":
                found.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[name] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])
    return found


@pytest.mark.parametrize("package", NO_CIRCLES)
def test_no_circle_among_the_modules_of(package: str) -> None:
    prefix = f"herl.{package}."
    graph = {name: sorted({target for target, _ in imports(name) if target.startswith(prefix) and target != name})
             for name in MODULES if name.startswith(prefix)}
    found = circles(graph)
    assert not found, f"circles among herl.{package}'s modules:\n  " + "\n  ".join(found)


def test_the_checks_see_lazy_imports_and_circles() -> None:
    """The parser reads imports inside functions, the layers order what the docstring says, and the walk finds the
    circles it must refuse (the ones run/ had: train -> demos -> evaluate -> train, train <-> plot)."""
    assert "herl.training.base" in {target for target, _ in imports("herl.run.checkpoint")}  # inside load_checkpoint
    assert layer("herl.io.model") < layer("herl.training.base") < layer("herl.algorithms.sac")
    assert layer("herl.algorithms.bc") == layer("herl.training.loop")
    assert layer("herl.__version__") < layer("herl.io.archive")
    old_run = {"train": ["demos", "plot"], "demos": ["evaluate"], "evaluate": ["train"], "plot": ["train"]}
    assert sorted(circles(old_run)) == ["train -> demos -> evaluate -> train", "train -> plot -> train"]
    now = {"train": ["folders", "demos"], "demos": ["evaluate"], "evaluate": ["folders"], "plot": ["folders"]}
    assert circles(now) == []
