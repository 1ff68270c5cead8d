"""Resolve the ``module:function`` hooks through which users plug in their own dataset and model."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable

# A dotted module path, a colon, a function name: checkable without importing anything.
HOOK_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
HOOK_RULE = "a hook as module:function, e.g. team.hooks:load_dataset"
# How the trainer calls each hook (tasks.load_split, model.build_model): checked in pre-flight, before
# torchrun starts workers, so a wrong signature is one line and exit 2, not a crash torchrun retries.
DATASET_HOOK_ARGS: tuple[str, ...] = ()
MODEL_HOOK_ARGS: tuple[str, ...] = ("n_features", "n_classes")


class HookError(ValueError):
    """A hook spec that is malformed, cannot be imported, or returns the wrong kind of object."""


def check_spec(spec: str) -> str:
    """Reject a malformed spec at the edge (flag parsing) without importing user code."""
    if not HOOK_PATTERN.match(spec):
        raise HookError(f"{spec!r} is not of the form module:function")
    return spec


def resolve(spec: str, arguments: tuple[str, ...]) -> Callable[..., object]:
    """Import the function a spec names, which the trainer will call with ``arguments`` (positionally);
    an import error or a signature that cannot take them is a one-line ``HookError``."""
    module_name, _, attr = check_spec(spec).partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise HookError(f"cannot load {spec!r}: {exc}") from exc
    if not callable(target):
        raise HookError(f"{spec!r} is not callable")
    _check_signature(spec, target, arguments)
    return target  # type: ignore[no-any-return]


def _check_signature(spec: str, target: Callable[..., object], arguments: tuple[str, ...]) -> None:
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin without one: the call itself will say
        return
    try:
        signature.bind(*arguments)
    except TypeError as exc:
        called = ", ".join(arguments)
        raise HookError(
            f"{spec!r} takes ({_takes(signature)}) but the trainer calls it with ({called}): {exc}"
        ) from None


def _takes(signature: inspect.Signature) -> str:
    """The parameters by name, as Python writes them without annotations: ``*, n_features, n_classes=...``."""
    names: list[str] = []
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.KEYWORD_ONLY and not any(n.startswith("*") for n in names):
            names.append("*")
        stars = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}.get(parameter.kind.name, "")
        names.append(f"{stars}{parameter.name}{'=...' if parameter.default is not parameter.empty else ''}")
    return ", ".join(names)
