"""A KServe ModelServer custom predictor serving the version: V1 ``POST /v1/models/model:predict``
``{"instances": [[features]]}`` -> ``{"predictions": [[scores]]}``; ready when ``/v2/health/ready``
answers 200.

``python -m benchmarks.peers.kserve_server --model DIR --port P`` in the KServe venv. The ModelServer's
defaults, but for the port and no gRPC server (nothing here speaks gRPC, and its default port would
collide with a second server's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kserve

from benchmarks.peers.common import MODEL_NAME, Session, parse_args


class OnnxModel(kserve.Model):
    """A ``kserve.Model`` subclass, as KServe's custom-predictor guide writes one; no batching (KServe's
    batcher is the separate agent sidecar, not the ModelServer)."""

    def __init__(self, version_dir: Path) -> None:
        super().__init__(MODEL_NAME)
        self.version_dir = version_dir
        self.load()

    def load(self) -> bool:
        self.session = Session(self.version_dir)
        self.ready = True
        return True

    def predict(self, payload: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
        return {"predictions": self.session.scores(payload["instances"]).tolist()}


def main() -> None:
    args = parse_args(__doc__ or "")
    kserve.ModelServer(http_port=args.port, enable_grpc=False).start([OnnxModel(args.model)])


if __name__ == "__main__":
    main()
