"""Queued namespaces: Jobs there go through Kueue.

A namespace labelled ``ml-platform.io/queueing: required`` (the Kubernetes layer labels ``ml-training``
and every ``team-<name>`` namespace where Kueue runs) schedules batch work only through its LocalQueue:
a Job or JobSet there must carry ``kueue.x-k8s.io/queue-name``. Without it Kueue ignores the Job
(``manageJobsWithoutQueueName: false``), which then starts at once outside every quota and can hold GPU
nodes that an admitted multi-node run is waiting for (Kueue docs, "Run a Kubernetes Job"). The cluster
refuses the same Job with a ValidatingAdmissionPolicy; this catches it before ``pulumi up``.
"""

from __future__ import annotations

from collections.abc import Iterator

from pulumi_policy import Severity, StackValidationPolicy
from pulumi_policy.proxy import UnknownValueError

from . import tokens
from .factory import Finding, stack_policy
from .stack import namespace_key
from .subject import Graph

QUEUED_NAMESPACE_LABEL = "ml-platform.io/queueing"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
BATCH = ("kubernetes:batch/v1:Job", "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet")


def _unqueued(graph: Graph) -> Iterator[Finding | UnknownValueError]:
    queued = {
        namespace_key(namespace, graph): namespace.name
        for namespace in graph.of(tokens.NAMESPACE)
        if namespace.labels().get(QUEUED_NAMESPACE_LABEL) == "required"
    }
    for job in graph.of(*BATCH):
        namespace = queued.get(namespace_key(job, graph))
        if namespace is not None and not job.labels().get(QUEUE_LABEL):
            yield (
                job.urn,
                (
                    f"runs in {namespace}, whose Jobs go through Kueue, without the label {QUEUE_LABEL}; "
                    "name the namespace's LocalQueue (kubectl get localqueues -n <namespace>)"
                ),
            )


POLICIES: list[StackValidationPolicy] = [
    stack_policy(
        "k8s-jobs-queued",
        "Jobs and JobSets in a namespace labelled ml-platform.io/queueing=required name a Kueue LocalQueue "
        "(kueue.x-k8s.io/queue-name), so every run is admitted against the team's quota.",
        _unqueued,
        severity=Severity.HIGH,
    ),
]
