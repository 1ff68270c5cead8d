"""Reading properties as the engine sends them, and small checks built from property paths.

Properties arrive camelCase and, during ``pulumi preview``, partly unknown (an ARN of a resource not
yet created). The SDK's proxies raise on any unknown access; rules here read plain values instead and
decide per check: a *presence* check counts an unknown as set (``kmsKeyId = key.arn`` will exist),
while a *value* check raises ``UnknownValueError``, which the SDK reports as "can't run policy during
preview" rather than guessing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pulumi_policy.deserialize import serialize_properties
from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
    _DictProxy,
    _ListProxy,
)
from pulumi_policy.secret import _DictSecretsProxy, _ListSecretsProxy

UNKNOWNS = frozenset(
    {
        UNKNOWN_ARCHIVE_VALUE,
        UNKNOWN_ARRAY_VALUE,
        UNKNOWN_ASSET_VALUE,
        UNKNOWN_BOOLEAN_VALUE,
        UNKNOWN_NUMBER_VALUE,
        UNKNOWN_OBJECT_VALUE,
        UNKNOWN_STRING_VALUE,
    }
)

Check = Callable[[Mapping[str, Any]], Iterator[str]]
"""A check over one property object, yielding one message per problem, each starting with its path."""


_PROXIES = (_DictProxy, _ListProxy, _DictSecretsProxy, _ListSecretsProxy)
_SCALARS = frozenset({str, int, float, bool, type(None)})


def plain(props: Mapping[str, Any]) -> dict[str, Any]:
    """The SDK's unknown-checking proxies unwrapped into dicts and lists, unknowns left as sentinels."""
    return dict(_plain(props))


def _plain(value: Any) -> Any:
    """What the SDK's ``serialize_properties`` makes of ``value``, walking plain dicts, lists and scalars
    (nearly all a plan holds) without its dozen ``isinstance`` checks per value; anything else (secrets,
    assets, archives) is the SDK's to serialize."""
    kind = type(value)
    if kind is dict:
        return {key: _plain(item) for key, item in value.items()}
    if kind is list:
        return [_plain(item) for item in value]
    if kind in _SCALARS:
        return value
    if isinstance(value, _PROXIES):
        return _plain(value["__target"])
    return serialize_properties(value)


def is_unknown(value: Any) -> bool:
    return isinstance(value, str) and value in UNKNOWNS


def known(value: Any, path: str) -> Any:
    """``value``, or the SDK's preview-time error when it cannot be known yet."""
    if is_unknown(value):
        raise UnknownValueError(value, path.split("."))
    return value


def at(obj: Any, path: str) -> Any:
    """The value at a dotted path: ``None`` where a step is missing, the unknown where one is unknown."""
    for key in path.split("."):
        if is_unknown(obj):
            return obj
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def elements(obj: Any, path: str) -> list[Any]:
    """The list at ``path`` (empty when unset); an unknown list cannot be judged."""
    value = known(at(obj, path), path)
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def is_set(value: Any) -> bool:
    """Set to something: an unknown value will be set, an empty string or list is not."""
    return value is not None and value not in ("", [])


def is_true(value: Any) -> bool:
    """True as a bool or as the ``"true"`` string some AWS fields (launch templates) use."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


def is_false(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.lower() == "false")


def describe(value: Any) -> str:
    """A value as a message quotes it: whole numbers as integers (the engine sends every number as a
    float, so a runAsUser of 1000 arrives as 1000.0; the manifest said 1000)."""
    return "not set" if value is None else json.dumps(_whole(value))


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_whole(inner) for inner in value]
    return value


def present(path: str, fix: str) -> Check:
    """``path`` must be set (an unknown value counts as set)."""

    def check(obj: Mapping[str, Any]) -> Iterator[str]:
        if not is_set(at(obj, path)):
            yield f"{path} is not set; {fix}"

    return check


def require(path: str, test: Callable[[Any], bool], fix: str) -> Check:
    """``test`` must accept the value at ``path``; an unknown value raises the SDK's preview error."""

    def check(obj: Mapping[str, Any]) -> Iterator[str]:
        value = known(at(obj, path), path)
        if not test(value):
            yield f"{path} is {describe(value)}; {fix}"

    return check


def one_of(*allowed: Any) -> Callable[[Any], bool]:
    return lambda value: value in allowed


def each(path: str, *checks: Check, where: str | None = None) -> Check:
    """Run ``checks`` on every element of the list at ``path`` (only those with ``where`` set)."""

    def check(obj: Mapping[str, Any]) -> Iterator[str]:
        for index, element in enumerate(elements(obj, path)):
            if not isinstance(element, Mapping) or (where is not None and not is_set(at(element, where))):
                continue
            for inner in checks:
                yield from (f"{path}[{index}].{message}" for message in inner(element))

    return check


def all_of(*checks: Check) -> Check:
    def check(obj: Mapping[str, Any]) -> Iterator[str]:
        for inner in checks:
            yield from inner(obj)

    return check


def parse_document(value: Any, path: str) -> Mapping[str, Any]:
    """A JSON policy document given as a string or an object (``{}`` when unset or unparseable)."""
    document = known(value, path)
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except json.JSONDecodeError:
            return {}
    return document if isinstance(document, Mapping) else {}


def statements(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = document.get("Statement", [])
    found = found if isinstance(found, list) else [found]
    return [statement for statement in found if isinstance(statement, Mapping)]
