"""Judge a plan with a real Pulumi policy pack over the Analyzer gRPC protocol, as the engine does.

The pack is started the way the CLI's shims start it, from the pack directory: a Python pack with the
python of the virtualenv named in ``PulumiPolicy.yaml``, ``-u -m pulumi.policy <engine address> .``, that
virtualenv first on ``PATH``; a Node pack with ``node`` and its own ``@pulumi/pulumi/cmd/run-policy-pack``.
The first line it prints is its port. Then, as the
engine: ``Handshake`` (Python packs answer UNIMPLEMENTED, which the engine accepts), ``GetAnalyzerInfo``,
``ConfigureStack``, ``Configure`` with every policy's reconciled settings, ``Analyze`` per resource
with its provider, ``AnalyzeStack`` over the whole graph (parents, dependencies, providers). SIGINT
stops the pack (its server stops on KeyboardInterrupt).

One pack process judges any number of plans: each ``judge`` call reconfigures it for that stack.

Helm releases: a plan holds, after the program's resources, the objects each release's chart renders
(mlplatform.rendering). The pack sees each as the engine would show it once the release is installed:
a custom resource typed ``kubernetes:<group/version>:<Kind>``, parent the release's URN, the release's
provider, properties the object itself with Helm's ``meta.helm.sh/release-name`` / ``release-namespace``
annotations (CRDs from ``crds/`` folders without them, as Helm creates them). They go through
``Analyze`` and ``AnalyzeStack`` like the program's own objects, so every Kubernetes policy judges them;
a release with no such object in the stack was not rendered, which ``k8s-unrendered-content`` reports.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import grpc
import yaml
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2 as proto
from pulumi.runtime.proto.analyzer_pb2_grpc import AnalyzerStub

from mlplatform.analyzer_config import PolicySchema, PolicySettings
from mlplatform.errors import InputError
from mlplatform.mirror import MirroredImage

# Offline there is no engine to dial; the pack only uses the address to send log lines, which it prints
# to stderr instead when no engine is configured.
ENGINE_ADDRESS = "127.0.0.1:0"
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
_MAX_MESSAGE = 400 * 1024 * 1024  # the pack's own limit (pulumi_policy): plans of large stacks fit
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    ("grpc.max_send_message_length", _MAX_MESSAGE),
]
_STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    description: str
    enforcement: str
    severity: str
    kind: str
    schema: PolicySchema


@dataclass(frozen=True)
class PackInfo:
    name: str
    version: str
    description: str
    path: Path
    policies: tuple[PolicyInfo, ...]
    # The pack's own config (`new PolicyPack(name, args, initialConfig)`), in the config file's format.
    initial_config: Mapping[str, Any] = field(default_factory=dict)

    def schemas(self) -> dict[str, PolicySchema]:
        return {policy.name: policy.schema for policy in self.policies}


@dataclass(frozen=True)
class Violation:
    policy: str
    enforcement: str
    severity: str
    urn: str
    type: str
    name: str
    message: str

    @property
    def mandatory(self) -> bool:
        return self.enforcement == "mandatory"


@dataclass(frozen=True)
class StackReport:
    """One stack's judgement: what was planned and what the pack found."""

    label: str
    project: str
    stack: str
    stack_file: Path | None
    resources: int
    violations: tuple[Violation, ...]
    # The URN of each object a Helm chart renders → that chart and version ("gpu-operator v26.7.0").
    charts: Mapping[str, str] = field(default_factory=dict)
    # sha256 of the plan's canonical JSON (mlplatform.evidence.plan_digest).
    plan_digest: str = ""
    # The packages of the planned resources' types ("aws", "azure-native", "kubernetes").
    providers: frozenset[str] = frozenset()
    # The planned resources' types, and whether a cluster is audited (tagged tier enterprise or
    # environment prod, the audit policies' scope): what the control matrix's applicability reads.
    types: frozenset[str] = frozenset()
    audited: bool = False
    # Exemptions the plan documents: (URN, annotation, its written reason) for each
    # ``policy.ml-platform.io/*-reason`` annotation on a Kubernetes object.
    exemptions: tuple[tuple[str, str, str], ...] = ()
    # The third-party images its objects name and where each goes in the stack's registry
    # (mlplatform.mirror), for the evidence.
    mirrored: tuple[MirroredImage, ...] = ()


