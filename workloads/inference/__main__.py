"""The container's entry point: ``python -m workloads.inference``, configured by ``SERVE_*`` variables.

Bad settings or a bad model directory print one line each to stderr and exit 2, as the CLI does.
"""

from __future__ import annotations

import sys

from workloads.inference.config import ENV_PREFIX, ServeConfig
from workloads.inference.server import BAD_INPUT_ERRORS, bad_input, prepare
from workloads.inference.workers import run


def main() -> int:
    try:
        prepared = prepare(ServeConfig.from_env())
    except BAD_INPUT_ERRORS as exc:
        for line in bad_input(exc, lambda field: f"{ENV_PREFIX}{field.upper()}"):
            print(f"error: {line}", file=sys.stderr)
        return 2
    return run(prepared)


if __name__ == "__main__":
    sys.exit(main())
