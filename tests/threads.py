"""Each process of a test run computes with its share of the CPUs, not with all of them.

torch sizes its intra-op thread pool (OpenMP) to the machine's cores unless ``OMP_NUM_THREADS`` says
otherwise. ``make test`` runs one pytest process per core (``-n 2`` on 2 cores), and tests start trainers
beside them, each with a pool as large as the machine: the pools' threads spin against each other. As a
training Job's container sets ``OMP_NUM_THREADS`` to its CPUs over its ranks (workloads/training/k8s.py)
and ``mlplatform train --local`` to the CPUs over ``--nproc``, the first pytest process of a run sets it to
the CPUs over the run's worker processes, for them and everything they start (inherited through the
environment, as tests/once.py's folder is). A value already set is the user's and stays.

Measured on the suite's 2-core machine, each run alone under the same load: a world-size-1 training
run (test_train.py, test_early_stopping.py) costs 6 CPU-s instead of 8.
"""

from __future__ import annotations

import os

import pytest

THREADS = "OMP_NUM_THREADS"


def share(config: pytest.Config) -> None:
    """``pytest_configure``: the run's share of the CPUs per process (in the first pytest process only)."""
    if hasattr(config, "workerinput"):  # an xdist worker inherits the controller's
        return
    workers = getattr(config.option, "numprocesses", None)
    cpus = len(os.sched_getaffinity(0))
    processes = workers if isinstance(workers, int) and workers > 0 else 1
    os.environ.setdefault(THREADS, str(max(1, cpus // processes)))
