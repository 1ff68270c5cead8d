"""The api-validation judge's metadata rules, each as the API server applies it (Kubernetes 1.35,
``staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go``): ``ValidateAnnotations`` checks a
key lower-cased ("case doesn't matter"), ``ValidateLabels`` as written."""

from __future__ import annotations

from typing import Any

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
