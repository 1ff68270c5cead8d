"""Request validation without a server: limits, strictness, and error messages that name the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from workloads.inference.schemas import field_path, request_model, validation_error

Request = request_model(n_features=3, max_instances=2)


@pytest.mark.parametrize(
    ("body", "field", "needle"),
    [
        ('{"instances": [[1, 2]]}', "instances[0]", "at least 3"),
        ('{"instances": [[1, 2, 3, 4]]}', "instances[0]", "at most 3"),
        ('{"instances": [[1, 2, 3], [1, 2, 3], [1, 2, 3]]}', "instances", "at most 2"),
        ('{"instances": []}', "instances", "at least 1"),
        ('{"instances": [[1, "2", 3]]}', "instances[0][1]", "valid number"),
        ('{"instances": [[1, true, 3]]}', "instances[0][1]", "valid number"),
        ('{"instances": [[1, 2, NaN]]}', "instances[0][2]", "finite"),
        ('{"instances": [[1, 2, Infinity]]}', "instances[0][2]", "finite"),
        ('{"instances": [[1, 2, 1e999]]}', "instances[0][2]", "finite"),
        ('{"instances": [[1, 2, 3]], "extra": 1}', "extra", "Extra inputs"),
        ('{"rows": [[1, 2, 3]]}', "instances", "Field required"),
        ('{"instances": [[1, 2, 3]', "body", "Invalid JSON"),
        ("[]", "body", "object"),
    ],
)
def test_bad_bodies_are_refused_by_field(body: str, field: str, needle: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Request.model_validate_json(body)
    error = validation_error(caught.value)
    assert any(f["field"] == field and needle in f["message"] for f in error.fields), error
    assert f"{field}: " in error.error


def test_integers_are_numbers() -> None:
    assert Request.model_validate_json('{"instances": [[1, 2.5, -3]]}').instances == [[1.0, 2.5, -3.0]]


def test_field_paths_index_like_the_payload() -> None:
    assert field_path(("instances", 3, 17)) == "instances[3][17]"
    assert field_path(()) == "body"
