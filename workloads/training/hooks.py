"""Resolve the ``module:function`` hooks through which users plug in their own dataset and model."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

# A dotted module path, a colon, a function name: checkable without importing anything.
HOOK_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
HOOK_RULE = "a hook as module:function, e.g. team.hooks:load_dataset"


class HookError(ValueError):
    """A hook spec that is malformed, cannot be imported, or returns the wrong kind of object."""


def check_spec(spec: str) -> str:
    """Reject a malformed spec at the edge (flag parsing) without importing user code."""
    if not HOOK_PATTERN.match(spec):
        raise HookError(f"{spec!r} is not of the form module:function")
    return spec


def resolve(spec: str) -> Callable[..., object]:
    """Import the function a spec names; import errors become one-line ``HookError``s."""
    module_name, _, attr = check_spec(spec).partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise HookError(f"cannot load {spec!r}: {exc}") from exc
    if not callable(target):
        raise HookError(f"{spec!r} is not callable")
    return target  # type: ignore[no-any-return]
