"""Exit 2 through torchrun: a failure that no retry can fix must reach the Job's ``podFailurePolicy``.

torchrun reports any worker failure as its own exit 1 (``torch/distributed/run.py``: ``main`` is
``@record``-ed and re-raises ``ChildFailedError``), so the trainer's exit 2 (bad input, a changed recipe
on resume) never reaches the container's exit code. A worker that exits 2 therefore also writes the
reason to the file ``FATAL_FILE_ENV`` names, and the container's shell line (``training/k8s.py``) turns
torchrun's exit into 2 when that file exists.
"""

from __future__ import annotations

import os
from pathlib import Path

FATAL_FILE_ENV = "ML_PLATFORM_FATAL_FILE"
# The exit code of a failure a retry cannot fix; the Job fails at once on it.
EXIT_FATAL = 2


def record_fatal(message: str) -> int:
    """Write ``message`` where the container's shell line looks (when set), and return ``EXIT_FATAL``."""
    path = os.environ.get(FATAL_FILE_ENV)
    if path:
        Path(path).write_text(message + "\n")
    return EXIT_FATAL
