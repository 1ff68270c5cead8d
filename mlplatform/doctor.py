"""``mlplatform doctor [STACK]``: what each path needs on this machine, one line per prerequisite with
what to do, as SkyPilot's ``sky check`` lists each cloud's state.

Two paths: the offline one (``mlplatform plan`` and ``check``: Python 3.11 and the pack's venv) and the
deploy one (``pulumi preview`` / ``pulumi up``: the Pulumi CLI, the cloud's CLI, kubelogin on Azure,
kubectl, docker buildx, credentials for the cloud, a state backend in the UAE). Nothing goes over the
network: credentials are found, not verified, and each tool is asked for its version with a timeout.
Exit 0 when the offline path is ready (with ``--deploy``: the deploy path too), 1 when not, 2 on a bad
STACK.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qs, urlparse

import typer

from components.config import RESIDENCY_REGIONS, ConfigError, PlatformConfig, Residency, parse_stack_config
from components.handle import Cloud
from mlplatform.errors import EXIT_FINDING, InputError, exit_with
from mlplatform.plan import REPO_ROOT, resolve_target
from mlplatform.plan_cmd import StackFileOpt
from mlplatform.stackyaml import load

# A tool that does not answer its version in this long is reported as not answering.
VERSION_TIMEOUT_S = 10.0
STATE_SECTION = 'docs/stacks.md, "State and secrets in-region"'


class Status(StrEnum):
    OK = "ok"
    MISSING = "missing"
    # Present, but what matters cannot be told offline (a storage account's region).
    UNKNOWN = "check"


@dataclass(frozen=True)
class Finding:
    """One prerequisite: its name, its state, and what was found or what to do."""

    what: str
    status: Status
    detail: str


def _version(command: list[str], env: Mapping[str, str]) -> str | None:
    """The first line ``command`` prints, or None when it fails or does not answer in time."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=VERSION_TIMEOUT_S, env=dict(env), check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def _tool(name: str, version: list[str] | None, todo: str, env: Mapping[str, str]) -> Finding:
    """A CLI on PATH, and its version when ``version`` is how to ask for it (None: presence only, for a
    CLI whose start is slow or may look for updates over the network)."""
    path = shutil.which(name, path=env.get("PATH", ""))
    if path is None:
        return Finding(name, Status.MISSING, f"not on PATH: {todo}")
    if version is None:
        return Finding(name, Status.OK, path)
    answer = _version([path, *version], env)
    if answer is None:
        return Finding(name, Status.MISSING, f"{path} {' '.join(version)} failed: {todo}")
    return Finding(name, Status.OK, answer)


def offline(env: Mapping[str, str], python: tuple[int, int, int]) -> list[Finding]:
    """What ``mlplatform plan`` and ``check`` need: Python 3.11 (pyproject.toml requires-python) and the
    policy pack's venv (the first ``check`` builds a missing one with pip)."""
    version = ".".join(map(str, python))
    findings = [
        Finding("Python 3.11", Status.OK, version)
        if python[:2] == (3, 11)
        else Finding("Python 3.11", Status.MISSING, f"this is {version}: make PYTHON=python3.11 setup")
    ]
    pack = REPO_ROOT / "policies" / ".venv" / "bin" / "python"
    findings.append(
        Finding("policy pack venv", Status.OK, str(pack.parent.parent))
        if pack.exists()
        else Finding(
            "policy pack venv", Status.UNKNOWN, "absent: make setup-policy (or the first check builds it)"
        )
    )
    return findings


