"""The pack decodes each resource once per analysis (policies/mlplatform_policies/decoding.py).

pulumi-policy 1.21.0 decodes a resource's properties once per policy (``_PolicyAnalyzerServicer.Analyze``
and ``AnalyzeStack``, pulumi_policy/policy.py); with this pack's 66 policies that was 95 % of the pack's
time on an enterprise stack. The test runs the SDK's own servicer with the pack's policies in the pack's
virtualenv and counts ``MessageToDict`` calls: one per resource and call, and the same findings as the
SDK gives without the sharing.
"""

from __future__ import annotations

import json
import subprocess

from .conftest import PACK_DIR

SCRIPT = r"""
import json, sys
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import proto

decoded = []
original = json_format.MessageToDict
def counted(message, *args, **kwargs):
    decoded.append(1)
    return original(message, *args, **kwargs)
json_format.MessageToDict = counted

from mlplatform_policies import PACK_NAME, all_policies
from mlplatform_policies.decoding import share_decoding
from pulumi_policy import EnforcementLevel
from pulumi_policy import policy as sdk

def struct(value):
    message = struct_pb2.Struct()
    message.update(value)
    return message

BUCKET = {"bucket": "data", "tags": {"environment": "prod"}, "nested": [{"a": {"b": list(range(50))}}]}
KEY = {"description": "a key", "enableKeyRotation": False}
RESOURCES = [("aws:s3/bucketV2:BucketV2", "data", BUCKET), ("aws:kms/key:Key", "key", KEY)]

def findings(servicer):
    out, counts = [], []
    for kind, name, props in RESOURCES:
        urn = f"urn:pulumi:dev::p::{kind}::{name}"
        decoded.clear()
        request = proto.AnalyzeRequest(type=kind, urn=urn, name=name, properties=struct(props))
        response = servicer.Analyze(request, None)
        counts.append(len(decoded))
        out += sorted(f"{d.policyName}: {d.message}" for d in response.diagnostics)
    stack = [
        proto.AnalyzerResource(type=kind, urn=f"urn:pulumi:dev::p::{kind}::{name}", name=name,
                               properties=struct(props))
        for kind, name, props in RESOURCES
    ]
    decoded.clear()
    response = servicer.AnalyzeStack(proto.AnalyzeStackRequest(resources=stack), None)
    counts.append(len(decoded))
    out += sorted(f"{d.policyName}: {d.message}" for d in response.diagnostics)
    return out, counts

def servicer():
    return sdk._PolicyAnalyzerServicer(PACK_NAME, "0.0.1", all_policies(), EnforcementLevel.ADVISORY,
                                       None, None, None, None, None, None, None)

plain = findings(servicer())
share_decoding()
shared = findings(servicer())
print(json.dumps({"plain": plain, "shared": shared}))
"""


def test_each_resource_is_decoded_once_per_call_with_the_same_findings() -> None:
    python = PACK_DIR / ".venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", SCRIPT], cwd=PACK_DIR, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    (plain_findings, plain_counts), (shared_findings, shared_counts) = result["plain"], result["shared"]
    assert shared_findings == plain_findings and plain_findings, "the same findings, and some"
    # Without the sharing: once per resource policy (Analyze), per stack policy and resource (AnalyzeStack).
    assert min(plain_counts[:2]) > 20 and plain_counts[2] > 2 * 30
    assert shared_counts == [1, 1, 2], "one decoding per resource and call"
