"""Policy pack configuration, reconciled the way the Pulumi CLI does it for ``--policy-pack-config``.

The file is the CLI's format: ``{"<policy>" | "all": "<level>" | {"enforcementLevel": "<level>", ...}}``.
Every policy starts from its declared enforcement level and its schema's defaults; ``all`` then sets
every level, and per-policy entries override levels and settings; a pack's own initial config sits
between the defaults and the file. The result is validated against each policy's JSON schema. Unlike
the CLI, an unknown policy name or setting is an error: a typo would otherwise silently leave a policy
at its default.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from mlplatform.errors import InputError

LEVELS = ("advisory", "mandatory", "remediate", "disabled")


@dataclass(frozen=True)
class PolicySchema:
    """What a pack declares about one policy's configuration."""

    enforcement: str
    properties: Mapping[str, Any] = field(default_factory=dict)
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class PolicySettings:
    """What one policy is configured with: its enforcement level and its settings."""

    enforcement: str
    properties: dict[str, Any]


def load_policy_config(path: Path | None) -> dict[str, Any]:
    """The given config file, or no config."""
    if path is None:
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8") or "{}")
    except OSError as exc:
        raise InputError([f"{path}: cannot read ({exc.strerror})"]) from None
    except json.JSONDecodeError as exc:
        raise InputError([f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})"]) from None
    if not isinstance(document, dict):
        raise InputError([f"{path}: expected an object of policy names"])
    return document


def reconcile(
    policies: Mapping[str, PolicySchema], given: Mapping[str, Any], initial: Mapping[str, Any] | None = None
) -> dict[str, PolicySettings]:
    """Each policy's effective settings, layered as the engine does: the schema's defaults, then the
    pack's own initial config (``new PolicyPack(name, args, initialConfig)``), then ``given``, each layer's
    ``all`` level before its per-policy entries. Every problem with ``given`` is one line of an
    ``InputError``."""
    problems = [
        f"policy config: unknown policy {name!r}" for name in given if name not in policies and name != "all"
    ]
    result = {
        name: PolicySettings(
            schema.enforcement, {k: v["default"] for k, v in schema.properties.items() if "default" in v}
        )
        for name, schema in policies.items()
    }
    _apply(result, initial or {})
    problems += _apply(result, given)
    for name, settings in result.items():
        problems += [
            f"policy config: {name}: {message}" for message in _schema_errors(policies[name], settings)
        ]
    if problems:
        raise InputError(problems)
    return result


def _apply(result: dict[str, PolicySettings], layer: Mapping[str, Any]) -> list[str]:
    """Lay ``layer`` over ``result`` (``all`` first, then each policy's entry); its problems."""
    problems: list[str] = []
    for name in sorted(layer, key=lambda entry: entry != "all"):
        level, properties, entry_problems = _split_entry(name, layer[name])
        problems += entry_problems
        targets = list(result) if name == "all" else [name] if name in result else []
        for target in targets:
            current = result[target]
            result[target] = PolicySettings(
                level or current.enforcement, {**current.properties, **properties}
            )
    return problems


def _split_entry(name: str, entry: Any) -> tuple[str | None, dict[str, Any], list[str]]:
    """``(level, settings, problems)`` of one config entry: a level string or an object."""
    if isinstance(entry, str):
        entry = {"enforcementLevel": entry}
    if not isinstance(entry, dict):
        return None, {}, [f"policy config: {name}: expected an enforcement level or an object"]
    properties = {k: v for k, v in entry.items() if k != "enforcementLevel"}
    level = entry.get("enforcementLevel")
    if level is not None and level not in LEVELS:
        return (
            None,
            properties,
            [f"policy config: {name}: enforcementLevel {level!r} is not one of {', '.join(LEVELS)}"],
        )
    if name == "all" and properties:
        return level, {}, ["policy config: all: only enforcementLevel applies to all policies"]
    return level, properties, []


def _schema_errors(schema: PolicySchema, settings: PolicySettings) -> Iterator[str]:
    # Unlike the CLI, an unknown setting is refused too: a misspelt one would silently keep its default.
    document: dict[str, Any] = {
        "type": "object",
        "properties": dict(schema.properties),
        "additionalProperties": False,
    }
    if schema.required:
        document["required"] = list(schema.required)
    for error in jsonschema.Draft7Validator(document).iter_errors(settings.properties):
        where = ".".join(str(part) for part in error.absolute_path)
        yield f"{where}: {error.message}" if where else error.message
