"""The api-validation judge's rules, each as the API server applies it (Kubernetes 1.35): metadata
(``staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go``: ``ValidateAnnotations`` checks a
key lower-cased, "case doesn't matter"; ``ValidateLabels`` as written), and the workload rules of
``pkg/apis/apps/validation``, ``pkg/apis/batch/validation`` and ``pkg/apis/core/validation`` each test
names."""

from __future__ import annotations

from typing import Any

import pytest

from judges.validation import judge_validation


def _config_map(**metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "a", **metadata},
    }


def test_an_annotation_key_with_an_upper_case_prefix_is_accepted_and_a_label_key_is_not() -> None:
    assert judge_validation([_config_map(annotations={"Example.COM/Owner": "x"})]) == []
    [finding] = judge_validation([_config_map(labels={"Example.COM/Owner": "x"})])
    assert "metadata.labels: key 'Example.COM/Owner'" in finding.message
    assert "ValidateLabels" in finding.message


def test_annotations_over_256_kib_in_all_are_refused() -> None:
    half = "x" * (128 * 1024)
    assert judge_validation([_config_map(annotations={"a": half[:-1]})]) == []
    [finding] = judge_validation([_config_map(annotations={"a": half, "b": half})])
    assert "TotalAnnotationSizeLimitB" in finding.message and finding.mandatory


def _deployment(strategy: dict[str, Any] | None = None, **pod: Any) -> dict[str, Any]:
    container = {"name": "app", "image": "i", **pod.pop("container", {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "a"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            **({"strategy": strategy} if strategy is not None else {}),
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container], **pod}},
        },
    }


def _messages(obj: dict[str, Any]) -> list[str]:
    return [f.message for f in judge_validation([obj])]


def test_a_recreate_deployment_may_not_keep_rolling_update_parameters() -> None:
    """ValidateDeploymentStrategy (pkg/apis/apps/validation): rollingUpdate is Forbidden with Recreate."""
    assert _messages(_deployment({"type": "Recreate"})) == []
    assert _messages(_deployment({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}})) == []
    [message] = _messages(_deployment({"type": "Recreate", "rollingUpdate": {"maxSurge": "25%"}}))
    assert (
        message.startswith("spec.strategy.rollingUpdate: Forbidden")
        and "ValidateDeploymentStrategy" in message
    )


def test_a_rolling_update_that_can_neither_surge_nor_take_a_pod_down_is_refused() -> None:
    """ValidateRollingUpdateDeployment: maxUnavailable "may not be 0 when `maxSurge` is 0" (both default
    to 25%, so one stated 0 alone is fine)."""
    assert _messages(_deployment({"rollingUpdate": {"maxUnavailable": 0}})) == []
    [message] = _messages(_deployment({"rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}}))
    assert "maxUnavailable: may not be 0 when `maxSurge` is 0" in message


def test_an_indexed_job_needs_completions() -> None:
    """validateJobSpec (pkg/apis/batch/validation): completions Required when completion mode is Indexed."""
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "a"},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": 2,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "i"}]}},
        },
    }
    [message] = _messages(job)
    assert message == "spec.completions: Required value when completion mode is Indexed (validateJobSpec)"
    job["spec"]["completions"] = 2
    assert _messages(job) == []


def test_a_cronjob_schedule_is_parsed_as_the_api_server_parses_it() -> None:
    """ValidateCronJobSpec → validateScheduleFormat (robfig/cron/v3 ParseStandard); the cases are
    tests/judges/test_cron.py's."""
    cron_job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "a"},
        "spec": {
            "schedule": "61 * * * *",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "i"}]}
                    }
                }
            },
        },
    }
    [message] = _messages(cron_job)
    assert message == (
        "spec.schedule '61 * * * *': end of range (61) above maximum (59): 61 (validateScheduleFormat)"
    )
    cron_job["spec"]["schedule"] = "@every 6h"
    assert _messages(cron_job) == []


def test_a_volume_mount_names_a_volume_of_the_pod_at_a_path_of_its_own() -> None:
    """ValidateVolumeMounts (pkg/apis/core/validation): "Not found" for a name no volume has, "must be
    unique" for a mount path; ValidateVolumes: volume names unique."""
    mounts = [{"name": "cache", "mountPath": "/cache"}, {"name": "ghost", "mountPath": "/cache"}]
    volumes = [{"name": "cache", "emptyDir": {}}, {"name": "cache", "emptyDir": {}}]
    found = _messages(_deployment(container={"volumeMounts": mounts}, volumes=volumes))
    assert found == [
        "spec.template.spec.volumes[cache].name: Duplicate value (ValidateVolumes)",
        "spec.template.spec.containers[app].volumeMounts[1].name 'ghost': Not found, the pod has no volume "
        "of that name (ValidateVolumeMounts)",
        "spec.template.spec.containers[app].volumeMounts[1].mountPath '/cache': must be unique "
        "(ValidateVolumeMounts)",
    ]


@pytest.mark.parametrize("name", ["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "nvidia.com/gpu"])
def test_resource_names_a_container_may_use(name: str) -> None:
    resources = {"requests": {name: "1"}, "limits": {name: "1"}}
    assert _messages(_deployment(container={"resources": resources})) == []


def test_an_extended_resource_without_a_domain_is_refused_not_left_pending() -> None:
    """validateContainerResourceName: a name without '/' must be IsStandardContainerResourceName's."""
    resources = {"requests": {"gpu": "1"}, "limits": {"gpu": "1"}}
    found = _messages(_deployment(container={"resources": resources}))
    assert [m.split(":")[0] for m in found] == [
        "spec.template.spec.containers[app].resources.requests[gpu]",
        "spec.template.spec.containers[app].resources.limits[gpu]",
    ]
    assert all("must be a standard resource for containers" in m for m in found)
