"""EC2 instance types for EKS node pools.

Sources: vCPU, memory and GPUs from the EC2 instance type pages (aws.amazon.com/ec2/instance-types/
g5, g6, g6e, p4, p5, p6, c7i, c6i, m7i) and "Accelerated computing instance specifications"
(docs.aws.amazon.com/ec2/latest/instancetypes/ac.html). EFA interfaces per instance from
terraform-aws-eks-blueprints `patterns/nvidia-gpu-efa` (REFERENCE.md): p4d/p4de 4, p5/p5e 32, p5en 16,
p6-b200 8. The c7i/c6i/m7i families run Intel Xeon (Sapphire Rapids / Ice Lake) with AVX-512.
"""

from __future__ import annotations

from components.catalog import InstanceType
from components.handle import Fabric, PoolKind

_GPU = PoolKind.GPU
_CPU = PoolKind.CPU

INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("g5.xlarge", _GPU, 4, 16, 1, "A10G"),
        InstanceType("g5.2xlarge", _GPU, 8, 32, 1, "A10G"),
        InstanceType("g5.12xlarge", _GPU, 48, 192, 4, "A10G"),
        InstanceType("g6.xlarge", _GPU, 4, 16, 1, "L4"),
        InstanceType("g6.2xlarge", _GPU, 8, 32, 1, "L4"),
        InstanceType("g6.12xlarge", _GPU, 48, 192, 4, "L4"),
        InstanceType("g6e.xlarge", _GPU, 4, 32, 1, "L40S"),
        InstanceType("p4d.24xlarge", _GPU, 96, 1152, 8, "A100-40GB", Fabric.EFA, 4),
        InstanceType("p4de.24xlarge", _GPU, 96, 1152, 8, "A100-80GB", Fabric.EFA, 4),
        InstanceType("p5.48xlarge", _GPU, 192, 2048, 8, "H100", Fabric.EFA, 32),
        InstanceType("p5e.48xlarge", _GPU, 192, 2048, 8, "H200", Fabric.EFA, 32),
        InstanceType("p5en.48xlarge", _GPU, 192, 2048, 8, "H200", Fabric.EFA, 16),
        InstanceType("p6-b200.48xlarge", _GPU, 192, 2048, 8, "B200", Fabric.EFA, 8),
        InstanceType("c7i.large", _CPU, 2, 4, avx512=True),
        InstanceType("c7i.xlarge", _CPU, 4, 8, avx512=True),
        InstanceType("c7i.2xlarge", _CPU, 8, 16, avx512=True),
        InstanceType("c7i.4xlarge", _CPU, 16, 32, avx512=True),
        InstanceType("c6i.2xlarge", _CPU, 8, 16, avx512=True),
        InstanceType("c6i.4xlarge", _CPU, 16, 32, avx512=True),
        InstanceType("m7i.large", _CPU, 2, 8, avx512=True),
        InstanceType("m7i.xlarge", _CPU, 4, 16, avx512=True),
        InstanceType("m7i.2xlarge", _CPU, 8, 32, avx512=True),
    )
}

# Which catalog types each region sells: AWS's price list as cfn-lint 1.58.0 packages it
# (cfnlint/data/schemas/extensions/aws_ec2_instance/instancetype_enum.json, generated from the AWS
# pricing API, data of October 2026). Only the residency's region is recorded; the catalog cross-check
# (tests/components/aws/test_aws_catalog.py) recomputes it from cfn-lint when that is installed. Not
# sold in me-central-1 per that data: p4d, p4de, p5, p5e, p6-b200, c6i.
SOLD_IN_REGION_SOURCE = "cfn-lint 1.58.0 instancetype_enum.json (AWS pricing API, October 2026)"
SOLD_IN_REGION: dict[str, frozenset[str]] = {
    "me-central-1": frozenset(
        {
            "c7i.large",
            "c7i.xlarge",
            "c7i.2xlarge",
            "c7i.4xlarge",
            "g5.xlarge",
            "g5.2xlarge",
            "g5.12xlarge",
            "g6.xlarge",
            "g6.2xlarge",
            "g6.12xlarge",
            "g6e.xlarge",
            "m7i.large",
            "m7i.xlarge",
            "m7i.2xlarge",
            "p5en.48xlarge",
        }
    ),
}