class PolicyPackSession:
    """A running policy pack and a gRPC client to it."""

    def __init__(self, pack_dir: Path) -> None:
        self.pack_dir = pack_dir.resolve()
        self._project = _read_pack_project(self.pack_dir)
        self._stderr: IO[bytes] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._channel: grpc.Channel | None = None
        self._stub: AnalyzerStub | None = None
        self._info: PackInfo | None = None
        self.address: str | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> None:
        """Launch the pack; connecting waits for its port, so planning can overlap its start-up."""
        command, env = self._node() if self._runtime == "nodejs" else self._python()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the pack; closed in close())
        self._process = subprocess.Popen(
            command,
            cwd=self.pack_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )

    @property
    def info(self) -> PackInfo:
        if self._info is None:
            self._info = self._read_info()
        return self._info

    def judge(self, plan: Mapping[str, Any], settings: Mapping[str, PolicySettings]) -> list[Violation]:
        """Every diagnostic the pack reports for ``plan`` (the ``mlplatform plan --json`` format)."""
        stub = self._connect()
        graph = _Graph(plan)
        try:
            stub.ConfigureStack(
                proto.AnalyzerStackConfigureRequest(stack=graph.stack, project=graph.project, dry_run=True)
            )
            stub.Configure(_configure_request(settings))
            found: list[Violation] = []
            for resource in graph.resources:
                response = stub.Analyze(graph.analyze_request(resource))
                found += [graph.violation(d, resource["urn"]) for d in response.diagnostics]
            response = stub.AnalyzeStack(proto.AnalyzeStackRequest(resources=graph.stack_resources()))
            found += [graph.violation(d, graph.root_urn) for d in response.diagnostics]
        except grpc.RpcError as error:
            raise InputError(
                [f"policy pack {self.pack_dir}: {_rpc_message(error)}", *self._stderr_lines()]
            ) from None
        return found

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)
            try:
                self._process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process is not None and self._process.stdout is not None:
            self._process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
        self._process = self._channel = self._stub = None

    @property
    def _runtime(self) -> str:
        runtime = self._project["runtime"]
        return str(runtime.get("name") if isinstance(runtime, dict) else runtime)

    @property
    def _options(self) -> dict[str, Any]:
        runtime = self._project["runtime"]
        return dict(runtime.get("options") or {}) if isinstance(runtime, dict) else {}

    def _python(self) -> tuple[list[str], dict[str, str]]:
        """The CLI's ``pulumi-analyzer-policy-python``: the pack's virtualenv python, first on ``PATH``."""
        virtualenv = self._options.get("virtualenv")
        if not virtualenv:
            raise InputError([f"{self.pack_dir}/PulumiPolicy.yaml: runtime.options.virtualenv is not set"])
        python = (self.pack_dir / str(virtualenv) / "bin" / "python").absolute()
        if not python.exists():
            self._install(python.parent.parent)
        env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        for leaked in ("PYTHONHOME", "PYTHONPATH"):  # the pack's environment is its virtualenv alone
            env.pop(leaked, None)
        return [str(python), "-u", "-m", "pulumi.policy", ENGINE_ADDRESS, "."], env

    def _install(self, venv: Path) -> None:
        """Create the pack's virtualenv from its ``requirements.txt``, as ``pulumi preview --policy-pack``
        does for a local pack (pulumi ``installPolicyPackDependencies``: the Python language host's
        InstallDependencies). A failed install leaves no virtualenv behind, so the next run tries again."""
        requirements = self.pack_dir / "requirements.txt"
        if not requirements.is_file():
            raise InputError(
                [f"{venv}: the policy pack's virtualenv is missing and {requirements} does not exist"]
            )
        print(f"installing the policy pack's dependencies into {venv} (once)", file=sys.stderr, flush=True)
        steps = (
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r", str(requirements)],
        )
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise InputError([f"{venv}: installing {requirements.name} failed: {last}"])

    def _node(self) -> tuple[list[str], dict[str, str]]:
        """The CLI's ``pulumi-analyzer-policy`` (sdk/nodejs/dist): node runs the ``run-policy-pack`` module
        of the pack's own ``@pulumi/pulumi``, from the pack directory, with the engine address, ``.``
        and each runtime option as ``-key=value`` (pkg/resource/plugin/analyzer_plugin.go)."""
        node = shutil.which("node")
        if node is None:
            raise InputError([f"{self.pack_dir}: a nodejs policy pack needs node, which is not on PATH"])
        runner = self.pack_dir / "node_modules" / "@pulumi" / "pulumi" / "cmd" / "run-policy-pack"
        if not runner.is_dir():
            raise InputError(
                [f"{self.pack_dir}: the pack's dependencies are not installed; run `npm ci` there"]
            )
        options = [f"-{key}={value}" for key, value in self._options.items() if f"{value}" != ""]
        return [node, str(runner), ENGINE_ADDRESS, ".", *options], dict(os.environ)

    def _connect(self) -> AnalyzerStub:
        if self._stub is None:
            self.address = f"127.0.0.1:{self._read_port()}"
            self._channel = grpc.insecure_channel(self.address, options=_CHANNEL_OPTIONS)
            grpc.channel_ready_future(self._channel).result(timeout=STARTUP_TIMEOUT_S)
            self._stub = AnalyzerStub(self._channel)
            self._handshake(self._stub)
        return self._stub

    def _read_port(self) -> int:
        if self._process is None or self._process.stdout is None:
            self.start()
        assert self._process is not None and self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], STARTUP_TIMEOUT_S)
        line = self._process.stdout.readline().decode(errors="replace").strip() if ready else ""
        if not line.isdigit():
            self._process.kill()
            self._process.wait()
            reason = f"printed {line!r}" if line else "printed no port"
            raise InputError([f"policy pack {self.pack_dir} did not start ({reason})", *self._stderr_lines()])
        return int(line)

    def _handshake(self, stub: AnalyzerStub) -> None:
        directory = str(self.pack_dir)
        request = proto.AnalyzerHandshakeRequest(
            engine_address=ENGINE_ADDRESS, root_directory=directory, program_directory=directory
        )
        try:
            stub.Handshake(request)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise InputError(
                    [f"policy pack {self.pack_dir}: handshake failed: {_rpc_message(error)}"]
                ) from None

    def _read_info(self) -> PackInfo:
        try:
            info = self._connect().GetAnalyzerInfo(empty_pb2.Empty())
        except grpc.RpcError as error:
            raise InputError(
                [f"policy pack {self.pack_dir}: {_rpc_message(error)}", *self._stderr_lines()]
            ) from None
        # As the CLI: the version in PulumiPolicy.yaml wins over the one the pack reports.
        version = str(self._project.get("version") or info.version)
        return PackInfo(
            name=info.name,
            version=version,
            description=info.description or str(self._project.get("description", "")),
            path=self.pack_dir,
            policies=tuple(_policy_info(policy) for policy in info.policies),
            initial_config={name: _config_entry(config) for name, config in info.initialConfig.items()},
        )

    def _stderr_lines(self) -> list[str]:
        if self._stderr is None:
            return []
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return [f"  {line}" for line in lines[-20:]]


