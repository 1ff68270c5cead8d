"""CEL as the API server runs it: every ``x-kubernetes-validations`` rule of every CRD the plan installs,
on every custom resource of that kind, and every ValidatingAdmissionPolicy on the objects its bindings
select, evaluated with cel-python.

Sources: kubernetes.io "Validation rules" (CustomResourceDefinition docs: ``self`` is the value of the
schema node the rule sits on, rules run after defaulting, a rule that references ``oldSelf`` is a
transition rule and runs on update only) and "Validating Admission Policy" (variables ``object``,
``oldObject``, ``request``, ``params``, ``namespaceObject``, ``variables``; ``matchConstraints`` and the
binding's ``matchResources`` both select; ``validationActions``). Transition rules and rules that need
``authorizer`` or ``params`` cannot be judged on a create offline: they are skipped and counted.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from judges.findings import Finding, Subject
from judges.kube import labels_match, namespace_labels, of_kind, pods

_OLD_SELF = re.compile(r"\boldSelf\b")
# What a policy may read that an offline create cannot supply: the authorizer's answers.
_AUTHORIZER = re.compile(r"\bauthorizer\b")
CRD_POLICY = "crd-cel-rule"
VAP_POLICY = "admission-policy-cel"


_CEL_VALUES = (
    celtypes.BoolType,
    celtypes.BytesType,
    celtypes.DoubleType,
    celtypes.IntType,
    celtypes.ListType,
    celtypes.MapType,
    celtypes.StringType,
    celtypes.UintType,
    CELEvalError,
)


@dataclass
class CelReport:
    """What the CEL judge did: rules evaluated; CRD transition rules skipped (they need ``oldSelf``); and
    admission policies not judged because they need ``params`` or ``authorizer``."""

    findings: list[Finding] = field(default_factory=list)
    evaluated: int = 0
    skipped_old_self: int = 0
    skipped_policies: list[str] = field(default_factory=list)


@cache
def _program(expression: str) -> celpy.Runner:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


def _evaluate(expression: str, activation: Mapping[str, Any]) -> Any:
    """The rule's value, or the ``CELEvalError`` the API server would report as an invalid object."""
    try:
        return _program(expression).evaluate({k: _to_cel(v) for k, v in activation.items()})
    except CELEvalError as error:
        return error


def _to_cel(value: Any) -> Any:
    """Plain data as CEL values; a map of values already evaluated (``variables``) as a CEL map."""
    if isinstance(value, dict) and value and all(isinstance(v, _CEL_VALUES) for v in value.values()):
        return celtypes.MapType({celtypes.StringType(k): v for k, v in value.items()})
    return json_to_cel(value)


def _verdict(value: Any) -> str | None:
    """``None`` when the rule holds, else why not."""
    if isinstance(value, CELEvalError):
        return f"evaluation error: {value.args[0] if value.args else value}"
    if isinstance(value, celtypes.BoolType):
        return None if bool(value) else "false"
    return f"evaluated to {value!r}, not a bool"


# --- CustomResourceDefinition rules -------------------------------------------------------------------


