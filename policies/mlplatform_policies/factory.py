"""Turning rule functions into pulumi-policy policies, so every rule is a plain function over a Subject.

A resource rule yields messages for one resource; a stack rule yields ``(urn, message)`` findings over
the graph. ``by_type`` makes a rule from a table keyed by type token, which is how most rules read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Severity,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

from .settings import schema
from .subject import Graph, Subject
from .values import Check

Rule = Callable[[Subject], Iterable[str]]
Finding = tuple[str, str]
StackRule = Callable[[Graph], Iterable[Finding | UnknownValueError]]
NodeRule = Callable[[Subject, Graph], Iterable[str]]

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY


def on_props(check: Check) -> Rule:
    """A property check as a rule over the resource's own inputs."""
    return lambda subject: check(subject.props)


def by_type(table: Mapping[str, Rule]) -> Rule:
    """The rule for the subject's type, if the table has one."""

    def rule(subject: Subject) -> Iterator[str]:
        found = table.get(subject.type)
        if found is not None:
            yield from found(subject)

    return rule


def per_node(types: Iterable[str], rule: NodeRule) -> StackRule:
    """A stack rule judging each resource of ``types`` with the graph at hand.

    An unknown value stops the judgement of that one resource only; it is handed on so the policy can
    report it after every definite finding.
    """
    wanted = tuple(types)

    def stack_rule(graph: Graph) -> Iterator[Finding | UnknownValueError]:
        for subject in graph.of(*wanted):
            try:
                for message in rule(subject, graph):
                    yield subject.urn, message
            except UnknownValueError as unknown:
                yield unknown

    return stack_rule


def resource_policy(
    name: str,
    description: str,
    rule: Rule,
    *,
    severity: Severity,
    enforcement: EnforcementLevel = MANDATORY,
    settings: tuple[str, ...] = (),
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        for message in rule(Subject.from_args(args)):
            report(message, None)

    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=enforcement,
        config_schema=schema(*settings),
        severity=severity,
    )


def stack_policy(
    name: str,
    description: str,
    rule: StackRule,
    *,
    severity: Severity,
    enforcement: EnforcementLevel = MANDATORY,
    settings: tuple[str, ...] = (),
) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        unknown: UnknownValueError | None = None
        for finding in rule(Graph.from_args(args)):
            if isinstance(finding, UnknownValueError):
                unknown = unknown or finding
            else:
                report(finding[1], finding[0])
        if unknown is not None:
            raise unknown

    return StackValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=enforcement,
        config_schema=schema(*settings),
        severity=severity,
    )
