"""Run a real Pulumi Python program offline, under Pulumi's own mocks, and capture what it registers.

The engine is replaced by ``pulumi.runtime.set_mocks``; everything else is the program's real code.
Capture happens at the mock *monitor*, which receives the full RegisterResource request (parent,
provider reference, dependencies), unlike ``Mocks.new_resource``. Default providers are never
registered under mocks, so they are synthesized here from the stack's provider config (``aws:region``,
``azure-native:location``…), as the engine would create them, and every custom resource points at its
provider. Inputs are recorded in wire form (``MessageToDict`` of the request's Struct): camelCase keys,
numbers as floats, secrets wrapped, exactly what the engine and a policy pack see.
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import json
import logging
import os
import runpy
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from google.protobuf import json_format
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.settings import SETTINGS

from mlplatform.errors import InputError
from mlplatform.graph import SECRET_SIG, SECRET_VALUE, STACK_TYPE, Plan, PlannedResource, provider_id
from mlplatform.rendering import rendered_children
from mlplatform.stackyaml import load as load_yaml

if TYPE_CHECKING:  # the mocks import the program's components: loaded with the plan, not with this module
    from mlplatform.mocks import ExistingAccount

# The graph's types are the plan's vocabulary: callers import them from here or from mlplatform.graph.
__all__ = [
    "REPO_ROOT",
    "SECRET_SIG",
    "STACK_TYPE",
    "Plan",
    "PlannedResource",
    "Target",
    "all_stack_targets",
    "resolve_target",
    "run_plan",
]

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Target:
    """One stack of one Pulumi program: what to plan. A stack need not have its file: with none, its
    config is empty, as for a stack Pulumi has never been given config for."""

    program_dir: Path
    stack: str
    stack_file: Path

    @property
    def label(self) -> str:
        return self.stack if self.program_dir == REPO_ROOT else f"{self.program_dir}:{self.stack}"


def _project_settings(program_dir: Path) -> dict[str, Any]:
    project_file = program_dir / "Pulumi.yaml"
    if not project_file.is_file():
        raise InputError([f"{program_dir}: no Pulumi.yaml; not a Pulumi project"])
    settings = _read_yaml(project_file)
    runtime = settings.get("runtime")
    runtime_name = runtime.get("name") if isinstance(runtime, dict) else runtime
    if runtime_name != "python":
        raise InputError(
            [f"{project_file}: runtime: {runtime_name!r}; only Python programs can be planned offline"]
        )
    return settings


def _read_yaml(path: Path) -> dict[str, Any]:
    document = load_yaml(path)
    if not isinstance(document, dict):
        raise InputError([f"{path.name}: expected a mapping at the top level"])
    return document


def _stack_dir(program_dir: Path) -> Path:
    return program_dir / str(_project_settings(program_dir).get("stackConfigDir", "."))


def resolve_target(
    stack: str | None = None, stack_file: Path | None = None, program: Path | None = None
) -> Target:
    """Turn the CLI's ways of naming a stack into one ``Target``; bad names are ``InputError``."""
    program_dir = (program or REPO_ROOT).resolve()
    if stack_file is not None:
        if stack_file.is_dir():
            raise InputError([f"--stack-file {stack_file}: is a folder; name a Pulumi.<stack>.yaml file"])
        if not stack_file.is_file():
            raise InputError([f"{stack_file}: no such stack file"])
        name = stack_file.name
        if not (name.startswith("Pulumi.") and name.endswith((".yaml", ".yml"))):
            raise InputError([f"{stack_file}: a stack file is named Pulumi.<stack>.yaml"])
        _project_settings(program_dir)
        return Target(
            program_dir, stack or name.removeprefix("Pulumi.").rsplit(".", 1)[0], stack_file.resolve()
        )
    if stack is None:
        raise InputError(["name a stack, or pass --stack-file PATH, or --program DIR --stack NAME"])
    candidate = _stack_dir(program_dir) / f"Pulumi.{stack}.yaml"
    if not candidate.is_file() and program is None:
        # Any other program may have stacks with no file (empty config, as in Pulumi); this one needs its
        # config, so a name without a file is a typo.
        if "/" in stack or stack.endswith((".yaml", ".yml")):
            hint = f"plan a file with --stack-file {stack}"
            raise InputError([f"{stack!r} is a path, not a stack name; {hint}"])
        known = [t.stack for t in all_stack_targets(program_dir)]
        close = difflib.get_close_matches(stack, known, n=1)
        hint = f"did you mean {close[0]}?" if close else f"stacks: {', '.join(known) or 'none'}"
        raise InputError([f"unknown stack {stack!r}; {hint}"])
    return Target(program_dir, stack, candidate)


def all_stack_targets(program: Path | None = None) -> list[Target]:
    program_dir = (program or REPO_ROOT).resolve()
    return [
        Target(program_dir, path.name.removeprefix("Pulumi.").removesuffix(".yaml"), path)
        for path in sorted(_stack_dir(program_dir).glob("Pulumi.*.yaml"))
    ]


