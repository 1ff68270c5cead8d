"""The workload images' entry points import with what each image installs, and nothing more.

The training image installs the base dependencies and the ``train`` extra, the inference image the base
dependencies and the ``serve`` extra; each copies in only the modules its COPY lines name (read here
with ``components.images.copy_sources``: each import runs from a tree of exactly those files). The dev
venv holds every extra, so a module that imports a package its image lacks (``pulumi`` through
``components.handle``, say) passes every other test here and dies in the container at ``python -m``.
Each entry module is imported in a fresh interpreter in which the distributions outside the image's
closure cannot be imported.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from components.images import INFERENCE_DOCKERFILE, TRAINING_DOCKERFILE, copy_sources

REPO = Path(__file__).resolve().parents[2]

BLOCKER = """
import importlib.abc, json, sys
BLOCKED = set(json.loads(sys.argv[1]))
# The dev venv's editable install of this project would find any module of the repository, copied or not.
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r} (not installed in this image)")
sys.meta_path.insert(0, Block())
for module in json.loads(sys.argv[2]):
    __import__(module)
"""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(extra: str) -> set[str]:
    """Canonical names of ml-platform's base dependencies plus ``extra``, and all they require."""
    seen: set[str] = set()
    todo = [(req, extra) for req in metadata.requires("ml-platform") or ()]
    while todo:
        text, wanted = todo.pop()
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": wanted}):
            continue
        name = _canonical(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(req.name) or ()
        except metadata.PackageNotFoundError:
            continue
        todo += [(sub, extra_) for sub in requires for extra_ in ({""} | set(req.extras))]
    return seen


def _blocked(extra: str, own: set[str]) -> list[str]:
    """Top-level modules of installed distributions the image does not install; ``own`` are ours it lacks."""
    allowed = _closure(extra)
    modules = {
        module
        for module, dists in metadata.packages_distributions().items()
        if not any(_canonical(dist) in allowed or _canonical(dist) == "ml-platform" for dist in dists)
    }
    return sorted(modules | own)


def _import(modules: list[str], blocked: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, json.dumps(blocked), json.dumps(modules)],
        capture_output=True,
        text=True,
        cwd=path,
        env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )


def test_the_closure_reads_the_extras() -> None:
    """The judge itself: torch is in the training image, not in the serving one; pulumi in neither."""
    train, serve = _closure("train"), _closure("serve")
    assert "torch" in train and "torch" not in serve
    assert "onnxruntime" in serve and "pydantic" in serve
    assert "pulumi" not in train | serve


@pytest.mark.parametrize(
    "modules",
    [["workloads.training.__main__", "workloads.training.train"], ["workloads.fabric_test"]],
)
def test_training_image_entry_points_import_with_the_train_extra(modules: list[str], tmp_path: Path) -> None:
    done = _import(
        modules,
        _blocked("train", {"judges", "mlplatform"}),
        _image_tree(TRAINING_DOCKERFILE, tmp_path),
    )
    assert done.returncode == 0, done.stderr[-1500:]


def _image_tree(dockerfile: Path, directory: Path) -> Path:
    """A tree of exactly what the Dockerfile's COPY lines take from the repository."""
    for source in copy_sources(dockerfile):
        if source.endswith("/"):
            shutil.copytree(REPO / source, directory / source, dirs_exist_ok=True)
        else:
            (directory / source).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / source, directory / source)
    return directory


def test_inference_image_entry_point_imports_from_the_copied_files(tmp_path: Path) -> None:
    _image_tree(INFERENCE_DOCKERFILE, tmp_path)
    done = _import(
        ["workloads.inference.__main__"], _blocked("serve", {"components", "mlplatform"}), tmp_path
    )
    assert done.returncode == 0, done.stderr[-1500:]


def test_drift_monitor_job_entry_point_imports_from_the_inference_images_files(tmp_path: Path) -> None:
    """The drift monitor's CronJob runs ``python -m workloads.delivery.monitor`` in the inference image
    (workloads/inference/k8s.py ``MONITOR_ENTRY``): every module it reaches is copied, with the serve
    extra alone."""
    _image_tree(INFERENCE_DOCKERFILE, tmp_path)
    done = _import(["workloads.delivery.monitor"], _blocked("serve", {"components", "mlplatform"}), tmp_path)
    assert done.returncode == 0, done.stderr[-1500:]


def test_a_module_outside_the_image_is_caught() -> None:
    """Planted defect: an entry point that imports a cloud SDK fails as it would in the container."""
    done = _import(["components.aws.cluster"], _blocked("train", set()), REPO)
    assert done.returncode != 0
    assert "(not installed in this image)" in done.stderr


def test_rollout_job_entry_point_imports_with_the_serve_extra() -> None:
    """The rollout Job runs ``python -m workloads.delivery`` in the inference image: the serve extra, no
    mlplatform (typer's commands), no MLflow, no pulumi. The image must also copy workloads/delivery/ and
    workloads/registry/ (client, rollout, operations) for it; this checks the dependencies."""
    done = _import(["workloads.delivery.launch"], _blocked("serve", {"components", "mlplatform"}), REPO)
    assert done.returncode == 0, done.stderr[-1500:]
