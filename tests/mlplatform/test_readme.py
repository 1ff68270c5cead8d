"""The README's examples run as written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

from mlplatform.plan import REPO_ROOT
from workloads.inference.schemas import request_model

REQUEST = Path("examples/requests/digits-v1.json")


def test_the_curl_example_posts_real_digits_rows_the_server_accepts() -> None:
    assert f"-d @{REQUEST}" in (REPO_ROOT / "README.md").read_text()
    request = request_model(64, 32).model_validate_json((REPO_ROOT / REQUEST).read_text())
    digits = load_digits()
    assert np.array_equal(np.asarray(request.instances), digits.data[:2])
    assert list(digits.target[:2]) == [0, 1]
