"""Run-time semantics: a Job's container command, run for real, must end with the exit code its
``podFailurePolicy`` expects.

The Job controller judges the container's own exit code (``onExitCodes``, kubernetes.io "Handling retriable
and non-retriable pod failures with Pod failure policy"). When the command wraps the program in a launcher
(torchrun), the launcher's code is what counts: torchrun's ``main`` re-raises ``ChildFailedError`` under
``@record`` and exits 1 whatever its child's code (review cluster.md B1). So for each ``FailJob`` rule with
``onExitCodes`` ``In``, the command is run here with its program replaced by a child that exits with each
listed code, on one node and one process (the rendezvous endpoint moved to this machine, the pod's own
/tmp to the run's own folder), and the container must exit with a code the rule matches; a finding ends
with the command's stderr. Needs torch (the ``train`` extra): the suite runs it.

The child fails the way the project's programs do: a code ``workloads.fatal`` names fatal is also
recorded where ``ML_PLATFORM_FATAL_FILE`` points (the contract a launcher's wrapper can read back), so
the judge tests the command's wiring, and the programs' own tests that they keep the contract.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import of_kind

POLICY = "pod-failure-exit-code"
NOT_RUN_POLICY = "exit-code-not-judged"
RENDEZVOUS_POLICY = "rendezvous-timeouts"
TIMEOUT_SECONDS = 180
_MODULE = re.compile(r"\btorchrun\b.*?\s-m\s+([\w.]+)")


@dataclass(frozen=True)
class ExitCase:
    """One container of one Job whose exit code ``code`` must fail the Job."""

    job: Subject
    container: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    code: int


def exit_cases(objects: Sequence[Mapping[str, Any]]) -> list[ExitCase]:
    """Each (Job, container, code) a ``FailJob`` ``onExitCodes: In`` rule names, for containers whose
    command runs a program under torchrun."""
    cases: list[ExitCase] = []
    for job in of_kind(objects, "Job"):
        spec = job.get("spec") or {}
        containers = {c["name"]: c for c in spec.get("template", {}).get("spec", {}).get("containers") or []}
        for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
            on = rule.get("onExitCodes") or {}
            if rule.get("action") != "FailJob" or on.get("operator") != "In":
                continue
            names = [on["containerName"]] if on.get("containerName") else list(containers)
            for name in names:
                container = containers.get(name)
                command = tuple((container or {}).get("command") or ()) + tuple(
                    (container or {}).get("args") or ()
                )
                if container is None or not _MODULE.search(" ".join(command)):
                    continue
                env = {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}
                cases.extend(
                    ExitCase(Subject.of(job), name, command, env, int(code)) for code in on["values"]
                )
    return cases


def _local(command: Sequence[str], port: int) -> list[str]:
    """The command on this machine: one node, one process, the rendezvous on localhost."""
    rewrites = (
        (r"--nnodes[= ]\S+", "--nnodes=1"),
        (r"--nproc[-_]per[-_]node[= ]\S+", "--nproc-per-node=1"),
        (r"--rdzv[-_]endpoint[= ]\S+", f"--rdzv-endpoint=127.0.0.1:{port}"),
    )
    local = []
    for part in command:
        for pattern, replacement in rewrites:
            part = re.sub(pattern, replacement, part)  # noqa: PLW2901 (each rewrite applies to the last)
        local.append(part)
    return local


# The stub's packages extend themselves over the real ones (``pkgutil.extend_path``), so the real
# ``workloads.fatal`` stays importable beside the stubbed entry module.
_STUB_INIT = "import pkgutil\n__path__ = pkgutil.extend_path(__path__, __name__)\n"
_STUB_MAIN = """\
code = {code}
try:
    from workloads.fatal import EXIT_FATAL, record_fatal
except ImportError:
    pass
else:
    if code == EXIT_FATAL:
        code = record_fatal("a fatal failure planted by judges.runtime")
raise SystemExit(code)
"""


def _stub(root: Path, module: str, code: int) -> None:
    """A package at ``module`` whose ``__main__`` exits ``code``; first on PYTHONPATH, it shadows the real
    entry module."""
    package = root.joinpath(*module.split("."))
    package.mkdir(parents=True)
    for directory in [root.joinpath(*module.split(".")[: i + 1]) for i in range(len(module.split(".")))]:
        (directory / "__init__.py").write_text(_STUB_INIT)
    (package / "__main__.py").write_text(_STUB_MAIN.format(code=code))


def _program_root(module: str) -> str:
    """The folder holding the real top-level package of ``module`` (where the image puts the code)."""
    spec = importlib.util.find_spec(module.split(".", maxsplit=1)[0])
    locations = list(spec.submodule_search_locations or []) if spec else []
    return str(Path(locations[0]).parent) if locations else ""


# The pod's /tmp is its own (the Jobs mount an emptyDir there; without one, the container's own file
# system): a variable that names a path in it names a path in the run's scratch folder here. On this
# machine /tmp is shared by every case run side by side and every other process, and one case's
# ``rm -f "$ML_PLATFORM_FATAL_FILE"`` deleted another's record before its shell read it back.
_POD_TMP = "/tmp"


def _private_tmp(env: Mapping[str, str], tmp: Path) -> dict[str, str]:
    """``env`` with each value that is a path in the pod's /tmp moved into ``tmp``."""
    return {
        name: str(tmp / Path(value).relative_to(_POD_TMP))
        if Path(value).is_absolute() and Path(value).is_relative_to(_POD_TMP)
        else value
        for name, value in env.items()
    }