def _aws_credentials(env: Mapping[str, str], home: Path) -> Finding:
    """Where the AWS CLI and SDKs find credentials (AWS CLI user guide, "Configuration and credential
    file settings" and "Environment variables"): keys or a profile in the environment, a web identity
    token file (CI with OIDC), or the shared credentials and config files."""
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return Finding("AWS credentials", Status.OK, "AWS_ACCESS_KEY_ID in the environment (not verified)")
    for variable in ("AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        if env.get(variable):
            return Finding("AWS credentials", Status.OK, f"{variable} in the environment (not verified)")
    files = [
        Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials"),
        Path(env.get("AWS_CONFIG_FILE") or home / ".aws" / "config"),
    ]
    for file in files:
        if file.is_file():
            found = f"{file} (not verified: aws sts get-caller-identity)"
            return Finding("AWS credentials", Status.OK, found)
    return Finding("AWS credentials", Status.MISSING, "none found: aws configure sso, or aws configure")


def _azure_credentials(env: Mapping[str, str], home: Path) -> Finding:
    """Where the azure-native provider finds credentials: a service principal or OIDC/managed identity in
    the ARM_* variables, or the Azure CLI's login (its profile in AZURE_CONFIG_DIR, default ~/.azure),
    which `pulumi up` also needs for `az acr` (README.md "Prerequisites")."""
    if env.get("ARM_USE_MSI"):
        return Finding("Azure credentials", Status.OK, "ARM_USE_MSI: the managed identity (not verified)")
    for variable in ("ARM_CLIENT_SECRET", "ARM_USE_OIDC"):
        if env.get("ARM_CLIENT_ID") and env.get(variable):
            return Finding("Azure credentials", Status.OK, f"ARM_CLIENT_ID and {variable} (not verified)")
    profile = Path(env.get("AZURE_CONFIG_DIR") or home / ".azure") / "azureProfile.json"
    try:
        subscriptions = json.loads(profile.read_text(encoding="utf-8-sig")).get("subscriptions") or []
    except (OSError, ValueError, AttributeError):
        subscriptions = []
    if subscriptions:
        found = f"az login, {len(subscriptions)} subscription(s) (not verified)"
        return Finding("Azure credentials", Status.OK, found)
    todo = "none found: az login, then az account set -s <subscription>"
    return Finding("Azure credentials", Status.MISSING, todo)


def backend_url(env: Mapping[str, str], home: Path) -> str | None:
    """The state backend `pulumi` would use, as it picks it (pulumi/pulumi
    sdk/go/common/workspace/creds.go, GetCurrentCloudURL): PULUMI_BACKEND_URL, then the project's
    ``backend.url`` in Pulumi.yaml, then ``current`` in credentials.json (PULUMI_CREDENTIALS_PATH, else
    PULUMI_HOME, else ~/.pulumi) that `pulumi login` writes."""
    if env.get("PULUMI_BACKEND_URL"):
        return env["PULUMI_BACKEND_URL"]
    project = load(REPO_ROOT / "Pulumi.yaml")
    backend = project.get("backend") if isinstance(project, dict) else None
    if isinstance(backend, dict) and backend.get("url"):
        return str(backend["url"])
    folder = env.get("PULUMI_CREDENTIALS_PATH") or env.get("PULUMI_HOME") or str(home / ".pulumi")
    try:
        current = json.loads((Path(folder) / "credentials.json").read_text()).get("current")
    except (OSError, ValueError, AttributeError):
        return None
    return str(current) if current else None


def state_backend(url: str | None, regions: tuple[str, ...]) -> Finding:
    """Whether the state stays in ``regions``: an S3 backend says its region in the URL; a storage
    account's region cannot be read offline; the hosted backend is outside the UAE."""
    what, allowed = "state backend", ", ".join(regions)
    if url is None:
        return Finding(what, Status.MISSING, f"not logged in: pulumi login ({STATE_SECTION})")
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        region = (parse_qs(parsed.query).get("region") or [""])[0]
        if region in regions:
            return Finding(what, Status.OK, f"{url} (region {region})")
        where = f"in {region}" if region else "with no ?region= in its URL"
        return Finding(what, Status.MISSING, f"{url} is {where}; keep state in {allowed} ({STATE_SECTION})")
    if parsed.scheme == "azblob":
        account = (parse_qs(parsed.query).get("storage_account") or ["<account>"])[0]
        todo = f"az storage account show -n {account} --query location: one of {allowed}"
        return Finding(what, Status.UNKNOWN, f"{url}: {todo}")
    if parsed.scheme in {"http", "https"}:
        todo = f"a hosted backend keeps state outside the UAE; log in to a self-managed one ({STATE_SECTION})"
        return Finding(what, Status.MISSING, f"{url}: {todo}")
    return Finding(what, Status.UNKNOWN, f"{url}: keep it in {allowed} ({STATE_SECTION})")


def deploy(
    clouds: list[Cloud], regions: tuple[str, ...], env: Mapping[str, str], home: Path
) -> Iterator[Finding]:
    """What ``pulumi preview`` and ``pulumi up`` need for stacks of ``clouds`` (README.md
    "Prerequisites")."""
    yield _tool("pulumi", ["version"], "install the Pulumi CLI (www.pulumi.com/docs/install)", env)
    if Cloud.AWS in clouds:
        yield _tool("aws", ["--version"], "install AWS CLI v2: the kubeconfig runs aws eks get-token", env)
        yield _aws_credentials(env, home)
    if Cloud.AZURE in clouds:
        yield _tool("az", None, "install the Azure CLI: pulumi up runs az acr commands", env)
        kubelogin = "install kubelogin (az aks install-cli): the stack's AKS has no local accounts"
        yield _tool("kubelogin", ["--version"], kubelogin, env)
        yield _azure_credentials(env, home)
    yield _tool("kubectl", ["version", "--client"], "install kubectl to look at the cluster", env)
    docker = _tool("docker", ["buildx", "version"], "phase two builds the images with docker buildx", env)
    yield Finding("docker buildx", docker.status, docker.detail)
    yield state_backend(backend_url(env, home), regions)


def _stack_config(stack: str | None, stack_file: Path | None) -> PlatformConfig:
    try:
        target = resolve_target(stack, stack_file)
        document = load(target.stack_file)
        raw = document.get("config") if isinstance(document, dict) else None
        return parse_stack_config(raw if isinstance(raw, dict) else {}, target.stack_file.name)
    except (InputError, ConfigError) as exc:
        exit_with(exc.problems)


def _print(title: str, findings: list[Finding]) -> None:
    print(title)
    width = max(len(finding.what) for finding in findings)
    for finding in findings:
        print(f"  {finding.status.value:<8}{finding.what:<{width}}  {finding.detail}")


def doctor(
    stack: Annotated[
        str | None, typer.Argument(help="A stack: check its cloud only, and its region.", show_default=False)
    ] = None,
    deploy_path: Annotated[
        bool, typer.Option("--deploy", help="Exit 1 unless the deploy path is ready too.")
    ] = False,
    stack_file: StackFileOpt = None,
) -> None:
    """Check what plan, check and pulumi up need on this machine; one line each with what to do."""
    env, home = os.environ, Path.home()
    if stack is None and stack_file is None:
        clouds, residency, name = list(Cloud), Residency.UAE, "AWS and Azure stacks"
    else:
        config = _stack_config(stack, stack_file)
        clouds, residency = [config.cloud], config.residency
        name = f"{config.stack_name} ({config.cloud}, {config.tier})"
    regions = tuple(region for cloud in clouds for region in RESIDENCY_REGIONS[residency][cloud])
    python = sys.version_info
    local = offline(env, (python.major, python.minor, python.micro))
    _print("offline: mlplatform plan, check", local)
    remote = list(deploy(clouds, regions, env, home))
    _print(f"deploy: pulumi preview, pulumi up, for {name}", remote)
    ready = all(finding.status is not Status.MISSING for finding in local)
    deployable = all(finding.status is not Status.MISSING for finding in remote)
    print("offline path ready" if ready else "offline path not ready", end="; ")
    print("deploy path ready" if deployable else "deploy path not ready (see above)")
    if not ready or (deploy_path and not deployable):
        raise typer.Exit(EXIT_FINDING)
