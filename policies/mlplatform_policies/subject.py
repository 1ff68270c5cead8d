"""What a rule judges: one resource with its provider, settings and graph edges, and the stack's graph.

Both resource policies (``Analyze``) and stack policies (``AnalyzeStack``) build the same ``Subject``,
so a rule reads a resource one way wherever it runs. Tags, tier and region are answered here once,
the way the providers apply them: AWS resources inherit the provider's ``defaultTags`` and ``region``;
Azure resources carry their own ``tags`` and ``location``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pulumi_policy import PolicyResource, ResourceValidationArgs, StackValidationArgs

from .settings import default
from .values import at, is_unknown, plain

PROVIDER_PREFIX = "pulumi:providers:"
TIERS = ("smb", "enterprise")
# Auto Scaling groups take a list of tags and ignore the provider's defaultTags.
_NO_DEFAULT_TAGS = frozenset({"aws:autoscaling/group:Group"})


@dataclass(frozen=True)
class Subject:
    """``props`` and ``provider`` are read from the SDK's proxies on first use: a stack policy builds the
    whole stack's graph and reads the properties of the few types it judges (``AnalyzeStack`` runs each
    stack policy on a graph of its own)."""

    type: str
    name: str
    urn: str
    sent_props: Mapping[str, Any] = field(repr=False)  # as the SDK hands them: its proxies
    sent_provider: Mapping[str, Any] | None = field(repr=False)  # the provider's, likewise
    config: Mapping[str, Any]
    dependencies: tuple[str, ...] = ()
    property_dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The engine refuses to delete it (``protect``); known in AnalyzeStack only.
    protect: bool = False
    # Input paths the engine keeps from state (the ``ignoreChanges`` option); AnalyzeStack only.
    ignore_changes: tuple[str, ...] = ()

    @classmethod
    def from_args(cls, args: ResourceValidationArgs) -> Subject:
        provider = args.provider.props if args.provider is not None else None
        return cls(args.resource_type, args.name, args.urn, args.props, provider, args.get_config())

    @classmethod
    def from_stack_resource(cls, resource: PolicyResource, config: Mapping[str, Any]) -> Subject:
        return cls(
            resource.resource_type,
            resource.name,
            resource.urn,
            resource.props,
            resource.provider.props if resource.provider is not None else None,
            config,
            dependencies=tuple(dependency.urn for dependency in resource.dependencies),
            property_dependencies={
                key: tuple(dependency.urn for dependency in deps)
                for key, deps in resource.property_dependencies.items()
            },
            protect=bool(resource.opts.protect),
            ignore_changes=tuple(resource.opts.ignore_changes or ()),
        )

    @cached_property
    def props(self) -> Mapping[str, Any]:
        return _props(self.type, self.sent_props)

    @cached_property
    def provider(self) -> Mapping[str, Any]:
        return provider_config(self.sent_provider) if self.sent_provider is not None else {}

    @property
    def package(self) -> str:
        """``aws``, ``azure-native``, ``kubernetes``… for resources and for their providers alike."""
        return self.type.removeprefix(PROVIDER_PREFIX).split(":")[0]

    @property
    def is_provider(self) -> bool:
        return self.type.startswith(PROVIDER_PREFIX)

    def get(self, path: str) -> Any:
        return at(self.props, path)

    def setting(self, key: str) -> Any:
        return self.config.get(key, default(key))

    def tags(self) -> dict[str, Any]:
        """Effective tags: the provider's defaultTags (AWS) overlaid with the resource's own."""
        own = _as_tag_map(self.props.get("tags"))
        if self.package != "aws" or self.type in _NO_DEFAULT_TAGS:
            return own
        return {**_as_tag_map(at(self.provider, "defaultTags.tags")), **own}

    def tier(self) -> str:
        """The ``tier`` tag; missing or unrecognised means enterprise, the stricter tier."""
        tier = self.tags().get("tier")
        return tier if tier in TIERS else "enterprise"

    def aws_region(self) -> Any:
        """The resource's own ``region`` input, else its provider's (pulumi-aws v7)."""
        own = self.props.get("region")
        return own if own is not None else self.provider.get("region")

    def azure_location(self) -> Any:
        """The resource's ``location``, else its provider's; normalised as ARM compares them."""
        location = self.props.get("location")
        location = location if location is not None else self.provider.get("location")
        if isinstance(location, str) and not is_unknown(location):
            return location.replace(" ", "").lower()
        return location

    def annotations(self) -> Mapping[str, Any]:
        found = self.get("metadata.annotations")
        return found if isinstance(found, Mapping) else {}

    def labels(self) -> Mapping[str, Any]:
        found = self.get("metadata.labels")
        return found if isinstance(found, Mapping) else {}

    def reason(self, annotation: str) -> bool:
        """Whether the object carries a written (non-blank) reason under ``annotation``."""
        text = self.annotations().get(annotation)
        return isinstance(text, str) and bool(text.strip())


def provider_config(props: Mapping[str, Any]) -> dict[str, Any]:
    """A provider's inputs, structured: the SDKs send its object and list settings as JSON strings
    (``defaultTags: '{"tags": {...}}'``), and the engine hands them to policies as sent."""
    return {key: _json_or_value(value) for key, value in plain(props).items()}


def _props(resource_type: str, props: Mapping[str, Any]) -> dict[str, Any]:
    return provider_config(props) if resource_type.startswith(PROVIDER_PREFIX) else plain(props)


def _json_or_value(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _as_tag_map(tags: Any) -> dict[str, Any]:
    """Tags as a map, from the usual map or from an Auto Scaling group's ``[{key, value}]`` list."""
    if isinstance(tags, Mapping):
        return dict(tags)
    if isinstance(tags, list):
        return {tag["key"]: tag.get("value") for tag in tags if isinstance(tag, Mapping) and "key" in tag}
    return {}