@dataclass(frozen=True)
class Run:
    """What a case's command did: its exit code and the end of what it wrote to stderr."""

    code: int
    stderr: str


STDERR_TAIL = 600


def run_case(case: ExitCase) -> Run:
    """The container's exit code (and stderr's end) when its program exits ``case.code``. The rendezvous
    endpoint's port is 0: the agent that hosts the store binds a free one itself, where a port picked here
    first could be taken by another process before torchrun binds it."""
    match = _MODULE.search(" ".join(case.command))
    assert match is not None
    with tempfile.TemporaryDirectory(prefix="judge-exit-") as scratch:
        root = Path(scratch)
        _stub(root / "stub", match.group(1), case.code)
        (root / "tmp").mkdir()
        env = {
            **os.environ,
            **_private_tmp(case.env, root / "tmp"),
            "HOME": scratch,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(root / "stub"), _program_root(match.group(1))])),
            "JOB_COMPLETION_INDEX": "0",
        }
        done = subprocess.run(
            _local(case.command, 0),
            env=env,
            cwd=scratch,
            capture_output=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    stderr = " | ".join(done.stderr.decode(errors="replace").strip().splitlines()[-12:])
    return Run(done.returncode, stderr[-STDERR_TAIL:])


def _torch_installed() -> bool:
    """Whether the train extra's torch is installed, asked of the distribution's metadata: the judge runs
    torch only in torchrun's processes, and this process imports nothing of it (the infrastructure path
    stays free of workload packages: tests/mlplatform/test_cli.py)."""
    try:
        metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return False
    return True


def judge_exit_codes(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """Each case run (cases that differ only in what ``_local`` rewrites run once per process, and the
    rest side by side); without torch (the infrastructure install has none) each is reported as not
    judged, advisory, naming the extra that runs it."""
    cases = exit_cases(objects)
    if not _torch_installed():
        return [
            Finding(
                NOT_RUN_POLICY,
                "advisory",
                case.job,
                f"container {case.container}: exit code {case.code} not run through the command "
                "(torch is not installed: pip install -e '.[train]')",
            )
            for case in cases
        ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(_run_once, cases))
    return [
        Finding(
            POLICY,
            "mandatory",
            case.job,
            f"container {case.container}: its program exits {case.code}, which the podFailurePolicy "
            f"makes FailJob, but the command exits {run.code}: the rule never fires "
            f"(the command's stderr ends: {run.stderr or '(nothing)'})",
        )
        for case, run in zip(cases, runs, strict=True)
        if run.code != case.code
    ]


_RUN: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...], int], Run] = {}

# What can change a case's exit code once the stub replaces the program: torchrun's own settings
# (torch.distributed.run reads its flags' defaults from ``PET_*`` and its agent ``TORCHELASTIC_*`` and
# ``TORCH_*``) and the file the stub's fatal path records to (workloads/fatal.py,
# ``ML_PLATFORM_FATAL_FILE``). A stack's other variables (model names, registry URIs) reach no code that
# runs, so cases that differ only there run once: every stack's Jobs share one set of runs.
_LAUNCHER_ENV = ("PET_", "TORCHELASTIC_", "TORCH_", "ML_PLATFORM_FATAL_FILE")


def _run_once(case: ExitCase) -> Run:
    launcher_env = {name: value for name, value in case.env.items() if name.startswith(_LAUNCHER_ENV)}
    key = (tuple(_local(case.command, 0)), tuple(sorted(launcher_env.items())), case.code)
    if key not in _RUN:
        _RUN[key] = run_case(case)
    return _RUN[key]


# torch 2.13 defaults: the c10d store's read timeout (``c10d_rendezvous_backend._create_tcp_store``,
# ``read_timeout`` 60 s) and the rendezvous join timeout (``dynamic_rendezvous``, ``join_timeout`` 600 s).
_RENDEZVOUS_KEYS = ("read_timeout", "join_timeout")
_CONF = re.compile(r"--rdzv[-_]conf[= ](\S+)")


def judge_rendezvous(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """A c10d rendezvous left at torch's defaults in a Job with fewer than two retries per index: a pod
    that starts more than 60 s after pod 0 (an image pull, a node scale-up) fails its store connection
    and the Job with it; after a node loss the replacement waits 600 s for survivors stuck in NCCL (review
    cluster.md B2). Set both timeouts in ``--rdzv-conf``."""
    findings = []
    for job in of_kind(objects, "Job"):
        spec = job.get("spec") or {}
        retries = int(spec.get("backoffLimitPerIndex", spec.get("backoffLimit", 6)))
        if retries >= 2:
            continue
        for container in spec.get("template", {}).get("spec", {}).get("containers") or []:
            line = " ".join([*(container.get("command") or []), *(container.get("args") or [])])
            if "--rdzv-backend=c10d" not in line:
                continue
            conf = ",".join(_CONF.findall(line))
            keys = {item.split("=", 1)[0] for item in conf.split(",") if item}
            missing = [key for key in _RENDEZVOUS_KEYS if key not in keys]
            if missing:
                findings.append(
                    Finding(
                        RENDEZVOUS_POLICY,
                        "mandatory",
                        Subject.of(job),
                        f"container {container['name']}: c10d rendezvous without {' or '.join(missing)} "
                        f"in --rdzv-conf (torch defaults 60 s / 600 s) and {retries} retries per index",
                    )
                )
    return findings
