"""What every peer server of ``benchmarks/serve_bench.py`` shares: its command line and its model.

Each peer runs in its own venv (``make bench-setup``: the peers' pins conflict with the product's and
with each other's), so this module imports nothing but the standard library, numpy and onnxruntime,
which every peer venv has at the product's versions. Every peer serves the version's ``model.onnx`` with
an ``InferenceSession`` made with default options, as the naive server does.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

# The name KServe and MLServer route by (``/v1/models/<name>:predict``, ``/v2/models/<name>/infer``).
MODEL_NAME = "model"
# The batching every peer that batches is given: up to 32 rows per model run, waiting at most 2 ms for
# them (LitServe's batch_timeout, MLServer's max_batch_time; BentoML's dispatcher sets its own wait).
MAX_BATCH_SIZE = 32
BATCH_WAIT_S = 0.002


class Session:
    """The version's ONNX graph, run as-is: float32 rows in, one score row per input row out.

    Default session options unless ``threads`` is given (the naive server's one-thread variant).
    """

    def __init__(self, version_dir: Path, threads: int | None = None) -> None:
        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        self._session = ort.InferenceSession(
            str(version_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self._input = self._session.get_inputs()[0].name

    def scores(self, rows: npt.ArrayLike) -> npt.NDArray[np.float32]:
        out: npt.NDArray[np.float32] = self._session.run(
            None, {self._input: np.asarray(rows, dtype=np.float32)}
        )[0]
        return out


def arg_parser(description: str) -> argparse.ArgumentParser:
    """``--model DIR --port P``: the version directory to serve and the loopback port to listen on."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", type=Path, required=True, help="<output>/models/<name>/<version>")
    parser.add_argument("--port", type=int, required=True)
    return parser


def parse_args(description: str) -> argparse.Namespace:
    return arg_parser(description).parse_args()
