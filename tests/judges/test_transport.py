"""The transport judge (issue 35): every flow of the reachability contract is TLS or a named exception.

Both ways: the shipped enterprise stacks carry no plaintext flow outside the exceptions (the registry and
inference serve HTTPS; rendezvous/NCCL, DNS, the exporters' scrapes and the registry database's unverified
name are the named exceptions), and a
planted plaintext flow (the enterprise registry's Service and port renamed to plain http, as before
issue 35) is a mandatory finding that names the registry and its port.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from judges import judge_all
from judges.transport import EXCEPTIONS, PLAINTEXT, exceptions_taken, judge_transport, transport_table
from mlplatform.judging import transport_exemptions
from tests.conftest import plan_stack

from .conftest import Judged

ENTERPRISE = ["aws-enterprise-prod", "azure-enterprise-prod"]


@pytest.mark.parametrize("stack", ENTERPRISE)
def test_every_enterprise_flow_is_tls_or_a_named_exception(
    stack: str, judged: Callable[[str], Judged]
) -> None:
    stack_objects = judged(stack)
    assert judge_transport(stack_objects.objects, stack_objects.network) == []
    table = transport_table(stack_objects.objects)
    kinds = {kind for _, _, kind in table}
    assert kinds <= {"tls", *EXCEPTIONS}
    registry = [(purpose, kind) for purpose, port, kind in table if "model registry" in purpose]
    assert registry and all(kind == "tls" for _, kind in registry)
    assert {"training-fabric", "cluster-dns"} <= kinds
    # The registry's database: TLS the server requires, its name verified by the client (verify-full).
    database = [kind for purpose, port, kind in table if port == 5432]
    assert database and set(database) == {"tls"}, database


def _plaintext_registry(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The registry as it was before issue 35: container port and Service port named http."""
    planted = copy.deepcopy(objects)
    for o in planted:
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "registry":
            for container in o["spec"]["template"]["spec"]["containers"]:
                for port in container["ports"]:
                    port["name"] = "http"
        if o["kind"] == "Service" and o["metadata"]["name"] == "registry":
            for port in o["spec"]["ports"]:
                port["name"] = port["targetPort"] = "http"
    return planted


def test_a_planted_plaintext_registry_is_a_mandatory_finding(judged: Callable[[str], Judged]) -> None:
    stack = judged("aws-enterprise-prod")
    findings = judge_transport(_plaintext_registry(stack.objects), stack.network)
    assert [(f.policy, f.level, f.subject.kind, f.subject.name) for f in findings] == [
        (PLAINTEXT, "mandatory", "Deployment", "registry")
    ]
    assert findings[0].message.startswith("port 5000 is plaintext and no exception covers it (")
    assert "calls the model registry" in findings[0].message
    # What `mlplatform check` runs (mlplatform/judging.py): the same mandatory finding fails it.
    assert findings[0] in judge_all(_plaintext_registry(stack.objects), stack.network)


def test_an_smb_stack_serving_http_is_advisory_only(judged: Callable[[str], Judged]) -> None:
    stack = judged("aws-smb-prod")
    findings = judge_transport(stack.objects, stack.network)
    assert findings and all(f.policy == PLAINTEXT and not f.mandatory for f in findings)


def test_the_exceptions_taken_name_their_object_and_reason(judged: Callable[[str], Judged]) -> None:
    """What the evidence's exceptions register lists (mlplatform/evidence.py): each excepted object once
    per exception, with the exception's reason and the flows it covers."""
    stack = judged("aws-enterprise-prod")
    taken = {
        (subject.kind, subject.name, name): reason
        for subject, name, reason in exceptions_taken(stack.objects)
    }
    assert all(reason.startswith(EXCEPTIONS[name].reason) for (_, _, name), reason in taken.items())
    assert {name for _, _, name in taken} == {"cluster-dns", "training-fabric", "metrics-scrape"}


def test_the_evidence_records_each_exception_against_its_planned_resource() -> None:
    plan = plan_stack("aws-enterprise-prod")
    exemptions = transport_exemptions(plan)
    assert {row[1] for row in exemptions} == {f"{PLAINTEXT}: {name}" for name in EXCEPTIONS}
    # The registry's servers reach only verified TLS now (its database included): no exception row.
    assert not [urn for urn, _, _ in exemptions if urn.endswith("::deployment-ml-registry-registry")]
    assert transport_exemptions(plan_stack("aws-enterprise-prod"), frozenset({"transport"})) == ()