def _stack_config(target: Target, project: str) -> tuple[dict[str, Any], list[str]]:
    """The stack's config with full keys, as ``pulumi.Config`` sees it, and its secret keys."""
    if not target.stack_file.is_file():
        return {}, []
    raw = _read_yaml(target.stack_file).get("config") or {}
    if not isinstance(raw, dict):
        raise InputError([f"{target.stack_file.name}: config: expected a mapping"])
    config: dict[str, Any] = {}
    secret_keys: list[str] = []
    for key, value in raw.items():
        full_key = key if ":" in key else f"{project}:{key}"
        if isinstance(value, dict) and set(value) == {"secure"}:
            # Ciphertext needs the stack's secrets provider, which is not reachable offline.
            secret_keys.append(full_key)
            config[full_key] = "[secret: not decrypted offline]"
        else:
            config[full_key] = value
    return config, secret_keys


class _CaptureMonitor(MockMonitor):
    """The mock monitor, recording each registration with its graph edges and provider."""

    def __init__(self, mocks: Any, project: str, stack: str, config: dict[str, Any]) -> None:
        super().__init__(mocks)
        self.project, self.stack, self.config = project, stack, config
        self.captured: list[PlannedResource] = []
        self._default_providers: dict[str, str] = {}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type == STACK_TYPE:
            self.captured.append(
                PlannedResource(response.urn, STACK_TYPE, request.name, None, False, None, {})
            )
            return response
        provider = request.provider or None
        custom = bool(request.custom)
        if custom and provider is None and not request.type.startswith("pulumi:providers:"):
            provider = self._default_provider(request.type.split(":")[0], request.version)
        resource_id = provider_id(response.urn) if request.type.startswith("pulumi:providers:") else None
        if resource_id is not None:
            response.id = resource_id
        self.captured.append(
            PlannedResource(
                urn=response.urn,
                type=request.type,
                name=request.name,
                parent=request.parent or None,
                custom=custom,
                provider=provider,
                inputs=json_format.MessageToDict(request.object),
                dependencies=tuple(request.dependencies),
                property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
                protect=bool(request.protect),
                ignore_changes=tuple(request.ignoreChanges),
                import_id=request.importId or None,
            )
        )
        return response

    def _default_provider(self, package: str, version: str) -> str:
        if package not in self._default_providers:
            name = "default" + (f"_{version.replace('.', '_')}" if version else "")
            token = f"pulumi:providers:{package}"
            urn = f"urn:pulumi:{self.stack}::{self.project}::{token}::{name}"
            inputs = {
                key.split(":", 1)[1]: _config_value(value)
                for key, value in self.config.items()
                if key.startswith(f"{package}:")
            }
            if version:
                inputs["version"] = version
            self.captured.append(PlannedResource(urn, token, name, None, True, None, inputs))
            self._default_providers[package] = f"{urn}::{provider_id(urn)}"
        return self._default_providers[package]


