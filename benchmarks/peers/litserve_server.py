"""LitServe serving the version with its batching: ``POST /predict`` ``{"input": [features]}`` ->
``{"scores": [..]}``; ready when ``/health`` answers 200.

``python -m benchmarks.peers.litserve_server --model DIR --port P`` in the LitServe venv.
"""

from __future__ import annotations

from typing import Any

import litserve as ls
import numpy as np
import numpy.typing as npt

from benchmarks.peers.common import BATCH_WAIT_S, MAX_BATCH_SIZE, Session, parse_args


class OnnxApi(ls.LitAPI):
    """One row per request; LitServe stacks up to MAX_BATCH_SIZE decoded rows into one model run."""

    def __init__(self, version_dir: Any) -> None:
        super().__init__(max_batch_size=MAX_BATCH_SIZE, batch_timeout=BATCH_WAIT_S)
        self.version_dir = version_dir

    def setup(self, device: str) -> None:
        self.session = Session(self.version_dir)

    # LitServe builds its FastAPI route from these two signatures: an unannotated request is the parsed
    # JSON body, an unannotated response a plain JSON response (as LitServe's own examples write them).
    def decode_request(self, request, **kwargs: Any) -> npt.NDArray[np.float32]:  # type: ignore[no-untyped-def]
        return np.asarray(request["input"], dtype=np.float32)

    def predict(self, x: npt.NDArray[np.float32], **kwargs: Any) -> npt.NDArray[np.float32]:
        return self.session.scores(x)

    def unbatch(self, output: npt.NDArray[np.float32]) -> list[npt.NDArray[np.float32]]:
        return list(output)

    def encode_response(self, output: npt.NDArray[np.float32], **kwargs: Any):  # type: ignore[no-untyped-def]
        return {"scores": output.tolist()}


def main() -> None:
    args = parse_args(__doc__ or "")
    server = ls.LitServer(OnnxApi(args.model), accelerator="cpu")
    server.run(host="127.0.0.1", port=args.port, log_level="warning", generate_client_file=False)


if __name__ == "__main__":
    main()