def _read_pack_project(pack_dir: Path) -> dict[str, Any]:
    """``PulumiPolicy.yaml``: a Python pack, its virtualenv and its version."""
    path = pack_dir / "PulumiPolicy.yaml"
    try:
        project = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError:
        raise InputError([f"{pack_dir}: not a policy pack (no readable PulumiPolicy.yaml)"]) from None
    except yaml.YAMLError as error:
        raise InputError([f"{path}: not valid YAML ({error})"]) from None
    if not isinstance(project, dict):
        raise InputError([f"{path}: expected a mapping"])
    runtime = project.get("runtime")
    name = runtime.get("name") if isinstance(runtime, dict) else runtime
    if name not in ("python", "nodejs"):
        raise InputError([f"{path}: runtime is {name!r}; python and nodejs policy packs run offline"])
    return dict(project)


def _level(value: proto.EnforcementLevel.ValueType) -> str:
    return str(proto.EnforcementLevel.Name(value)).lower()


def _severity(value: proto.PolicySeverity.ValueType) -> str:
    name = str(proto.PolicySeverity.Name(value)).removeprefix("POLICY_SEVERITY_").lower()
    return "" if name == "unspecified" else name


def _config_entry(config: proto.PolicyConfig) -> dict[str, Any]:
    """An initial-config entry in the config file's format. Like the engine (convertEnforcementLevel of
    the wire value), an entry that sets only properties reads as advisory: the enum's zero value."""
    return {
        "enforcementLevel": _level(config.enforcementLevel),
        **json_format.MessageToDict(config.properties),
    }


