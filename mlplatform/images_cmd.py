"""``mlplatform images mirror``: the third-party images a stack's objects name, and the script that copies
them into the stack's own registry (mlplatform.mirror). ``mlplatform images scan``: the CVE gate on images'
SBOMs with Grype, offline (mlplatform.scan).

It plans the stack (or reads a plan ``mlplatform plan --json`` wrote) and prints a bash script: log in
to the stack's registry, create each mirror repository ECR needs, ``crane copy`` each image, print each
mirror's digest and sign it with the stack's key (cosign, as ``pulumi up`` signs the stack's own images).
It copies nothing itself: the deployer runs the script where the registries and the key are reachable,
with ``crane`` (google/go-containerregistry), ``cosign``, Pulumi and the cloud's CLI installed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
import yaml

from components.config import PLATFORM_KEY
from mlplatform.check import read_plan
from mlplatform.errors import EXIT_FINDING, InputError, exit_with
from mlplatform.mirror import NodeOsError, mirror_list, mirror_script, plan_node_os
from mlplatform.plan import Target
from mlplatform.plan_cmd import (
    ProgramOpt,
    StackArg,
    StackFileOpt,
    StackOpt,
    plan_or_exit,
    target_from_flags,
    unrendered_or_exit,
)
from mlplatform.report import kubernetes_objects, output_problems, write_document
from mlplatform.scan import INSTALL, SEVERITIES, Gate, parse_sbom_arg, scan, summary_line

app = typer.Typer(
    help="Third-party images into the stack's own registry; the CVE gate on images' SBOMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _images() -> None:
    # A callback keeps `images` a group (as `charts`): `mlplatform images mirror`.
    pass


@app.command()
def mirror(
    stack: StackArg = None,
    stack_file: StackFileOpt = None,
    program: ProgramOpt = None,
    stack_opt: StackOpt = None,
    plan_file: Annotated[
        Path | None,
        typer.Option("--plan", help="A plan JSON written by `mlplatform plan --json`.", show_default=False),
    ] = None,
    json_file: Annotated[
        Path | None,
        typer.Option(
            "--json", help="Also write the mirror list (source, mirror, digest) here.", show_default=False
        ),
    ] = None,
    lock: Annotated[
        str | None,
        typer.Option(
            "--lock",
            help="Where the script writes the mirror lock, from the folder it runs in"
            " [default: stacks/<stack>.images.json].",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Print the script that copies the stack's third-party images into its registry, signs each copy
    with the stack's key and writes the stack's mirror lock from their digests."""
    if plan_file is not None and (stack or stack_file or program or stack_opt):
        exit_with(["--plan reads a plan file; name no stack, --stack-file or --program with it"])
    if plan_file is not None:
        plan = read_plan(plan_file)
    else:
        with tempfile.TemporaryDirectory() as directory:
            target = unlocked(target_from_flags(stack, stack_file, program, stack_opt), Path(directory))
            plan = plan_or_exit(target)
        unrendered_or_exit(plan, allowed=False)
    missing = [key for key in ("cloud", "registry") if not plan.outputs.get(key)]
    if missing:
        exit_with(
            [f"stack {plan.stack}: the plan exports no {' or '.join(missing)}, so no registry to mirror to"]
        )
    try:
        images = mirror_list(
            kubernetes_objects(plan), str(plan.outputs["registry"]), plan_node_os(plan.outputs)
        )
    except NodeOsError as error:
        exit_with([f"stack {plan.stack}: {error}; plan it again with this version of mlplatform"])
    if any(image.mirrored for image in images):
        # Only a --plan file can: a stack is planned without its lock. A script from it would write a lock
        # without the images the plan already takes from the mirror.
        exit_with(
            [
                f"{plan_file}: the plan names images from the stack's mirror (its stack has a mirror lock);"
                " give the stack instead, which is planned without its lock"
            ]
        )
    if json_file is not None:
        json_file.write_text(json.dumps([i.as_dict() for i in images], indent=2) + "\n", encoding="utf-8")
    script = mirror_script(images, plan.outputs, plan.stack, lock or f"stacks/{plan.stack}.images.json")
    typer.echo("\n".join(script))


@app.command(name="scan")
def scan_cmd(
    sboms: Annotated[
        list[str],
        typer.Argument(
            help="Each image's SBOM (SPDX or CycloneDX JSON) as NAME=PATH, or PATH (named by its file).",
            metavar="SBOM",
            show_default=False,
        ),
    ],
    fail_on: Annotated[
        str,
        typer.Option("--fail-on", help=f"Fail on a vulnerability at or above: {', '.join(SEVERITIES)}."),
    ] = "high",
    only_fixed: Annotated[
        bool,
        typer.Option("--only-fixed/--all", help="Judge only vulnerabilities with a fix."),
    ] = True,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Grype's config with its ignore rules (default: .grype.yaml here, as CI's Grype reads it).",
            show_default=False,
        ),
    ] = None,
    grype: Annotated[
        str | None,
        typer.Option("--grype", help="The Grype binary (default: grype on PATH).", show_default=False),
    ] = None,
    json_file: Annotated[
        Path | None,
        typer.Option(
            "--json",
            help="Write the summary here (for `mlplatform check --evidence DIR --scans FILE`).",
            show_default=False,
        ),
    ] = None,
    sarif_dir: Annotated[
        Path | None,
        typer.Option(
            "--sarif", help="Grype also writes each image's SARIF here, as NAME.sarif.", show_default=False
        ),
    ] = None,
) -> None:
    """Scan images' SBOMs with Grype against the vulnerability database on disk (never downloaded);
    exit 1 when one has a vulnerability at or above --fail-on."""
    if fail_on not in SEVERITIES:
        exit_with([f"--fail-on {fail_on}: not one of {', '.join(SEVERITIES)}"])
    if config is None and Path(".grype.yaml").is_file():
        config = Path(".grype.yaml")
    elif config is not None and not config.is_file():
        exit_with([f"--config {config}: no such file"])
    binary = grype or shutil.which("grype")
    if binary is None:
        exit_with([f"grype: not found on PATH; {INSTALL}"])
    unwritable = output_problems({"--json": json_file}, {"--sarif": sarif_dir})
    if unwritable:
        exit_with(unwritable)
    try:
        gate = Gate(fail_on, only_fixed, config, sarif_dir)
        summary = scan(binary, [parse_sbom_arg(a) for a in sboms], gate)
    except InputError as error:
        exit_with(error.problems)
    database = summary["database"]
    typer.echo(f"database built {database['built']} (schema {database['schemaVersion']})")
    for image in summary["images"]:
        typer.echo(summary_line(image))
    if json_file is not None:
        write_document(json_file, summary)
        typer.echo(f"wrote {json_file}")
    if not summary["passed"]:
        raise typer.Exit(EXIT_FINDING)


def unlocked(target: Target, directory: Path) -> Target:
    """The target as it names its images upstream: a stack whose config names a mirror lock is planned
    from a copy of its file without it (in ``directory``), so the list is every image to mirror, the
    new ones of a chart bump included, never the mirror's own references."""
    document = (
        yaml.safe_load(target.stack_file.read_text(encoding="utf-8")) if target.stack_file.is_file() else None
    )
    kubernetes = ((document or {}).get("config") or {}).get(PLATFORM_KEY, {}).get("kubernetes")
    if not isinstance(kubernetes, dict) or "imageLock" not in kubernetes:
        return target
    del kubernetes["imageLock"]
    copy = directory / target.stack_file.name
    copy.write_text(yaml.safe_dump(document), encoding="utf-8")
    return replace(target, stack_file=copy)
