"""Regenerate ``mlplatform_policies/instance_types_sold.txt`` from cfn-lint's packaged AWS pricing data.

Whether a region sells an instance type is a fact no resource input carries, and the pack cannot reach
the AWS pricing API; cfn-lint ships that data per region (``cfnlint/data/schemas/extensions/
aws_ec2_instance/instancetype_enum.json``, generated from the AWS pricing API). Only the regions the
pack's residency settings allow are written; a region absent from the table is not judged.

Run with the program's virtualenv, where cfn-lint lives, after a cfn-lint upgrade:
``.venv/bin/python policies/tools/instance_types_sold.py``.
"""

from __future__ import annotations

import importlib.metadata
import json
from importlib import resources
from pathlib import Path

REGIONS = ("me-central-1",)
# The pricing data cfn-lint 1.58.0 packages dates from October 2026 (REFERENCE.md, "Rules the real APIs
# enforce"); update both with cfn-lint.
DATA_DATE = "2026-10"
OUTPUT = Path(__file__).resolve().parents[1] / "mlplatform_policies" / "instance_types_sold.txt"


def sold_by_region() -> dict[str, list[str]]:
    data = resources.files("cfnlint").joinpath(
        "data/schemas/extensions/aws_ec2_instance/instancetype_enum.json"
    )
    table = json.loads(data.read_text(encoding="utf-8"))
    return {region: sorted(table[region]["enum"]) for region in REGIONS}


def main() -> None:
    version = importlib.metadata.version("cfn-lint")
    lines = [
        f"# Generated from cfn-lint {version} instancetype_enum.json (AWS pricing API, data of {DATA_DATE}) "
        "by policies/tools/instance_types_sold.py; do not edit. Format: <region> <instance type>.",
        *(f"{region} {name}" for region, names in sold_by_region().items() for name in names),
    ]
    OUTPUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{OUTPUT}: {len(lines) - 1} region/type pairs")


if __name__ == "__main__":
    main()
