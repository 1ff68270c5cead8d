"""``python -m workloads.training`` / ``torchrun ... -m workloads.training``: validate flags, then train.

Flags are checked before torch is imported, so bad input costs a fraction of a second and exits 2 with
one line on stderr (the platform-wide CLI contract).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from workloads.fatal import record_fatal
from workloads.training.config import ConfigError, RunRefusedError, parse_args, preflight
from workloads.training.hooks import HookError


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_args(argv)
        preflight(config)
        from workloads.training.train import run

        run(config)
    except (ConfigError, HookError, RunRefusedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return record_fatal(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
