"""The Pulumi program: one stack, one platform. `pulumi up` and `mlplatform plan` both run this file."""

import pulumi

from components.config import ConfigError, load_stack_config
from components.platform import Platform

try:
    config = load_stack_config()
except ConfigError as exc:
    # RunError prints its message without a traceback: one line per problem, naming the stack key.
    raise pulumi.RunError(str(exc)) from None

platform = Platform(config.stack_name, config)
for name, value in platform.outputs().items():
    pulumi.export(name, value)
