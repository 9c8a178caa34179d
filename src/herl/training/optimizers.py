"""The optimizer a model trains with: herl's Adam (one fused kernel per step where the device has it), or the class
SB3's ``policy_kwargs=dict(optimizer_class=..., optimizer_kwargs=...)`` names.

A model file names the class and never imports it: a ``torch.optim`` class by its name (``"AdamW"``), any other as
``module:qualname``, found at load among the modules already imported (as features extractors are; see
:mod:`herl.nn.extractors`). Its keyword arguments are JSON values saved beside it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from herl.errors import ClassNotLoadedError
from herl.utils import loaded_class

SEEN_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {}
"""Classes of the user's given to a model in this process, by the name files give them."""

FUSED = (torch.optim.Adam, torch.optim.AdamW)
"""Classes herl asks for their fused kernel when the user's keyword arguments leave it open."""


def optimizer_name(cls: type) -> str:
    """How a model file names an optimizer class: its name for a ``torch.optim`` class, else ``module:qualname``."""
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise TypeError(f"policy_kwargs optimizer_class must be a torch.optim.Optimizer subclass (e.g. "
                        f"torch.optim.AdamW), got {cls!r}")
    if getattr(torch.optim, cls.__name__, None) is cls:
        return cls.__name__
    name = f"{cls.__module__}:{cls.__qualname__}"
    SEEN_OPTIMIZERS[name] = cls
    return name


def optimizer_class(name: str) -> type[torch.optim.Optimizer]:
    """The class a model file names (see :func:`optimizer_name`), never imported here: reading a file runs no code."""
    if ":" not in name:
        found = getattr(torch.optim, name, None)
        if isinstance(found, type) and issubclass(found, torch.optim.Optimizer):
            return found
        known = sorted(n for n, c in vars(torch.optim).items()
                       if isinstance(c, type) and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer)
        raise LookupError(f"torch.optim has no optimizer {name!r}: use one of {known}, or a class of your own")
    if name in SEEN_OPTIMIZERS:
        return SEEN_OPTIMIZERS[name]
    found = loaded_class(name, torch.optim.Optimizer)
    if found is None:
        raise ClassNotLoadedError(
            f"the optimizer class {name!r} is not loaded: import its module ({name.partition(':')[0]}) before loading "
            "the model, "
            "or pass policy_kwargs=dict(optimizer_class=TheClass) to load (model files hold no code, so herl does not "
            "import it for you)")
    return found


def build_optimizer(name: str | None, kwargs: Mapping[str, Any], params: Any, lr: float,
                    betas: tuple[float, float]) -> torch.optim.Optimizer:
    """The optimizer over ``params`` (parameters or param groups) at step size ``lr``: herl's Adam with ``betas``
    (the algorithm's) when ``name`` is None, else the named class with the user's ``kwargs``; an Adam-like class
    (one that takes ``betas``) gets the algorithm's betas unless ``kwargs`` give them."""
    params = list(params)
    cls = torch.optim.Adam if name is None else optimizer_class(name)
    options = dict(kwargs)
    if "betas" in inspect.signature(cls).parameters:
        options.setdefault("betas", betas)
    if cls in FUSED and "fused" not in options and "foreach" not in options:
        try:
            return cls(_fresh_groups(params), lr=lr, fused=True, **options)
        except RuntimeError:  # a device without the fused kernel (or torch < 2.4 on CPU)
            pass
    return cls(_fresh_groups(params), lr=lr, **options)


def _fresh_groups(params: list[Any]) -> list[Any]:
    """``params`` with each parameter group (a dict) copied: an optimizer writes its defaults into the groups it is
    given, so a try that failed would leave ``fused=True`` in them for the next."""
    return [dict(group) if isinstance(group, Mapping) else group for group in params]