class Graph:
    """The stack's resources by URN and type, and the edges that link one resource to another."""

    def __init__(self, subjects: Iterable[Subject]) -> None:
        self.subjects = list(subjects)
        self._by_urn = {subject.urn: subject for subject in self.subjects}

    @classmethod
    def from_args(cls, args: StackValidationArgs) -> Graph:
        config = args.get_config()
        return cls(Subject.from_stack_resource(resource, config) for resource in args.resources)

    def of(self, *types: str) -> list[Subject]:
        return [subject for subject in self.subjects if subject.type in types]

    def find(self, urn: str | None) -> Subject | None:
        return self._by_urn.get(urn) if urn else None

    def linked(
        self, subject: Subject, prop: str, types: Iterable[str], identity: str | None = None
    ) -> list[Subject]:
        """Resources of ``types`` that ``subject``'s ``prop`` refers to.

        The engine's property dependencies say it exactly; a plan that records only whole-resource
        dependencies gives every resource of those types it depends on. A literal value (a bucket
        named in the program) is matched against each candidate's ``identity`` input.
        """
        wanted = frozenset(types)
        urns = (
            subject.property_dependencies.get(prop, ())
            if subject.property_dependencies
            else subject.dependencies
        )
        found = {
            urn: self._by_urn[urn] for urn in urns if urn in self._by_urn and self._by_urn[urn].type in wanted
        }
        value = subject.get(prop)
        if identity is not None and isinstance(value, str) and not is_unknown(value):
            found.update((c.urn, c) for c in self.of(*wanted) if names(value, c.get(identity)))
        return list(found.values())


def names(reference: str, name: Any) -> bool:
    """Whether ``reference`` (a name, an ARN or an Azure resource ID) names ``name``."""
    return isinstance(name, str) and bool(name) and reference.rsplit("/", 1)[-1].rsplit(":", 1)[-1] == name
