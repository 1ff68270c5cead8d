"""``plan --diagram`` (issue 41, item 6): the platform a plan creates, drawn from the plan alone, as an SVG
that parses, names every pool with its size, and renders to a picture; and ``plan --json`` that is the
same bytes for an unchanged stack (newcomer review, section 4: 96 of 453 resources differed)."""

from __future__ import annotations

import io
import json
import random
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import cairosvg
import pytest
from PIL import Image
from typer.testing import CliRunner

from mlplatform.cli import app
from mlplatform.diagram import picture, write_diagram
from mlplatform.graph import Plan
from mlplatform.plan import REPO_ROOT
from mlplatform.summary import summarize

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize("stack", ["aws-smb-dev", "azure-enterprise-prod"])
def test_the_diagram_names_every_pool_with_its_size_and_renders(
    stack: str, planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    plan = planned(stack)
    path = tmp_path / "deep" / f"{stack}.svg"
    write_diagram(plan, stack, path)
    root = ET.parse(path).getroot()  # well-formed, or this raises
    assert root.tag == f"{SVG}svg"
    words = [t.text or "" for t in root.iter(f"{SVG}text")]
    pools = summarize(plan, stack).pools
    assert pools
    for pool in pools:
        assert any(w.startswith(f"pool {pool.name}") for w in words), (pool.name, words)
        assert any(f"{pool.instance_type}, {pool.min_size} to {pool.max_size} nodes" in w for w in words)
    drawn = picture(plan, stack)
    # Network, cluster, stores and registry, and the reachability contract's flows, each drawn and listed.
    assert any(w.startswith(f"network {drawn.network}") for w in words)
    assert any(w.startswith(("EKS cluster", "AKS cluster")) for w in words)
    assert any(w.startswith(("ECR repository", "Azure Container Registry")) for w in words)
    assert "ml-registry/registry" in drawn.workloads and "ml-inference/inference" in drawn.workloads
    assert ("ml-inference/inference", "ml-registry/registry", "5000") in drawn.flows
    assert len(root.findall(f".//{SVG}path")) >= len(drawn.flows)
    for number, (source, destination, ports) in enumerate(drawn.flows, start=1):
        assert f"{number}. {source} → {destination} : {ports}" in words
    # The picture README shows is this command's, for the same plan (regenerate: plan STACK --diagram).
    shipped = REPO_ROOT / "docs" / "diagrams" / f"{stack}.svg"
    assert shipped.read_text() == path.read_text(), (
        f"{shipped} is stale: mlplatform plan {stack} --diagram {shipped}"
    )
    # It opens as an image: cairosvg (Cairo) renders it, and the PNG has the SVG's size.
    png = cairosvg.svg2png(url=str(path))
    image = Image.open(io.BytesIO(png))
    assert image.size == (int(root.attrib["width"]), int(root.attrib["height"]))
    assert image.convert("L").getextrema() == (0, 255)  # black words on a white page, not blank


def test_an_unwritable_diagram_path_is_refused_before_planning(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = CliRunner().invoke(app, ["plan", "aws-smb-dev", "--diagram", str(tmp_path / "file" / "x.svg")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "--diagram" in result.stderr and "is a file, not a folder" in result.stderr


def test_plan_json_is_the_same_bytes_whatever_order_the_engine_registered_in(
    planned: Callable[[str], Plan],
) -> None:
    """The engine registers concurrently: resource order and each resource's dependency order vary run to
    run. The JSON must not: the same plan in another registration order writes the same bytes."""
    plan = planned("aws-smb-dev")
    shuffle = random.Random(41)
    resources = [
        replace(
            r,
            dependencies=tuple(shuffle.sample(r.dependencies, len(r.dependencies))),
            # A map built from a set or a merge (tags, labels) comes in another key order.
            inputs=dict(reversed(list(r.inputs.items()))),
        )
        for r in shuffle.sample(plan.resources, len(plan.resources))
    ]
    other = replace(plan, resources=resources)
    assert [r.urn for r in other.resources] != [r.urn for r in plan.resources]
    first, second = json.dumps(plan.to_dict(), indent=2), json.dumps(other.to_dict(), indent=2)
    assert first == second
    # Still in an order the engine could have registered: parents, providers and dependencies first.
    seen: set[str] = set()
    for resource in plan.to_dict()["resources"]:
        earlier = {resource["parent"], *resource["dependencies"]} - {None}
        if resource["provider"]:
            earlier.add(resource["provider"].rsplit("::", 1)[0])
        assert earlier <= seen, (resource["urn"], earlier - seen)
        seen.add(resource["urn"])
