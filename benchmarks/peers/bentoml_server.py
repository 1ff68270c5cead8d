"""BentoML serving the version with adaptive batching: ``POST /predict`` ``{"instances": [[features]]}``
-> ``[[scores]]``; ready when ``/readyz`` answers 200.

``python -m benchmarks.peers.bentoml_server --model DIR --port P`` in the BentoML venv runs
``bentoml serve benchmarks.peers.bentoml_server:OnnxService``, as a team serves a service, with the
version directory in ``BENCH_MODEL_DIR`` (a service class is built by BentoML, not called with
arguments). ``max_latency_ms`` is a bound no request here should reach: BentoML refuses (503) a request
its dispatcher expects to finish later than that, and its adaptive dispatcher, not this bound, decides
how long a batch waits.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import bentoml
import numpy as np
import numpy.typing as npt

from benchmarks.peers.common import MAX_BATCH_SIZE, Session, parse_args

MODEL_DIR_ENV = "BENCH_MODEL_DIR"
MAX_LATENCY_MS = 1000


@bentoml.service
class OnnxService:
    def __init__(self) -> None:
        self.session = Session(Path(os.environ[MODEL_DIR_ENV]))

    @bentoml.api(batchable=True, max_batch_size=MAX_BATCH_SIZE, max_latency_ms=MAX_LATENCY_MS)
    def predict(self, instances: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        return self.session.scores(instances)


def main() -> None:
    args = parse_args(__doc__ or "")
    os.environ[MODEL_DIR_ENV] = str(args.model)
    bentoml_cli = str(Path(sys.executable).with_name("bentoml"))
    service = f"{__spec__.name if __spec__ else __name__}:OnnxService"
    os.execv(bentoml_cli, [bentoml_cli, "serve", service, "--host", "127.0.0.1", "--port", str(args.port)])


if __name__ == "__main__":
    main()
