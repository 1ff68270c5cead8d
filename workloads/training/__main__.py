"""``python -m workloads.training`` / ``torchrun ... -m workloads.training``: validate flags, then train.

Flags are checked before torch is imported, so bad input costs a fraction of a second and exits 2 with
one line on stderr (the platform-wide CLI contract).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from workloads.artifacts import METADATA_FILE
from workloads.fatal import record_fatal
from workloads.training.config import ConfigError, RunRefusedError, parse_args, preflight
from workloads.training.hooks import HookError


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_args(argv)
        preflight(config)
        if config.registry_uri is not None and (config.version_dir / METADATA_FILE).exists():
            # Written by an earlier attempt that stopped before registering: register it, once, from
            # rank 0; nothing to train.
            if os.environ.get("RANK", "0") == "0":
                from workloads.training.lineage import register_written

                print(
                    f"registered {config.version_dir} as version {register_written(config)}", file=sys.stderr
                )
            return 0
        from workloads.training.train import run

        run(config)
    # A RegistryError is not caught: an unreachable registry is worth the restart that resumes the run.
    except (ConfigError, HookError, RunRefusedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return record_fatal(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
