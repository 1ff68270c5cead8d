"""Issue 11 item 4: the catalog knows which types me-central-1 sells (AWS pricing data as cfn-lint 1.58.0
packages it, October 2026), the config refuses the others, and the offline offering check answers from
the same data instead of "everything is offered"."""

from __future__ import annotations

import json
from importlib import resources as package_files

import pytest

from components.catalog.aws import INSTANCE_TYPES, SOLD_IN_REGION
from components.handle import Fabric
from mlplatform.mocks import _invoke_result

OFFERINGS = "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings"


def _cfn_lint_sales() -> dict[str, list[str]]:
    cfnlint = pytest.importorskip("cfnlint")
    data = package_files.files(cfnlint).joinpath(
        "data/schemas/extensions/aws_ec2_instance/instancetype_enum.json"
    )
    sales: dict[str, object] = json.loads(data.read_text(encoding="utf-8"))
    return {region: entry["enum"] for region, entry in sales.items() if isinstance(entry, dict)}


def test_recorded_sales_match_cfn_lint() -> None:
    """The recorded table is exactly the catalog types cfn-lint's data lists for each recorded region."""
    sales = _cfn_lint_sales()
    for region, sold in SOLD_IN_REGION.items():
        assert sold == {name for name in INSTANCE_TYPES if name in sales[region]}, region


def test_me_central_1_sells_p5en_but_no_other_efa_gpu_type() -> None:
    """REFERENCE.md: me-central-1 has g5, g6, g6e and p5en.48xlarge; not p4d, p4de, p5, p5e, p6-b200."""
    sold = SOLD_IN_REGION["me-central-1"]
    efa = {n for n, t in INSTANCE_TYPES.items() if t.fabric is Fabric.EFA}
    assert efa & sold == {"p5en.48xlarge"}
    assert INSTANCE_TYPES["p5en.48xlarge"].fabric_devices == 16
    assert {"g5.xlarge", "g6.xlarge", "g6e.xlarge"} <= sold


def test_offline_offering_check_answers_from_the_regional_data() -> None:
    """The mock no longer offers whatever was asked: p5.48xlarge is not offered in me-central-1."""
    for itype, offered in (("p5en.48xlarge", ["p5en.48xlarge"]), ("p5.48xlarge", [])):
        answer = _invoke_result(OFFERINGS, {"filters": [{"name": "instance-type", "values": [itype]}]})
        assert answer["instanceTypes"] == offered
