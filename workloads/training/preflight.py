"""``python -m workloads.training.preflight <trainer flags>``: the trainer's flag and preflight checks,
once per pod before torchrun starts, so a failure no retry can fix (exit 2) costs no torchrun restarts:
torchrun would restart a failing worker ``--max-restarts`` times before giving up (training/k8s.py runs
this first; cluster review B1)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from workloads.fatal import record_fatal
from workloads.training.config import ConfigError, parse_args, preflight


def main(argv: Sequence[str] | None = None) -> int:
    try:
        preflight(parse_args(argv))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return record_fatal(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
