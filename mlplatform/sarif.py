"""Policy findings as SARIF 2.1.0, for GitHub code scanning and any other SARIF viewer.

One run per invocation: the pack is the tool, each policy a rule, each violation a result located at
the stack file it came from (what a user edits) and, logically, at the resource's URN. GitHub reads
``security-severity`` as a score: over 9.0 critical, 7.0-8.9 high, 4.0-6.9 medium, 3.9 or less low; the
scores below sit inside those bands.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from mlplatform.analyzer import PackInfo, PolicyInfo, StackReport, Violation

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVELS = {"mandatory": "error", "remediate": "error", "advisory": "warning", "disabled": "none"}
_SECURITY_SEVERITY = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "2.0"}


def to_sarif(
    pack: PackInfo, reports: Sequence[StackReport], root: Path, problems: Sequence[str] = ()
) -> dict[str, Any]:
    """The SARIF log; artifact paths are relative to ``root`` (the repository, for GitHub). ``problems``
    are stacks that could not be judged (bad config): the run did not fully succeed."""
    rules = [_rule(policy) for policy in pack.policies]
    index = {policy.name: position for position, policy in enumerate(pack.policies)}
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": pack.name, "version": pack.version, "rules": rules}},
                "automationDetails": {"id": "mlplatform-check/"},
                "invocations": [
                    {
                        "executionSuccessful": not problems,
                        "toolExecutionNotifications": [
                            {"level": "error", "message": {"text": line}} for line in problems
                        ],
                    }
                ],
                "results": [
                    _result(violation, report, index, root)
                    for report in reports
                    for violation in report.violations
                ],
            }
        ],
    }


def _rule(policy: PolicyInfo) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "enforcementLevel": policy.enforcement,
        "kind": policy.kind,
        "tags": ["security"],
    }
    if policy.severity in _SECURITY_SEVERITY:
        properties["security-severity"] = _SECURITY_SEVERITY[policy.severity]
    return {
        "id": policy.name,
        "name": policy.name,
        "shortDescription": {"text": policy.description},
        "fullDescription": {"text": policy.description},
        "defaultConfiguration": {"level": _LEVELS.get(policy.enforcement, "warning")},
        "properties": properties,
    }


def _result(violation: Violation, report: StackReport, index: dict[str, int], root: Path) -> dict[str, Any]:
    location: dict[str, Any] = {
        "logicalLocations": [
            {"fullyQualifiedName": violation.urn, "name": violation.name, "kind": "resource"}
        ]
    }
    if report.stack_file is not None:
        location["physicalLocation"] = {
            "artifactLocation": {"uri": _relative(report.stack_file, root)},
            "region": {"startLine": _line(report.stack_file, violation.message)},
        }
    result: dict[str, Any] = {
        "ruleId": violation.policy,
        "level": _LEVELS.get(violation.enforcement, "warning"),
        "message": {"text": f"{violation.name} ({violation.type}): {violation.message}"},
        "locations": [location],
        "partialFingerprints": {"mlplatformFinding/v1": _fingerprint(report.stack, violation)},
        "properties": {"stack": report.label, "urn": violation.urn},
    }
    if violation.policy in index:
        result["ruleIndex"] = index[violation.policy]
    return result


def _line(stack_file: Path, message: str) -> int:
    """The stack-file line a finding is about: the config value the message quotes (the longest, when
    several do, as the most specific), else the top of the file."""
    quoted = [(len(value), line) for value, line in _config_values(stack_file) if _quotes(message, value)]
    return max(quoted)[1] if quoted else 1


def _quotes(message: str, value: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(value)}(?![\w.-])", message) is not None


@functools.cache
def _config_values(stack_file: Path) -> tuple[tuple[str, int], ...]:
    """Every scalar value in the stack file with its 1-based line (YAML nodes carry their position)."""
    try:
        document = yaml.compose(stack_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return ()
    found: list[tuple[str, int]] = []
    stack: list[yaml.Node] = [document] if document is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            found.append((str(node.value), node.start_mark.line + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend(value for key, value in node.value)
    return tuple((value, line) for value, line in found if len(value) >= 3)


def _relative(path: Path, root: Path) -> str:
    resolved = path.resolve()
    return (
        resolved.relative_to(root.resolve()).as_posix()
        if resolved.is_relative_to(root.resolve())
        else resolved.as_uri()
    )


def _fingerprint(stack: str, violation: Violation) -> str:
    """Stable across runs while the finding stands, so code scanning tracks it rather than re-raising it."""
    key = "\0".join((stack, violation.policy, violation.urn, violation.message))
    return hashlib.sha256(key.encode()).hexdigest()[:32]