def _config_value(value: Any) -> Any:
    """Provider config values arrive as strings; structured ones are JSON (as Pulumi passes them)."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value[:1] in "[{" else value
        except json.JSONDecodeError:
            return value
    return value


@contextmanager
def _inside(program_dir: Path) -> Iterator[None]:
    """Run as ``pulumi`` runs a program: from its directory, importable from there."""
    cwd, path = Path.cwd(), list(sys.path)
    os.chdir(program_dir)
    sys.path.insert(0, str(program_dir))
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.path[:] = path


T = TypeVar("T")


def run_plan(target: Target, *, update: bool = False, existing: ExistingAccount | None = None) -> Plan:
    """Plan one stack. Each run gets a fresh context, so stacks planned in one process don't leak
    config, root resource or settings into each other (Pulumi keeps them in context variables), and an
    event loop of its own (``own_event_loop``).

    ``update`` runs the program as ``pulumi up`` does (``pulumi.runtime.is_dry_run()`` false), to see
    what an update refuses; a plan is otherwise a preview. ``existing``: what the account holds already
    (the mocks' ``ExistingAccount``; unset, a fresh account)."""
    return isolated(_run_plan, target, update, existing)


def isolated(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a fresh context (Pulumi's settings, config and root resource live in
    context variables) on an event loop of its own (``own_event_loop``): how a plan runs, and how a test
    runs a piece of a program under the mocks.

    The context also gets its own set of outputs to wait for, and its lock. ``set_mocks`` does not set
    them (pulumi 3.272 ``MockSettings`` sets the RPC manager only), and a context variable of Pulumi's
    settings that a context never set reads the value last set in a context that had none
    (``pulumi._utils.ContextProperty``): so every plan, and every ``Output`` made outside one, shared one
    set, and a plan's ``wait_for_rpcs`` waited on an output another event loop had made. ``asyncio.wait``
    schedules its wake-up on that output's own loop, which no longer runs: the plan hung with every thread
    idle (seen in CI; reproduced by one ``Output.from_input`` before a plan)."""

    def fresh() -> T:
        SETTINGS.outputs = set()
        SETTINGS.lock = threading.Lock()
        return function(*args)

    with own_event_loop():
        return contextvars.Context().run(fresh)


@contextmanager
def own_event_loop() -> Iterator[None]:
    """Run a Pulumi program on an event loop of its own, closed at the end with its executor's threads;
    the thread's own loop is its current loop again afterwards (a new one where it had none).

    Pulumi's runtime awaits on the thread's current event loop (``pulumi.runtime.sync_await`` asks
    ``asyncio.get_event_loop``) and makes its resource calls on that loop's default executor. A loop
    shared by the plans of one process carried one plan's leftovers into the next, and one that was
    never closed (an ``asyncio.run`` in between leaves the thread with none, so the next plan made
    another) kept its executor's threads alive: 6 more threads and about 10 MB for every plan, measured
    over ten plans. ``asyncio.Runner`` makes the loop the thread's current one and, on leaving, cancels
    what is left, joins the executor and closes the loop, as ``asyncio.run`` does. The thread then has its
    own loop back, or a new one if it had none."""
    policy = asyncio.get_event_loop_policy()
    try:
        previous: asyncio.AbstractEventLoop | None = policy.get_event_loop()
    except RuntimeError:  # none: an asyncio.run ended in this thread
        previous = None
    try:
        with asyncio.Runner() as runner:
            runner.get_loop()
            yield
    finally:
        # The thread's loop again; a new one where it had none, as code outside a plan (a test building a
        # handle with ``Output.from_input``) asks the thread for one.
        alive = previous is not None and not previous.is_closed()
        policy.set_event_loop(previous if alive else policy.new_event_loop())


class _Warnings(logging.Handler):
    """Collects what the program logs at warning severity (the mock engine's logger)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _run_plan(target: Target, update: bool, existing: ExistingAccount | None) -> Plan:
    import pulumi
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    from mlplatform.mocks import PlanMocks

    settings = _project_settings(target.program_dir)
    project = str(settings["name"])
    config, secret_keys = _stack_config(target, project)
    pulumi.runtime.set_all_config(
        {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}, secret_keys
    )
    mocks = PlanMocks(
        aws_region=str(config.get("aws:region", "")),
        azure_location=str(config.get("azure-native:location", "")),
        existing=existing,
    )
    monitor = _CaptureMonitor(mocks, project, target.stack, config)
    warnings = _Warnings()
    logger = logging.Logger("mlplatform.plan")  # unregistered: nothing else logs to it
    logger.addHandler(warnings)
    pulumi.runtime.set_mocks(
        mocks, project=project, stack=target.stack, preview=not update, monitor=monitor, logger=logger
    )
    main = target.program_dir / str(settings.get("main", "__main__.py"))
    if main.is_dir():
        main = main / "__main__.py"
    stack_resource = pulumi.runtime.settings.get_root_resource()
    assert isinstance(stack_resource, pulumi.runtime.stack.Stack)

    def program() -> None:
        runpy.run_path(str(main), run_name="__main__")

    with _inside(target.program_dir):
        try:
            _sync_await(run_pulumi_func(program))
        except pulumi.RunError as exc:
            raise InputError(str(exc).splitlines()) from None
        except Exception as exc:
            raise InputError([f"{_where(exc, target.program_dir)}: {type(exc).__name__}: {exc}"]) from exc
        outputs = _sync_await(_resolve_outputs(stack_resource.outputs))
    return Plan(
        project=project,
        stack=target.stack,
        resources=_with_charts(monitor.captured),
        outputs=outputs,
        warnings=warnings.lines,
    )


def _with_charts(resources: list[PlannedResource]) -> list[PlannedResource]:
    """The program's resources, then the objects its Helm releases render (mlplatform.rendering)."""
    return resources + rendered_children(resources)


def _where(exc: BaseException, program_dir: Path) -> str:
    """The innermost frame of the failure inside the program's own files (file:line), as a user
    would look for it; the program's directory when the failure is all in libraries."""
    where = str(program_dir)
    for frame, line in traceback.walk_tb(exc.__traceback__):
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(program_dir) and ".venv" not in path.parts:
            where = f"{path.relative_to(program_dir)}:{line}"
    return where


async def _resolve_outputs(outputs: dict[str, Any]) -> dict[str, Any]:
    import pulumi

    resolved: dict[str, Any] = {}
    for name, value in outputs.items():
        output = pulumi.Output.from_input(value)
        plain = await output.future(with_unknowns=True)
        if await output.is_secret():
            plain = {SECRET_SIG: SECRET_VALUE, "value": plain}
        resolved[name] = plain
    return resolved
