"""The Pulumi program: one stack, one platform. `pulumi up` and `mlplatform plan` both run this file."""

import pulumi

from components.config import ConfigError, load_stack_config, placeholder_problems
from components.image_mirror import LockError
from components.platform import Platform

try:
    config = load_stack_config()
except ConfigError as exc:
    # RunError prints its message without a traceback: one line per problem, naming the stack key.
    raise pulumi.RunError(str(exc)) from None

# A template placeholder plans and previews with a warning per key; an update refuses the stack before
# it creates anything, since the cloud would refuse it (or deploy something no one can use) later.
placeholders = placeholder_problems(config)
if placeholders and not pulumi.runtime.is_dry_run():
    raise pulumi.RunError(
        "\n".join(f"{line} (pulumi up refuses template placeholders)" for line in placeholders)
    )
for line in placeholders:
    pulumi.log.warn(line)

try:
    platform = Platform(config.stack_name, config)
except LockError as exc:
    # A stack's mirror lock that lacks an image the stack renders: one line naming both.
    raise pulumi.RunError(str(exc)) from None
for name, value in platform.outputs().items():
    pulumi.export(name, value)