def _policy_info(policy: proto.PolicyInfo) -> PolicyInfo:
    kind = {proto.POLICY_TYPE_RESOURCE: "resource", proto.POLICY_TYPE_STACK: "stack"}.get(
        policy.policy_type, ""
    )
    properties = json_format.MessageToDict(policy.configSchema.properties)
    return PolicyInfo(
        name=policy.name,
        description=policy.description,
        enforcement=_level(policy.enforcementLevel),
        severity=_severity(policy.severity),
        kind=kind,
        schema=PolicySchema(_level(policy.enforcementLevel), properties, tuple(policy.configSchema.required)),
    )


def _configure_request(settings: Mapping[str, PolicySettings]) -> proto.ConfigureAnalyzerRequest:
    return proto.ConfigureAnalyzerRequest(
        policyConfig={
            name: proto.PolicyConfig(
                enforcementLevel=proto.EnforcementLevel.Value(config.enforcement.upper()),
                properties=_struct(config.properties),
            )
            for name, config in settings.items()
        }
    )


def _struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(values)
    return message


def _rpc_message(error: grpc.RpcError) -> str:
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    return (details or str(error)).strip().replace("\n", " ")


class _Graph:
    """A plan's resources as Analyzer requests, and diagnostics back as violations."""

    def __init__(self, plan: Mapping[str, Any]) -> None:
        self.project = str(plan.get("project", ""))
        self.stack = str(plan.get("stack", ""))
        self.resources: list[Mapping[str, Any]] = list(plan.get("resources", []))
        self._by_urn = {resource["urn"]: resource for resource in self.resources}
        roots = [r["urn"] for r in self.resources if r["type"] == _STACK_TYPE]
        self.root_urn = (
            roots[0]
            if roots
            else f"urn:pulumi:{self.stack}::{self.project}::{_STACK_TYPE}::{self.project}-{self.stack}"
        )

    def provider(self, resource: Mapping[str, Any]) -> proto.AnalyzerProviderResource | None:
        """The resource's provider, found by the reference ``<provider urn>::<provider id>``."""
        reference = resource.get("provider")
        found = self._by_urn.get(reference.rsplit("::", 1)[0]) if reference else None
        if found is None:
            return None
        return proto.AnalyzerProviderResource(
            type=found["type"],
            name=found["name"],
            urn=found["urn"],
            properties=_struct(found.get("inputs", {})),
        )

    def _described(self, resource: Mapping[str, Any]) -> dict[str, Any]:
        """The fields an Analyze request and a stack resource share."""
        return {
            "type": resource["type"],
            "name": resource["name"],
            "urn": resource["urn"],
            "properties": _struct(resource.get("inputs", {})),
            "options": proto.AnalyzerResourceOptions(
                parent=resource.get("parent") or "",
                protect=bool(resource.get("protect")),
                ignoreChanges=list(resource.get("ignoreChanges", [])),
            ),
            "provider": self.provider(resource),
        }

    def analyze_request(self, resource: Mapping[str, Any]) -> proto.AnalyzeRequest:
        return proto.AnalyzeRequest(**self._described(resource))

    def stack_resources(self) -> list[proto.AnalyzerResource]:
        return [
            proto.AnalyzerResource(
                **self._described(resource),
                parent=resource.get("parent") or "",
                dependencies=list(resource.get("dependencies", [])),
                propertyDependencies={
                    key: proto.AnalyzerPropertyDependencies(urns=list(urns))
                    for key, urns in resource.get("propertyDependencies", {}).items()
                    if urns
                },
            )
            for resource in self.resources
        ]

    def violation(self, diagnostic: proto.AnalyzeDiagnostic, default_urn: str) -> Violation:
        """A diagnostic as a violation (a finding with no URN goes to the root stack, as in the engine)."""
        urn = diagnostic.urn if diagnostic.urn in self._by_urn else default_urn
        resource = self._by_urn.get(urn, {})
        message = diagnostic.message.removeprefix(diagnostic.description).strip() or diagnostic.description
        return Violation(
            policy=diagnostic.policyName,
            enforcement=_level(diagnostic.enforcementLevel),
            severity=_severity(diagnostic.severity),
            urn=urn,
            type=str(resource.get("type", _STACK_TYPE)),
            name=str(resource.get("name", urn.rsplit("::", 1)[-1])),
            message=message,
        )