def _default(schema: Mapping[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server applies it before validation (apiextensions
    ``structuraldefaulting``): a missing property with a ``default`` gets it, recursively."""
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = _default(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name in list(value):
                if name not in (schema.get("properties") or {}):
                    value[name] = _default(extra, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_default(schema["items"], item) for item in value]
    return value


def _nodes(schema: Mapping[str, Any], value: Any, path: str) -> Iterator[tuple[Mapping[str, Any], Any, str]]:
    """Each (schema node, value, path) that holds a value, in document order."""
    yield schema, value, path
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for name, sub in properties.items():
            if name in value:
                yield from _nodes(sub, value[name], f"{path}.{name}")
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                if name not in properties:
                    yield from _nodes(extra, item, f"{path}[{name!r}]")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from _nodes(schema["items"], item, f"{path}[{index}]")


def _crd_schemas(objects: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """``(apiVersion, kind)`` → that version's openAPIV3Schema, for every CRD the plan installs."""
    schemas = {}
    for crd in of_kind(objects, "CustomResourceDefinition"):
        spec = crd["spec"]
        for version in spec.get("versions") or []:
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema is not None:
                schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return schemas


def _as_self(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object a root-level rule sees: CEL gets only ``name`` and ``generateName`` of metadata."""
    metadata = obj.get("metadata") or {}
    kept = {k: metadata[k] for k in ("name", "generateName") if k in metadata}
    return {**copy.deepcopy(dict(obj)), "metadata": kept}


def judge_crd_rules(objects: Sequence[Mapping[str, Any]], report: CelReport) -> None:
    schemas = _crd_schemas(objects)
    for obj in objects:
        schema = schemas.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
        if schema is None:
            continue
        subject = Subject.of(obj)
        for node, value, path in _nodes(schema, _default(schema, _as_self(obj)), "self"):
            for rule in node.get("x-kubernetes-validations") or []:
                expression = str(rule["rule"])
                if _OLD_SELF.search(expression):
                    report.skipped_old_self += 1
                    continue
                report.evaluated += 1
                why = _verdict(_evaluate(expression, {"self": value}))
                if why is not None:
                    message = rule.get("message") or rule.get("messageExpression") or expression
                    report.findings.append(
                        Finding(
                            CRD_POLICY,
                            "mandatory",
                            subject,
                            f"{path}: the CRD's rule `{_one_line(expression)}` is {why}: {message}",
                        )
                    )


# --- ValidatingAdmissionPolicy ------------------------------------------------------------------------


def _plurals(objects: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    return {
        str(crd["spec"]["names"]["kind"]): str(crd["spec"]["names"]["plural"])
        for crd in of_kind(objects, "CustomResourceDefinition")
    }


def _plural(kind: str, custom: Mapping[str, str]) -> str:
    """The resource name of a kind: a CRD's declared plural, else the API's English plural of the
    built-in kind (``Job`` → ``jobs``, ``NetworkPolicy`` → ``networkpolicies``, ``Ingress`` →
    ``ingresses``)."""
    if kind in custom:
        return custom[kind]
    lower = kind.lower()
    if lower.endswith("y"):
        return f"{lower[:-1]}ies"
    if lower.endswith("s"):
        return f"{lower}es"
    return f"{lower}s"


# Who creates the plan's objects: the stack's deployer, none of the people the stack grants roles to
# (tests plant a person's request through ``refusals``' ``user``).
DEPLOYER: Mapping[str, Any] = {"username": "ml-platform-deployer", "groups": ["system:authenticated"]}


def _rule_matches(
    rule: Mapping[str, Any], group: str, version: str, resource: str, operation: str = "CREATE"
) -> bool:
    def has(key: str, value: str) -> bool:
        allowed = rule.get(key) or []
        return "*" in allowed or value in allowed

    operations = rule.get("operations") or []
    return (
        has("apiGroups", group)
        and has("apiVersions", version)
        and has("resources", resource)
        and ("*" in operations or operation in operations)
    )


def _selects(
    match: Mapping[str, Any] | None,
    obj: Mapping[str, Any],
    resource: tuple[str, str, str],
    namespaces: Mapping[str, Mapping[str, str]],
    *,
    rules_required: bool,
    operation: str = "CREATE",
) -> bool:
    """``matchConstraints``/``matchResources``: resource rules (required on the policy, optional on the
    binding), exclusions, and namespace/object selectors (absent selects all)."""
    match = match or {}
    rules = match.get("resourceRules") or []
    if (rules or rules_required) and not any(_rule_matches(r, *resource, operation) for r in rules):
        return False
    if any(_rule_matches(r, *resource) for r in match.get("excludeResourceRules") or []):
        return False
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    if namespace and not labels_match(match.get("namespaceSelector", {}), namespaces.get(namespace, {})):
        return False
    return labels_match(match.get("objectSelector", {}), metadata.get("labels") or {})


def as_pods(objects: Sequence[Mapping[str, Any]]) -> list[tuple[Subject, dict[str, Any]]]:
    """The pod each planned workload's template makes, as the API server receives it from the
    controller (a ``v1`` Pod with the template's metadata, the Job controller's labels, the owner's
    namespace), with the workload it stands for."""
    return [
        (
            pod.owner,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{pod.owner.name}-pod",
                    "namespace": pod.namespace,
                    "labels": dict(pod.labels),
                    "annotations": dict(pod.annotations),
                },
                "spec": copy.deepcopy(dict(pod.spec)),
            },
        )
        for pod in pods(objects)
    ]


def _bound(
    objects: Sequence[Mapping[str, Any]],
) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any], str]]:
    """(policy, binding, level) for each binding of a planned policy."""
    policies = {str(p["metadata"]["name"]): p for p in of_kind(objects, "ValidatingAdmissionPolicy")}
    for binding in of_kind(objects, "ValidatingAdmissionPolicyBinding"):
        policy = policies.get(str(binding["spec"].get("policyName")))
        if policy is not None:
            level = "mandatory" if "Deny" in (binding["spec"].get("validationActions") or []) else "advisory"
            yield policy, binding, level


def _admits(
    policy: Mapping[str, Any],
    binding: Mapping[str, Any],
    obj: Mapping[str, Any],
    namespaces: Mapping[str, Mapping[str, str]],
    plurals: Mapping[str, str],
    operation: str = "CREATE",
) -> bool:
    """Whether the policy and its binding both select ``operation`` on ``obj``."""
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    resource = (group, version, _plural(str(obj.get("kind")), plurals))
    return _selects(
        policy["spec"].get("matchConstraints"),
        obj,
        resource,
        namespaces,
        rules_required=True,
        operation=operation,
    ) and _selects(
        binding["spec"].get("matchResources"),
        obj,
        resource,
        namespaces,
        rules_required=False,
        operation=operation,
    )


def pod_guards(objects: Sequence[Mapping[str, Any]], namespace: str) -> list[str]:
    """The policies a Deny binding applies to the pods created in ``namespace`` that refuse a pod asking
    for the host (``privileged``, ``SYS_ADMIN``, a hostPath ``/``) while they admit the same pod without
    it. A policy that judges something else (the images' registry and digest) is no guard of the
    namespace's Pod Security level, though it is bound to every pod there."""
    namespaces = namespace_labels(objects)
    plurals = _plurals(objects)
    namespace_objects = {str(n["metadata"]["name"]): n for n in of_kind(objects, "Namespace")}
    here = [pod for _, pod in as_pods(objects) if pod["metadata"]["namespace"] == namespace]
    probes = [(pod, _with_host_access(pod)) for pod in (here or [_minimal_pod(namespace)])]

    def refuses(policy: Mapping[str, Any], level: str, pod: Mapping[str, Any]) -> bool:
        report = CelReport()
        _judge_admission(policy, level, Subject.of(pod), pod, namespace_objects, report)
        return bool(report.findings)

    return [
        str(policy["metadata"]["name"])
        for policy, binding, level in _bound(objects)
        if level == "mandatory"
        and any(
            _admits(policy, binding, escalated, namespaces, plurals)
            and refuses(policy, level, escalated)
            and not refuses(policy, level, baseline)
            for baseline, escalated in probes
        )
    ]


def _minimal_pod(namespace: str) -> dict[str, Any]:
    """The least pod the API server admits in a namespace with no planned pods: one container, no host
    access, every ``restricted`` control met (kubernetes.io "Pod Security Standards"). A guard is probed
    with it rather than with a pod of another namespace, whose other fields a policy may refuse (review
    37c B1: the first pod of the plan JSON is a DaemonSet's that mounts host paths)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": namespace, "labels": {}, "annotations": {}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "probe",
                    "image": "probe",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def _with_host_access(pod: Mapping[str, Any]) -> dict[str, Any]:
    """``pod`` asking for the host: privileged, ``SYS_ADMIN`` and a hostPath ``/`` in every container."""
    escalated = copy.deepcopy(dict(pod))
    spec = escalated["spec"]
    spec["volumes"] = [*spec.get("volumes", []), {"name": "probe-host", "hostPath": {"path": "/"}}]
    for container in spec["containers"]:
        container["securityContext"] = {
            **(container.get("securityContext") or {}),
            "privileged": True,
            "capabilities": {"add": ["SYS_ADMIN"]},
        }
    return escalated


def judge_admission_policies(objects: Sequence[Mapping[str, Any]], report: CelReport) -> None:
    """Each bound policy on every planned object it selects, and on the pods the planned workloads
    create (a policy on ``pods`` guards what a Job or Deployment makes, not the Job: review cluster.md
    A-N1)."""
    namespaces = namespace_labels(objects)
    plurals = _plurals(objects)
    namespace_objects = {str(n["metadata"]["name"]): n for n in of_kind(objects, "Namespace")}
    candidates = [*((Subject.of(obj), obj) for obj in objects), *as_pods(objects)]
    for policy, binding, level in _bound(objects):
        for subject, obj in candidates:
            if _admits(policy, binding, obj, namespaces, plurals):
                _judge_admission(policy, level, subject, obj, namespace_objects, report)


def refusals(
    objects: Sequence[Mapping[str, Any]],
    obj: Mapping[str, Any],
    *,
    operation: str = "CREATE",
    user: Mapping[str, Any] = DEPLOYER,
) -> list[Finding]:
    """What the policies bound with ``Deny`` in the planned cluster say when ``user`` makes
    ``operation`` (CREATE, UPDATE or DELETE) on ``obj`` there."""
    namespaces = namespace_labels(objects)
    plurals = _plurals(objects)
    namespace_objects = {str(n["metadata"]["name"]): n for n in of_kind(objects, "Namespace")}
    report = CelReport()
    for policy, binding, level in _bound(objects):
        if level == "mandatory" and _admits(policy, binding, obj, namespaces, plurals, operation):
            _judge_admission(policy, level, Subject.of(obj), obj, namespace_objects, report, operation, user)
    return report.findings


def _judge_admission(
    policy: Mapping[str, Any],
    level: str,
    subject: Subject,
    obj: Mapping[str, Any],
    namespace_objects: Mapping[str, Mapping[str, Any]],
    report: CelReport,
    operation: str = "CREATE",
    user: Mapping[str, Any] = DEPLOYER,
) -> None:
    spec = policy["spec"]
    metadata = obj.get("metadata") or {}
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    # A DELETE carries the object as ``oldObject`` and none as ``object`` (kubernetes.io, "Validating
    # Admission Policy", variables).
    activation: dict[str, Any] = {
        "object": None if operation == "DELETE" else dict(obj),
        "oldObject": dict(obj) if operation != "CREATE" else None,
        "namespaceObject": namespace_objects.get(str(metadata.get("namespace") or "")),
        "request": {
            "operation": operation,
            "kind": {"group": group, "version": version, "kind": obj.get("kind")},
            "userInfo": dict(user),
            "name": metadata.get("name"),
            "namespace": metadata.get("namespace"),
        },
    }
    expressions = [
        *(str(c["expression"]) for c in spec.get("matchConditions") or []),
        *(str(v["expression"]) for v in spec.get("variables") or []),
        *(str(v["expression"]) for v in spec.get("validations") or []),
    ]
    if spec.get("paramKind") or any(_AUTHORIZER.search(e) for e in expressions):
        report.skipped_policies.append(str(policy["metadata"]["name"]))
        return
    variables: dict[str, Any] = {}
    for variable in spec.get("variables") or []:
        value = _evaluate(str(variable["expression"]), {**activation, "variables": variables})
        variables[str(variable["name"])] = value
    activation["variables"] = variables
    for condition in spec.get("matchConditions") or []:
        if _verdict(_evaluate(str(condition["expression"]), activation)) is not None:
            return
    what = "its pods" if obj.get("kind") == "Pod" and subject.kind != "Pod" else "it"
    for validation in spec.get("validations") or []:
        expression = str(validation["expression"])
        report.evaluated += 1
        why = _verdict(_evaluate(expression, activation))
        if why is not None:
            message = validation.get("message") or expression
            report.findings.append(
                Finding(
                    VAP_POLICY,
                    "mandatory" if level == "mandatory" else "advisory",
                    subject,
                    f"ValidatingAdmissionPolicy {policy['metadata']['name']} refuses {what} "
                    f"(`{expression}` is {why}): {message}",
                )
            )


def cel_report(objects: Sequence[Mapping[str, Any]]) -> CelReport:
    report = CelReport()
    judge_crd_rules(objects, report)
    judge_admission_policies(objects, report)
    return report


def judge_cel(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    return cel_report(objects).findings


def _one_line(expression: str) -> str:
    return " ".join(expression.split())
