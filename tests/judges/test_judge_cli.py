"""``mlplatform judge PATH...`` on Kubernetes YAML written outside the project (a Redis StatefulSet, a
CronJob, a Kueue queue of another team's): exit 0 when the cluster would take it, 1 with one line per
mandatory finding naming object, field and rule, 2 on a path or document that is not Kubernetes YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from mlplatform.cli import app

_RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "runAsUser": 999,
    "seccompProfile": {"type": "RuntimeDefault"},
    "capabilities": {"drop": ["ALL"]},
}


def _shop(
    selector_app: str = "cart", port_name: str = "redis", secret: str = "cart-password"
) -> list[dict[str, Any]]:
    container = {
        "name": "redis",
        "image": "redis:7.4",
        "ports": [{"name": port_name, "containerPort": 6379}],
        "envFrom": [{"secretRef": {"name": secret}}],
        "securityContext": _RESTRICTED,
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "shop", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
        },
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cart-password", "namespace": "shop"}},
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "cart", "namespace": "shop"},
            "spec": {
                "serviceName": "cart",
                "selector": {"matchLabels": {"app": selector_app}},
                "template": {"metadata": {"labels": {"app": "cart"}}, "spec": {"containers": [container]}},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "cart", "namespace": "shop"},
            "spec": {"selector": {"app": "cart"}, "ports": [{"port": 6379, "targetPort": "redis"}]},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "batch", "namespace": "shop"},
            "spec": {"clusterQueue": "shop-batch"},
        },
    ]


def _write(directory: Path, objects: list[dict[str, Any]]) -> Path:
    directory.mkdir()
    (directory / "namespace.yaml").write_text(yaml.safe_dump(objects[0]))
    (directory / "apps").mkdir()
    (directory / "apps" / "cart.yml").write_text(yaml.safe_dump_all(objects[1:4]))
    (directory / "queue.json").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects[4:]})
    )
    return directory


def _judge(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["judge", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def test_manifests_the_cluster_takes_exit_0_and_a_dangling_queue_exits_1(tmp_path: Path) -> None:
    directory = _write(tmp_path / "shop", _shop())
    code, stdout, _ = _judge(
        str(directory / "namespace.yaml"), str(directory / "apps"), "--skip", "exit-codes"
    )
    assert code == 0, stdout
    from judges import JUDGES

    assert f"4 objects, {len(JUDGES) - 1} judges: 0 mandatory" in stdout  # all but the one skipped
    # The LocalQueue's ClusterQueue is in none of the files (Kueue: the LocalQueue is inactive).
    code, stdout, _ = _judge(str(directory), "--skip", "exit-codes")
    mandatory = [line for line in stdout.splitlines() if line.startswith("mandatory")]
    assert code == 1 and mandatory == [
        "mandatory kueue-wiring: LocalQueue shop/batch: spec.clusterQueue 'shop-batch': no ClusterQueue of "
        "that name; the LocalQueue is inactive and its Jobs are never admitted"
    ]


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (
            {"selector_app": "kart"},
            "mandatory api-validation: StatefulSet shop/cart: spec.template.metadata.labels: `selector` does "
            "not match template `labels` (ValidateStatefulSetSpec)",
        ),
        (
            {"port_name": "redis-primary-port"},
            "mandatory api-validation: StatefulSet shop/cart: spec.template.spec.containers[redis]"
            ".ports[redis-primary-port].name: must be no more than 15 characters (IANA_SVC_NAME) "
            "(validateContainerPorts)",
        ),
        (
            {"secret": "cart-pasword"},
            "mandatory dangling-reference: StatefulSet shop/cart: containers[redis].envFrom.secretRef.name: "
            "Secret shop/cart-pasword is not in the plan and not made elsewhere",
        ),
        (
            {"port_name": "primary"},
            "mandatory service-without-endpoints: Service shop/cart: spec.ports[6379].targetPort 'redis': no "
            "container of StatefulSet shop/cart declares a TCP port of that name",
        ),
    ],
)
def test_a_defect_in_foreign_manifests_is_one_line_naming_object_field_and_rule(
    tmp_path: Path, edit: dict[str, str], line: str
) -> None:
    directory = _write(tmp_path / "shop", _shop(**edit))
    code, stdout, _ = _judge(str(directory), "--skip", "exit-codes")
    assert code == 1 and any(out.startswith(line) for out in stdout.splitlines()), stdout


def test_input_that_is_not_kubernetes_yaml_exits_2_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    not_object = tmp_path / "values.yaml"
    not_object.write_text("replicas: 3\n")
    code, _, stderr = _judge(str(bad), str(not_object), str(tmp_path / "missing"), "--skip", "nope")
    assert code == 2
    assert stderr.splitlines()[0].startswith("error: --skip nope: no such judge")
    code, _, stderr = _judge(str(bad), str(not_object), str(tmp_path / "missing"))
    assert code == 2
    assert [line.split(":")[0] for line in stderr.splitlines()] == ["error"] * 3, stderr
    assert f"{bad}: not readable as YAML" in stderr
    assert f"{not_object}: document 1 is not a Kubernetes object" in stderr
    assert f"{tmp_path / 'missing'}: no such file or directory" in stderr
