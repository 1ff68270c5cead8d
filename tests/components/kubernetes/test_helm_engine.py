"""Helm's engine runs in a process of its own (components/kubernetes/helm_engine.py): a planning process
never loads Helm's Go runtime, and a child that died is started again for the next request."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from components.kubernetes import helm_engine
from components.kubernetes.charts import cache_dir

CHART = cache_dir() / "metrics-server-3.13.1.tgz"


def test_rendering_leaves_go_out_of_this_process() -> None:
    manifests, crds = helm_engine.render(CHART, {}, "metrics", "kube-system")
    assert any("kind: Deployment" in text for text in manifests.values()) and crds == []
    assert helm_engine.metadata(CHART)["version"] == "3.13.1"
    assert "helm_python" not in sys.modules


def test_helms_refusal_is_one_error(tmp_path: Path) -> None:
    """A package Helm cannot load: its error, raised in the caller; the engine goes on serving."""
    broken = tmp_path / "broken-1.0.0.tgz"
    broken.write_bytes(b"not a gzipped tar archive")
    with pytest.raises(helm_engine.HelmError) as refused:
        helm_engine.render(broken, {}, "broken", "default")
    assert str(refused.value).strip()
    with pytest.raises(helm_engine.HelmError):
        helm_engine.metadata(broken)
    assert helm_engine.metadata(CHART)["name"] == "metrics-server"


def test_an_engine_that_died_is_started_again() -> None:
    helm_engine.metadata(CHART)
    engine = helm_engine._ENGINE
    process = engine._process
    assert process is not None
    process.kill()
    process.wait()
    assert helm_engine.metadata(CHART)["name"] == "metrics-server"
    assert engine._process is not None and engine._process.pid != process.pid
