"""``mlplatform new-stack``: a new stack file from the shipped template for its cloud and tier.

The template is the shipped ``<cloud>-<tier>-prod`` stack for a production environment and
``<cloud>-<tier>-dev`` otherwise, so a new stack starts from something a team already deploys. It is
copied as text (comments kept), renamed, validated like any stack, and never overwrites a file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer
from pydantic import TypeAdapter, ValidationError

from components.config import (
    ENVIRONMENT_RULE,
    STACK_NAME,
    ConfigError,
    Environment,
    Tier,
    parse_stack_config,
    stack_name_problem,
)
from components.handle import Cloud
from mlplatform.errors import exit_with
from mlplatform.plan import REPO_ROOT
from mlplatform.report import output_problems
from mlplatform.stackyaml import loads

STACKS_DIR = REPO_ROOT / "stacks"

# The state backend and the stack's secrets key, in the region (docs/stacks.md, "State and secrets
# in-region").
STATE_COMMANDS = {
    Cloud.AWS: (
        "pulumi login 's3://<your-state-bucket>?region=me-central-1&awssdk=v2'",
        "pulumi stack init {name} --secrets-provider 'awskms://alias/ml-platform-state?region=me-central-1'",
    ),
    Cloud.AZURE: (
        "pulumi login 'azblob://<container>?storage_account=<account-in-uaenorth>'",
        "pulumi stack init {name} --secrets-provider "
        "'azurekeyvault://<vault>.vault.azure.net/keys/ml-platform-state'",
    ),
}


def next_steps(name: str, cloud: Cloud, tier: Tier, path: Path) -> list[str]:
    """What to do after the file is written, in the order of docs/stacks.md ("From a fresh clone to a
    deployed stack, in detail"): the offline steps first, then state, then the two phases."""
    stack = name if path.parent.resolve() == STACKS_DIR.resolve() else f"--stack-file {path}"
    state = [f"     {line.format(name=name)}" for line in STATE_COMMANDS[cloud]]
    steps = [
        f"1. replace the placeholders in {path}: mlplatform plan {stack} warns once per key that holds one",
        f"2. check offline: mlplatform plan {stack} --manifests out/{name} && mlplatform check {stack}",
        "3. keep state and secrets in the UAE:",
        *state,
        f"4. what this machine still needs to deploy: mlplatform doctor {stack}",
    ]
    if tier is Tier.ENTERPRISE:
        steps += [
            "5. phase one, the cloud: set kubernetes: {enabled: false} under ml-platform:platform, then",
            "   pulumi preview --policy-pack policies && pulumi up (from anywhere)",
            "6. phase two, the Kubernetes layer: remove enabled: false, then pulumi up from a runner inside",
            '   the private network (docs/stacks.md, "From a fresh clone to a deployed stack, in detail")',
        ]
    else:
        steps += [
            "5. pulumi preview --policy-pack policies && pulumi up from an address in",
            "   cluster.publicAccessCidrs: the cloud and the Kubernetes layer in one go",
        ]
    return steps


def render_stack(name: str, cloud: Cloud, tier: Tier, environment: str) -> str:
    template = STACKS_DIR / f"Pulumi.{cloud}-{tier}-{'prod' if environment == 'prod' else 'dev'}.yaml"
    text = template.read_text()
    text = re.sub(r"(?m)^(\s+environment:) \S+$", rf"\1 {environment}", text)
    return re.sub(r"pulumi stack init \S+", f"pulumi stack init {name}", text)


def new_stack(
    name: Annotated[
        str, typer.Argument(help="The stack name, e.g. team2-prod; it names the stack's cloud resources.")
    ],
    cloud: Annotated[Cloud, typer.Option(help="aws or azure.")],
    tier: Annotated[Tier, typer.Option(help="smb or enterprise.")],
    env: Annotated[str, typer.Option("--env", help="Environment name, e.g. dev, staging, prod.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where stack files live.")] = STACKS_DIR,
) -> None:
    """Write stacks/Pulumi.<NAME>.yaml from the template, validated and ready to edit."""
    if not STACK_NAME.fullmatch(name):
        exit_with([stack_name_problem(name)])
    try:
        TypeAdapter(Environment).validate_python(env)
    except ValidationError:
        # The stack's environment key takes it as given: the flag is told the key's own rule.
        exit_with([f"--env {env!r}: {ENVIRONMENT_RULE}"])
    unwritable = output_problems({}, {"--dir": directory})
    if unwritable:
        exit_with(unwritable)
    path = directory / f"Pulumi.{name}.yaml"
    if path.exists():
        exit_with([f"{path}: already exists; not overwritten"])
    text = render_stack(name, cloud, tier, env)
    try:
        parse_stack_config(loads(text, path.name)["config"], path.name)
    except ConfigError as exc:
        exit_with(exc.problems)
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}; next:")
    print("\n".join(next_steps(name, cloud, tier, path)))
