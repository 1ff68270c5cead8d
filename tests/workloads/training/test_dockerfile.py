"""The training image's Dockerfile passes hadolint and keeps the properties the Job relies on."""

from __future__ import annotations

from pathlib import Path

from tests.linters import hadolint, needs_hadolint
from workloads.fabric import IMAGE_TARGETS
from workloads.training.efa_installer import RELEASES

DOCKERFILE = Path(__file__).resolve().parents[3] / "workloads" / "training" / "Dockerfile"


@needs_hadolint
def test_hadolint_is_clean() -> None:
    done = hadolint(DOCKERFILE)
    assert done.returncode == 0, done.stdout + done.stderr


def _stage(lines: list[str], start: str) -> list[str]:
    """The instruction lines of the stage whose FROM line is ``start``, up to the next FROM."""
    begin = lines.index(start)
    rest = lines[begin + 1 :]
    end = next((i for i, line in enumerate(rest) if line.startswith("FROM ")), len(rest))
    return [line for line in lines[begin : begin + 1 + end] if line and not line.startswith("#")]


def test_multi_stage_non_root_pinned_and_installs_the_workloads_extra() -> None:
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    froms = [line for line in lines if line.startswith("FROM ")]
    assert froms[0].endswith(" AS build"), "build tools stay in the build stage"
    assert "ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm" in lines
    # The base dependencies and the train extra, resolved into the generated requirements file, not the
    # project itself (whose install would copy every package into the image, review aws.md N2) nor the
    # two manifests whole (review of issue 38, B1: tests/components/test_image_requirements.py).
    assert "COPY workloads/training/requirements.txt ./" in lines
    assert any("pip install --no-cache-dir -r requirements.txt" in line for line in lines)
    assert not any(line.startswith("COPY ") and "pyproject.toml" in line for line in lines)
    cpu = _stage(lines, "FROM ${PYTHON_IMAGE} AS cpu")
    assert "USER 10001:10001" in cpu
    assert not any("pip install" in line for line in lines[lines.index(froms[1]) :])
    # `docker build` without --target builds the last stage: it stays the CPU image.
    assert froms[-1] == "FROM cpu"


def test_the_infiniband_target_adds_pinned_rdma_userspace_and_drops_root_again() -> None:
    """NCCL loads libibverbs and the mlx5 provider at run time (else it silently uses sockets); the
    versions are Debian bookworm's (deb.debian.org bookworm/main), the base image's release."""
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    stage = _stage(lines, "FROM cpu AS infiniband")
    install = next(line for line in stage if "apt-get install" in line)
    assert "libibverbs1=44.0-2" in install and "ibverbs-providers=44.0-2" in install
    assert stage[-1] == "USER 10001:10001"


def test_the_efa_target_installs_a_cited_and_verified_efa_installer() -> None:
    """Cluster review A5: the EFA target carries libfabric with its efa provider and the aws-ofi-nccl
    plugin, from an EFA installer release whose components the EC2 user guide's release notes list,
    fetched only after its signature checks out against AWS's key (efa_installer.py)."""
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    stage = _stage(lines, "FROM cpu AS efa")
    version = next(line for line in stage if line.startswith("ARG EFA_INSTALLER_VERSION=")).split("=", 1)[1]
    libfabric, ofi_nccl = RELEASES[version]
    assert (version, libfabric, ofi_nccl) == ("1.51.0", "2.7.0amzn2.0", "1.22.0")
    fetch = stage.index('RUN python -m workloads.training.efa_installer "${EFA_INSTALLER_VERSION}" /tmp/efa')
    install = next(i for i, line in enumerate(stage) if "efa_installer.sh" in line)
    assert fetch < install, "the installer runs only after it was verified"
    # As awsome-distributed-training's and the DLC's container builds run it: no kernel module, no limits.
    assert "-y --skip-kmod --skip-limit-conf --no-verify" in stage[install]
    env = next(line for line in stage if line.startswith("ENV LD_LIBRARY_PATH="))
    assert "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu" in env and "/opt/amazon/efa/lib" in env
    assert stage[-1] == "USER 10001:10001"


def test_every_fabric_has_a_target() -> None:
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    targets = {line.rsplit(" AS ", 1)[1] for line in lines if line.startswith("FROM ") and " AS " in line}
    assert {t.value for t in IMAGE_TARGETS.values()} <= targets
