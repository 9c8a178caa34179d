"""herl's own error types, and the one place that checks a setting's value.

Every error herl raises on purpose is one of these (or a plain ``ValueError``/``TypeError`` with a message that
names the problem and the fix). The catalogue with causes and fixes is ``docs/errors.md``.

All of them derive from :class:`HerlError`; ``ConfigError``, ``NonFiniteError`` and ``ArchiveError`` also subclass
``ValueError``, so code written against Stable-Baselines3 (which raises ``ValueError``) keeps catching them.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


class HerlError(Exception):
    """Base of every error herl raises on purpose: code can catch ``herl.errors.HerlError`` to tell a refused input
    from a bug."""


class ConfigError(HerlError, ValueError):
    """A hyperparameter or setting with a value that is not allowed; the message names the field, the value and
    what is allowed. Raised the same way for the Python API, ``--set``, presets and model files."""

    def __init__(self, owner: str, name: str, value: Any, allowed: str) -> None:
        where = f"{owner} " if owner else ""
        super().__init__(f"{where}{name}={value!r} is not allowed: {name} must be {allowed}")
        self.owner, self.name, self.value, self.allowed = owner, name, value, allowed

    def __reduce__(self):  # so it crosses from a --jobs worker process intact
        return (type(self), (self.owner, self.name, self.value, self.allowed))


class EnvMismatchError(HerlError, ValueError, AssertionError):
    """An env that does not fit the model it is given to (its number of envs differs from the replay buffer's). Also an
    AssertionError, what Stable-Baselines3 raises there, so that code written for it catches this one."""


class NonFiniteError(HerlError, ValueError):
    """NaN or infinity where training needs finite numbers (an env's observation or reward, a reward function's
    output, a loss). Training stops at once: a single NaN spreads to every weight and normalizer statistic."""


class ClassNotLoadedError(HerlError, LookupError, ValueError):
    """A class of the user's named by a string or a model file (a features extractor, an optimizer) that this process
    has not imported: files hold no code, so herl finds such a class only among the modules already loaded."""


class ActionSpaceError(HerlError, ValueError, AssertionError):
    """An action space the algorithm cannot act in (a Box for DQN, a Discrete for SAC). Also an AssertionError, what
    Stable-Baselines3 raises there, so that code written for it catches this one."""


class ArchiveError(HerlError, ValueError):
    """A file that is not a readable herl archive of the expected kind (not a zip, a damaged member, missing or
    mistyped fields, sizes beyond the limits)."""


class CorruptFileError(ArchiveError):
    """A herl file whose contents contradict themselves (a damaged or hand-edited buffer or model)."""


# ---------------------------------------------------------------------------------------------------------------------
# Rules: what a field allows


@dataclass(frozen=True)
class Rule:
    """What one setting allows: a kind (``int``, ``float``, ``bool``, ``choice``) and, for numbers, a range.

    A rule's :meth:`describe` is the "allowed" part of the error message; :meth:`accepts` the test.
    """

    kind: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] = ()
    also: tuple[Any, ...] = ()
    """Values accepted besides the range (e.g. -1 for gradient_steps, None for "the default")."""
    note: str = ""

    def accepts(self, value: Any) -> bool:
        if any(value is v or (type(value) is type(v) and value == v) for v in self.also):
            return True
        if self.kind == "bool":
            return isinstance(value, (bool,)) or type(value).__name__ == "bool_"
        if self.kind == "choice":
            return isinstance(value, (str, int, float, bool, type(None))) and value in self.choices
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.kind == "int" and not isinstance(value, numbers.Integral):
            return False
        if not math.isfinite(float(value)):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def describe(self) -> str:
        if self.kind == "bool":
            text = "true or false"
        elif self.kind == "choice":
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        else:
            text = "an integer" if self.kind == "int" else "a finite number"
            bounds = []
            if self.low is not None:
                bounds.append(f"{'>' if self.low_open else '>='} {_fmt(self.low)}")
            if self.high is not None:
                bounds.append(f"{'<' if self.high_open else '<='} {_fmt(self.high)}")
            if bounds:
                text += " " + " and ".join(bounds)
        if self.also:
            text += " (or " + ", ".join(repr(v) for v in self.also) + ")"
        return text + (f" ({self.note})" if self.note else "")


def did_you_mean(unknown: Iterable[str], known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name of each unknown one that has one, or ``""``."""
    known = list(known)
    pairs = [(name, close[0]) for name in unknown if (close := difflib.get_close_matches(name, known, n=1))]
    if not pairs:
        return ""
    return " (did you mean " + ", ".join(repr(close) + ("" if len(pairs) == 1 else f" for {name!r}")
                                        for name, close in pairs) + "?)"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else str(x)


def integer(low: int | None = None, high: int | None = None, **kw: Any) -> Rule:
    return Rule("int", low=low, high=high, **kw)


def number(low: float | None = None, high: float | None = None, **kw: Any) -> Rule:
    return Rule("float", low=low, high=high, **kw)


BOOL = Rule("bool")
POSITIVE_INT = integer(1)
NON_NEGATIVE_INT = integer(0)
PROBABILITY = number(0.0, 1.0)


def one_of(*choices: Any, note: str = "") -> Rule:
    return Rule("choice", choices=tuple(choices), note=note)


def check(owner: str, name: str, value: Any, rule: Rule) -> None:
    """Raise :class:`ConfigError` unless ``rule`` accepts ``value``."""
    if not rule.accepts(value):
        raise ConfigError(owner, name, value, rule.describe())


def default_rule(default: Any) -> Rule | None:
    """The rule of a field that names none: its default's type (a float field takes a finite number, an int field an
    integer, a bool field a bool); None for other types, which their owner checks itself."""
    if isinstance(default, bool):
        return BOOL
    if isinstance(default, int):
        return integer()
    if isinstance(default, float):
        return number()
    return None


def check_fields(owner: str, obj: Any, rules: Mapping[str, Rule | None]) -> None:
    """Check every field of the dataclass ``obj`` against ``rules`` (or its default's type when it has no rule; a
    rule of None means the owner checks that field itself)."""
    import dataclasses

    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name in rules:
            rule = rules[f.name]
        else:
            rule = default_rule(f.default) if f.default is not dataclasses.MISSING else None
        if rule is not None:
            check(owner, f.name, value, rule)


def as_integer(owner: str, name: str, value: Any, rule: Rule = POSITIVE_INT) -> int:
    """``value`` as an int when it is a whole number (``2.0``, ``1e6`` or a NumPy integer); anything else (``2.5``,
    ``"3"``, ``True``) is a :class:`ConfigError` naming ``name``."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value)) \
            and float(value).is_integer():
        value = int(value)
    check(owner, name, value, Rule("int", low=rule.low, high=rule.high, low_open=rule.low_open,
                                  high_open=rule.high_open, also=rule.also, note=rule.note))
    return value