# The networking and DNS add-ons EKS would otherwise install unmanaged, pinned per Kubernetes version,
# and the CSI drivers where a version for that minor could be sourced; an add-on without a pin here takes
# EKS's default version for the cluster's Kubernetes version on the day it is created.
# vpc-cni must be >= v1.18.4 for EFA-only interfaces (REFERENCE.md).
# - 1.33: EKS user guide version tables ("Assign IPs to Pods with the Amazon VPC CNI", "Manage CoreDNS",
#   "Manage kube-proxy"; read 2026-11-24), confirmed in public 1.33 configs (review aws.md).
# - 1.35: the versions public EKS 1.35 configurations pin (a Terraform EKS 1.35 stack's `eks_addons`:
#   vpc-cni v1.21.1-eksbuild.3, kube-proxy v1.35.0-eksbuild.2, coredns v1.13.2-eksbuild.1; CoreDNS 1.13
#   is what EKS-D 1-35 ships). Not read from `aws eks describe-addon-versions --kubernetes-version 1.35`,
#   which is the authority: run it before a first production `pulumi up`.
#   CSI drivers on 1.35: aws-ebs-csi-driver v1.56.0-eksbuild.1 (RADAR-base/RADAR-K8s-Infrastructure
#   aws/cluster/tests/test_eks_addons.tftest.hcl "all_addons_are_pinned_for_kubernetes_1_35", and public
#   1.35 Terraform stacks whose add-on maps pin it beside kube-proxy v1.35.0-eksbuild.2);
#   aws-efs-csi-driver v2.3.0-eksbuild.2 (the same 1.35 add-on maps). aws-fsx-csi-driver: no public 1.35
#   configuration pins one, so it stays unpinned (EKS's default for 1.35) until it can be sourced.
#   The 1.33 CSI drivers are unpinned likewise.
# - 1.34: kube-proxy v1.34.1-eksbuild.2 and coredns v1.12.4-eksbuild.1 from the EKS user guide version
#   tables ("Manage kube-proxy", "Manage CoreDNS"; the same edition whose 1.33 rows are the 1.33 pins
#   above, read 2026-11-29). The stored "Assign IPs to Pods with the Amazon VPC CNI" tables stop at 1.33,
#   so vpc-cni is the version public EKS 1.34 configurations pin: v1.20.4-eksbuild.2 (a Terraform 1.34
#   stack's add-on list, beside kube-proxy v1.34.0-eksbuild.2 and coredns v1.12.3-eksbuild.1, and an EKS
#   1.34 cluster's add-on inventory with the same three); not read from `aws eks describe-addon-versions
#   --kubernetes-version 1.34`, the authority: run it before a production `pulumi up`. The CSI drivers
#   are unpinned, as on 1.33. 1.34 is here so a 1.34 stack can take the one-minor step to 1.35 while EKS
#   supports it (standard support ends 2026-12-02, below).
# 1.32 (unverified pins, out of standard support since 2026-03-23) is not offered.
EKS_ADDON_VERSIONS: dict[str, dict[str, str]] = {
    "1.33": {
        "vpc-cni": "v1.20.1-eksbuild.3",
        "kube-proxy": "v1.33.5-eksbuild.2",
        "coredns": "v1.12.4-eksbuild.1",
    },
    "1.34": {
        "vpc-cni": "v1.20.4-eksbuild.2",
        "kube-proxy": "v1.34.1-eksbuild.2",
        "coredns": "v1.12.4-eksbuild.1",
    },
    "1.35": {
        "vpc-cni": "v1.21.1-eksbuild.3",
        "kube-proxy": "v1.35.0-eksbuild.2",
        "coredns": "v1.13.2-eksbuild.1",
        "aws-ebs-csi-driver": "v1.56.0-eksbuild.1",
        "aws-efs-csi-driver": "v2.3.0-eksbuild.2",
    },
}

# End of EKS standard support per minor (EKS user guide, "Understand the Kubernetes version lifecycle
# on EKS": 14 months after release; dates as endoflife.date/amazon-eks records the EKS release
# calendar, read 2026-11-26). After it, EKS bills extended support or, under the STANDARD upgrade
# policy, upgrades the control plane itself. Updated by hand.
EKS_STANDARD_SUPPORT_END: dict[str, str] = {
    "1.32": "2026-03-23",
    "1.33": "2026-07-29",
    "1.34": "2026-12-02",
    "1.35": "2027-03-27",
}

# The account of the EKS add-on image registry in each region (EKS user guide, "View Amazon container
# image registries for Amazon EKS add-ons"; opt-in regions such as me-central-1 have their own).
EKS_IMAGE_REGISTRY_ACCOUNT: dict[str, str] = {"me-central-1": "759879836304"}


def eks_image_registry(region: str) -> str:
    """The region's EKS add-on image registry host: images pulled from it stay in the region."""
    return f"{EKS_IMAGE_REGISTRY_ACCOUNT[region]}.dkr.ecr.{region}.amazonaws.com"
