"""Decode each resource once per analysis, not once per policy.

pulumi-policy 1.21.0 (``pulumi_policy/policy.py``, ``_PolicyAnalyzerServicer``) decodes a resource's
properties inside its loop over policies: ``Analyze`` once per resource policy and ``AnalyzeStack`` the
whole stack once per stack policy, each time ``json_format.MessageToDict``, ``deserialize_properties``
and ``unknown_checking_proxy`` (which copies the whole tree into proxies). With this pack's 29 resource
and 37 stack policies an enterprise stack (about 500 resources, CustomResourceDefinitions of megabytes
among them) was decoded 66 times: a profile of ``mlplatform check aws-enterprise-prod`` put 95 % of the
pack's time there, and ``pulumi preview --policy-pack`` pays the same.

``share_decoding`` wraps both calls so that, for the length of one call, each of the three steps
answers a value it has already seen with its earlier result. What a policy gets is unchanged: the same
values behind the SDK's own proxies. Our policies only read properties (``values.plain`` copies what
they keep), so sharing them between policies is safe. The cache holds the values it keys on, so an id
is never reused while it lives, and it is dropped when the call returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from google.protobuf import json_format
from pulumi_policy import policy as sdk

_calls = threading.local()


@contextmanager
def _sharing() -> Iterator[None]:
    _calls.seen = {}
    try:
        yield
    finally:
        del _calls.seen


def _once(kind: str, decode: Callable[..., Any]) -> Callable[..., Any]:
    def shared(value: Any, *args: Any) -> Any:
        seen: dict[tuple[str, int], tuple[Any, Any]] | None = getattr(_calls, "seen", None)
        if seen is None or args:
            return decode(value, *args)
        key = (kind, id(value))
        if key not in seen:
            seen[key] = (value, decode(value))
        return seen[key][1]

    return shared


class _JsonFormat:
    """``json_format`` as ``pulumi_policy.policy`` uses it, with ``MessageToDict`` shared per call."""

    MessageToDict = staticmethod(_once("dict", json_format.MessageToDict))

    def __getattr__(self, name: str) -> Any:
        return getattr(json_format, name)


def _shared_during(call: Callable[..., Any]) -> Callable[..., Any]:
    def shared(self: Any, request: Any, context: Any) -> Any:
        with _sharing():
            return call(self, request, context)

    return shared


def share_decoding() -> None:
    """Install the sharing into the SDK's analyzer (once, before the pack serves)."""
    if getattr(sdk, "_mlplatform_shared_decoding", False):
        return
    sdk.json_format = _JsonFormat()
    sdk.deserialize_properties = _once("properties", sdk.deserialize_properties)
    sdk.unknown_checking_proxy = _once("proxy", sdk.unknown_checking_proxy)
    servicer = sdk._PolicyAnalyzerServicer
    for method in ("Analyze", "AnalyzeStack"):
        setattr(servicer, method, _shared_during(getattr(servicer, method)))
    sdk._mlplatform_shared_decoding = True
