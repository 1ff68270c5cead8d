"""Plausible engine answers for an offline plan: ids, ARNs, endpoints and invoke results.

The program under plan reads some outputs of the resources it creates (a cluster's endpoint, an OIDC
issuer, a role's ARN) and calls a few provider functions (availability zones, caller identity). These
answers are shaped like the cloud's so the program runs its real code path; they are never used for
anything but the plan, and every value says it is a mock (account 123456789012, ``mock`` in ids).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pulumi

from components.azure.arm import ARM_TRANSPORT
from components.catalog.aws import SOLD_IN_REGION
from components.catalog.azure import VM_SIZES

ACCOUNT_ID = "123456789012"
SUBSCRIPTION_ID = "00000000-0000-0000-0000-000000000000"
TENANT_ID = "00000000-0000-0000-0000-000000000001"
# The minors the mocked ARM lists for a region (a mock answer; the live list is read under preview).
AKS_OFFERED_VERSIONS = ("1.35", "1.36", "1.37")
# The Cloud Control type an EC2 capacity reservation is read as (components/aws/reservations.py).
CAPACITY_RESERVATION = "AWS::EC2::CapacityReservation"
# What AKS returns for `listClusterUserCredential?format=exec` on an Entra ID cluster: a kubelogin exec
# plugin that logs in with device code (AKS docs, "kubelogin"); the server id is AKS's Entra server
# application, the client id AKS's Entra client application (Azure/kubelogin README).
AKS_EXEC_KUBECONFIG = (
    "apiVersion: v1\nkind: Config\nclusters:\n- name: mock\n  cluster:\n"
    "    server: https://mock.privatelink.uaenorth.azmk8s.io:443\n    certificate-authority-data: bW9jaw==\n"
    "contexts:\n- name: mock\n  context: {cluster: mock, user: clusterUser_mock}\ncurrent-context: mock\n"
    "users:\n- name: clusterUser_mock\n  user:\n    exec:\n"
    "      apiVersion: client.authentication.k8s.io/v1beta1\n      command: kubelogin\n"
    "      args: [get-token, --environment, AzurePublicCloud,"
    " --server-id, 6dae42f8-4368-4678-94ff-3960e28e3630,"
    f" --client-id, 80faf920-1908-4b52-b5ef-a8e7bedfc67a, --tenant-id, {TENANT_ID}, --login, devicecode]\n"
    "      installHint: kubelogin is not installed\n      provideClusterInfo: false\n"
)


def _short_hash(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]


def _aws_physical_name(token: str, name: str, inputs: dict[str, Any]) -> str:
    """The name AWS ends up with: the given one; a name prefix plus the provider's 26-digit unique id
    (terraform-plugin-sdk ``helper/id``); else Pulumi's autoname (the resource name, ``-``, 7 chars)."""
    if inputs.get("name"):
        return str(inputs["name"])
    if inputs.get("namePrefix"):
        return f"{inputs['namePrefix']}{int(_short_hash(token, name), 16):026d}"
    return f"{name}-{_short_hash(token, name)[:7]}"


def _aws_outputs(token: str, name: str, inputs: dict[str, Any], region: str) -> dict[str, Any]:
    service = token.split(":")[1].split("/", maxsplit=1)[0]
    physical = _aws_physical_name(token, name, inputs)
    outputs: dict[str, Any] = {
        "arn": f"arn:aws:{service}:{region}:{ACCOUNT_ID}:{physical}",
        "name": physical,
    }
    extra = _AWS_EXTRA.get(token)
    if extra is not None:
        outputs.update(extra(physical, region, inputs))
    return outputs


def _eks_cluster(physical: str, region: str, _inputs: dict[str, Any]) -> dict[str, Any]:
    oidc_id = _short_hash(physical).upper() * 4
    return {
        "endpoint": f"https://{oidc_id}.gr7.{region}.eks.amazonaws.com",
        "certificateAuthority": {"data": "bW9jay1jYQ=="},
        "identities": [{"oidcs": [{"issuer": f"https://oidc.eks.{region}.amazonaws.com/id/{oidc_id}"}]}],
        "vpcConfig": {
            **_inputs.get("vpcConfig", {}),
            "clusterSecurityGroupId": f"sg-{_short_hash(physical)}",
        },
    }


_AWS_EXTRA: dict[str, Callable[[str, str, dict[str, Any]], dict[str, Any]]] = {
    "aws:eks/cluster:Cluster": _eks_cluster,
    "aws:s3/bucketV2:BucketV2": lambda p, r, i: {
        "bucket": i.get("bucket", p),
        "bucketDomainName": f"{p}.s3.amazonaws.com",
    },
    "aws:s3/bucket:Bucket": lambda p, r, i: {
        "bucket": i.get("bucket", p),
        "bucketDomainName": f"{p}.s3.amazonaws.com",
    },
    "aws:ecr/repository:Repository": lambda p, r, i: {
        "repositoryUrl": f"{ACCOUNT_ID}.dkr.ecr.{r}.amazonaws.com/{p}",
        "registryId": ACCOUNT_ID,
    },
    "aws:fsx/lustreFileSystem:LustreFileSystem": lambda p, r, i: {
        "dnsName": f"fs-{_short_hash(p)}.fsx.{r}.amazonaws.com",
        "mountName": _short_hash(p, "mount"),
    },
    "aws:efs/fileSystem:FileSystem": lambda p, r, i: {
        "dnsName": f"fs-{_short_hash(p)}.efs.{r}.amazonaws.com"
    },
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider": lambda p, r, i: {
        "url": str(i.get("url", "")).removeprefix("https://"),
    },
    # RDS: the endpoint's host name and the RDS-managed master secret (pulumi-aws rds.Instance outputs
    # ``address`` and ``master_user_secrets``).
    "aws:rds/instance:Instance": lambda p, r, i: {
        "address": f"{p}.{_short_hash(p)}.{r}.rds.amazonaws.com",
        "masterUserSecrets": [
            {
                "secretArn": f"arn:aws:secretsmanager:{r}:{ACCOUNT_ID}:secret:rds!db-{_short_hash(p)}",
                "kmsKeyId": i.get("masterUserSecretKmsKeyId", ""),
                "secretStatus": "active",
            }
        ],
    },
    "aws:kms/key:Key": lambda p, r, i: {"keyId": f"{_short_hash(p)}-0000-0000-0000-000000000000"},
    "aws:ec2/launchTemplate:LaunchTemplate": lambda p, r, i: {"latestVersion": 1},
    "aws:eks/nodeGroup:NodeGroup": lambda p, r, i: {
        "nodeGroupName": i.get("nodeGroupName", p),
        # EKS names a managed node group's Auto Scaling group eks-<node group>-<uuid>.
        "resources": [
            {"autoscalingGroups": [{"name": f"eks-{p}-{_short_hash(p)}-0000-0000-0000-000000000000"}]}
        ],
    },
    "aws:iam/role:Role": lambda p, r, i: {
        "arn": f"arn:aws:iam::{ACCOUNT_ID}:role/{p}",
        "uniqueId": "AROAMOCK",
    },
}


# The input that names the resource in Azure, where it is not ``resourceName``: what ARM reads back as
# ``name`` (a resource group's own name, a registry's).
_AZURE_NAME_INPUT = {
    "azure-native:resources:ResourceGroup": "resourceGroupName",
    "azure-native:containerregistry:Registry": "registryName",
}


def _azure_outputs(token: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    physical = (
        inputs.get(_AZURE_NAME_INPUT.get(token, "resourceName"))
        or inputs.get("name")
        or f"{name}{_short_hash(token, name)}"
    )
    group = inputs.get("resourceGroupName", "mock-rg")
    provider_type = token.split(":")[1]
    outputs: dict[str, Any] = {
        "name": physical,
        "azureApiVersion": "mock",
        "id": f"/subscriptions/{SUBSCRIPTION_ID}/resourceGroups/{group}/providers/{provider_type}/{physical}",
    }
    identity = inputs.get("identity")
    if isinstance(identity, dict):
        outputs["identity"] = _identity(physical, identity)
    extra = _AZURE_EXTRA.get(token)
    if extra is not None:
        outputs.update(extra(physical, inputs))
    return outputs


_AZURE_EXTRA: dict[str, Callable[[str, dict[str, Any]], dict[str, Any]]] = {
    "azure-native:resources:ResourceGroup": lambda p, i: {
        "id": f"/subscriptions/{SUBSCRIPTION_ID}/resourceGroups/{p}"
    },
    "azure-native:containerservice:ManagedCluster": lambda p, i: {
        "oidcIssuerProfile": {
            "enabled": True,
            "issuerURL": f"https://uaenorth.oic.prod-aks.azure.com/{TENANT_ID}/{p}/",
        },
        "privateFQDN": f"{p}.privatelink.uaenorth.azmk8s.io",
        "fqdn": f"{p}.hcp.uaenorth.azmk8s.io",
        "identityProfile": {"kubeletidentity": {"objectId": TENANT_ID, "clientId": TENANT_ID}},
    },
    "azure-native:managedidentity:UserAssignedIdentity": lambda p, i: {
        "clientId": f"{_short_hash(p)}-0000-0000-0000-000000000000",
        "principalId": f"{_short_hash(p, 'principal')}-0000-0000-0000-000000000000",
        "tenantId": TENANT_ID,
    },
    "azure-native:keyvault:Vault": lambda p, i: {
        "name": i.get("vaultName", p),
        "properties": {
            **i.get("properties", {}),
            "vaultUri": f"https://{i.get('vaultName', p)}.vault.azure.net/",
        },
    },
    "azure-native:keyvault:Key": lambda p, i: _key_vault_key(i),
    "azure-native:containerregistry:Registry": lambda p, i: {"loginServer": f"{p}.azurecr.io"},
    "azure-native:storage:StorageAccount": lambda p, i: {
        "primaryEndpoints": {"blob": f"https://{p}.blob.core.windows.net/"}
    },
}


def _identity(physical: str, identity: dict[str, Any]) -> dict[str, Any]:
    """A managed identity block as ARM reads it back: a system-assigned identity gains its principal and
    tenant; user-assigned identities (sent as a list of ids by azure-native v3) come back as a map."""
    read = dict(identity)
    if "SystemAssigned" in str(identity.get("type", "")):
        read["principalId"] = f"{_short_hash(physical, 'principal')}-0000-0000-0000-000000000000"
        read["tenantId"] = TENANT_ID
    assigned = identity.get("userAssignedIdentities")
    if isinstance(assigned, list):
        read["userAssignedIdentities"] = {
            i: {"principalId": f"{_short_hash(i)}-0000-0000-0000-000000000000"} for i in assigned
        }
    return read


def _key_vault_key(inputs: dict[str, Any]) -> dict[str, Any]:
    """A key as Key Vault reads it back: the versionless URI, the URI of its current version (32 hex
    characters, Key Vault "About keys") and the ARM id under its vault."""
    vault, key, group = inputs["vaultName"], inputs["keyName"], inputs.get("resourceGroupName", "mock-rg")
    uri = f"https://{vault}.vault.azure.net/keys/{key}"
    return {
        "name": key,
        "keyUri": uri,
        "keyUriWithVersion": f"{uri}/{hashlib.sha256(uri.encode()).hexdigest()[:32]}",
        "id": f"/subscriptions/{SUBSCRIPTION_ID}/resourceGroups/{group}/providers/Microsoft.KeyVault/vaults/"
        f"{vault}/keys/{key}",
    }


def _pushed_image(inputs: dict[str, Any]) -> dict[str, Any]:
    """What pulumi-docker-build reads back after a push: the manifest's digest, and ``ref``, one pushed
    tag with that digest (``Image.ref``). Nothing is built offline; the digest is a hash of the inputs
    that name the build, so it is stable per build and differs between targets."""
    named = [str(inputs.get(k)) for k in ("tags", "target", "buildArgs", "dockerfile")]
    digest = f"sha256:{hashlib.sha256('/'.join(named).encode()).hexdigest()}"
    tag = inputs["tags"][0]
    return {"digest": digest, "ref": f"{tag}@{digest}", "contextHash": _short_hash(*named)}


def _invoke_result(token: str, args: dict[str, Any]) -> dict[str, Any]:
    region = args.get("region", "me-central-1")
    results: dict[str, dict[str, Any]] = {
        "aws:index/getAvailabilityZones:getAvailabilityZones": {
            "names": [f"{region}a", f"{region}b", f"{region}c"],
            "zoneIds": ["mec1-az1", "mec1-az2", "mec1-az3"],
        },
        "aws:index/getCallerIdentity:getCallerIdentity": {
            "accountId": ACCOUNT_ID,
            "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/mock",
            "userId": "MOCK",
        },
        # The caller is a user here; for a user IAM's session context is the caller itself.
        "aws:iam/getSessionContext:getSessionContext": {
            "arn": args.get("arn", ""),
            "issuerArn": args.get("arn", ""),
        },
        "aws:index/getPartition:getPartition": {"partition": "aws", "dnsSuffix": "amazonaws.com"},
        "aws:index/getRegion:getRegion": {"name": region, "region": region},
        # vCPU quotas the preflight reads (components/aws/preflight.py): offline, a quota that covers
        # any stack; the account's real values are read under `pulumi preview`.
        "aws:servicequotas/getServiceQuota:getServiceQuota": {"value": 1_000_000.0},
        # The Auto Scaling service-linked role the preflight looks up (components/aws/preflight.py).
        "aws:iam/getRole:getRole": {
            "name": args.get("name", ""),
            "arn": f"arn:aws:iam::{ACCOUNT_ID}:role/aws-service-role/autoscaling.amazonaws.com/"
            + args.get("name", ""),
        },
        "azure-native:authorization:getClientConfig": {
            "clientId": TENANT_ID,
            "objectId": TENANT_ID,
            "subscriptionId": SUBSCRIPTION_ID,
            "tenantId": TENANT_ID,
        },
        # An ARM bearer token for the provider's login; only the mocked ARM (``_arm``) reads it.
        "azure-native:authorization:getClientToken": {"token": "mock-arm-token"},
        # What the audit preflights read where a stack relies on what it does not create
        # (components/aws/audit.py, components/azure/audit.py): offline, an account that has it, set up
        # as the preflight requires; the account's real state is read under `pulumi preview`.
        "aws:guardduty/getDetector:getDetector": {
            "id": "mock-detector",
            "status": "ENABLED",
            "features": [
                {"name": name, "status": "ENABLED", "additionalConfigurations": []}
                for name in ("EKS_AUDIT_LOGS", "RUNTIME_MONITORING")
            ],
        },
        "aws:cloudcontrol/getResource:getResource": {
            "identifier": args.get("identifier", ""),
            "typeName": args.get("typeName", ""),
            "properties": json.dumps(
                {"IsLogging": True, "IsMultiRegionTrail": True, "EnableLogFileValidation": True}
            ),
        },
        "azure-native:security:getPricing": {
            "name": args.get("pricingName", ""),
            "pricingTier": "Standard",
        },
        # ECR GetAuthorizationToken: the user is always AWS, the password a token (ECR API reference).
        "aws:ecr/getAuthorizationToken:getAuthorizationToken": {
            "userName": "AWS",
            "password": "mock-ecr-token",
            "authorizationToken": base64.b64encode(b"AWS:mock-ecr-token").decode(),
            "proxyEndpoint": f"https://{ACCOUNT_ID}.dkr.ecr.{region}.amazonaws.com",
        },
    }
    if token == "command:local:run":
        # The one local command the program reads, `az acr login --expose-token` (components/azure/
        # registry.py): its stdout is the token.
        return {**args, "stdout": "mock-acr-token", "stderr": ""}
    if token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
        # Answer from the region's recorded sales (components/catalog/aws.py, AWS pricing data via
        # cfn-lint), not "everything offered": a type the region does not sell is not offered here
        # either. Per-zone availability is not in that data; the live check runs under `pulumi preview`.
        wanted = [v for f in args.get("filters", []) if f.get("name") == "instance-type" for v in f["values"]]
        offered = [t for t in wanted if t in SOLD_IN_REGION.get(region, frozenset())]
        return {
            "instanceTypes": offered,
            "locations": [f"{region}a"] * len(offered),
            "locationTypes": ["availability-zone"] * len(offered),
        }
    return results.get(token, {})


def _arm(
    unregistered: frozenset[str],
    zone_restricted: frozenset[str],
    offered_versions: tuple[str, ...],
    encrypted: Mapping[str, str],
    container_scopes: Mapping[str, str],
) -> httpx.MockTransport:
    """The ARM reads the Azure program makes itself (components/azure/arm.py), answered as ARM does.

    Features API ("Features - Get", 2021-07-01, what ``az feature show`` reads): ``Registered``, or
    ``NotRegistered`` for the feature names in ``unregistered``. Resource SKUs ("Resource Skus - List",
    Microsoft.Compute 2021-07-01, what ``az vm list-skus`` reads): every size of the project's catalog in
    zones 1-3 of the asked location, a mock answer (per-zone offers are known only to a live
    subscription, read under ``pulumi preview``); sizes in ``zone_restricted`` carry a Zone restriction
    (``NotAvailableForSubscription``) on all three. Kubernetes versions ("Managed Clusters - List
    Kubernetes Versions", containerservice 2025-09-01, what ``az aks get-versions`` reads): the minors in
    ``offered_versions``, generally available with standard support. Anything else, or a request without
    a bearer token, gets ARM's error body, so the program's parsing of both is exercised. Storage
    accounts ("Storage Accounts - Get Properties", what the audit archive's preview reads,
    components/azure/audit.py): present, as on every ``pulumi up`` after the first, so the plan shows the
    archive's immutability locked; the first ``up`` (absent, 404) is the program's other path. An account
    named in ``encrypted`` reports that Key Vault key (``properties.encryption.keyvaultproperties``).
    PostgreSQL flexible servers ("Servers - Get"): those ``encrypted`` names, with their key's URI in
    ``properties.dataEncryption.primaryKeyURI``; any other is absent (404). Blob containers ("Blob
    Containers - Get"): those ``container_scopes`` names (``<account>/<container>``), with that default
    encryption scope in ``properties.defaultEncryptionScope`` (``$account-encryption-key`` for a container
    made without one); any other is absent (404), as in a new stack.
    """
    base = rf"^/subscriptions/{SUBSCRIPTION_ID}/providers"
    features_path = re.compile(rf"{base}/Microsoft\.Features/providers/([\w.]+)/features/(\w+)$")
    skus_path = re.compile(rf"{base}/Microsoft\.Compute/skus$")
    versions_path = re.compile(rf"{base}/Microsoft\.ContainerService/locations/(\w+)/kubernetesVersions$")
    location_filter = re.compile(r"^location eq '(\w+)'$")
    group = rf"^/subscriptions/{SUBSCRIPTION_ID}/resourceGroups/[\w.-]+/providers"
    account_path = re.compile(rf"{group}/Microsoft\.Storage/storageAccounts/(\w+)$")
    server_path = re.compile(rf"{group}/Microsoft\.DBforPostgreSQL/flexibleServers/([\w-]+)$")
    container_path = re.compile(
        rf"{group}/Microsoft\.Storage/storageAccounts/(\w+)/blobServices/default/containers/([\w-]+)$"
    )
    vault = "https://mlp-existing-kv.vault.azure.net"

    def answer(request: httpx.Request) -> httpx.Response:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer" or not token.strip():
            return _arm_error(401, "AuthenticationFailed", "Authentication failed.")
        path, params = request.url.path, request.url.params
        if request.method == "GET" and "api-version" in params:
            if match := features_path.match(path):
                namespace, name = match.groups()
                return httpx.Response(200, json=_feature(path, namespace, name, name not in unregistered))
            if versions_path.match(path):
                return httpx.Response(200, json=_kubernetes_versions(offered_versions))
            if match := account_path.match(path):
                account: dict[str, Any] = {
                    "id": path,
                    "name": match.group(1),
                    "type": "Microsoft.Storage/storageAccounts",
                }
                if key := encrypted.get(match.group(1)):
                    in_vault = {"keyname": key, "keyvaulturi": vault}
                    account["properties"] = {
                        "encryption": {"keySource": "Microsoft.Keyvault", "keyvaultproperties": in_vault}
                    }
                return httpx.Response(200, json=account)
            if (match := server_path.match(path)) and (key := encrypted.get(match.group(1))):
                encryption = {"type": "AzureKeyVault", "primaryKeyURI": f"{vault}/keys/{key}"}
                server = {"id": path, "name": match.group(1), "properties": {"dataEncryption": encryption}}
                return httpx.Response(200, json=server)
            if (match := container_path.match(path)) and (
                default_scope := container_scopes.get("/".join(match.groups()))
            ):
                properties = {"defaultEncryptionScope": default_scope, "denyEncryptionScopeOverride": False}
                container = {"id": path, "name": match.group(2), "properties": properties}
                return httpx.Response(200, json=container)
            location = location_filter.match(params.get("$filter", ""))
            if skus_path.match(path) and location:
                skus = [_vm_sku(size, location.group(1), size in zone_restricted) for size in VM_SIZES]
                return httpx.Response(200, json={"value": skus})
        return _arm_error(404, "NotFound", f"No mock answer for {request.method} {request.url}.")

    return httpx.MockTransport(answer)


def _feature(feature_id: str, namespace: str, name: str, registered: bool) -> dict[str, Any]:
    return {
        "id": feature_id,
        "name": f"{namespace}/{name}",
        "properties": {"state": "Registered" if registered else "NotRegistered"},
        "type": "Microsoft.Features/providers/features",
    }


def _kubernetes_versions(minors: tuple[str, ...]) -> dict[str, Any]:
    return {
        "values": [
            {
                "version": minor,
                "isPreview": False,
                "capabilities": {"supportPlan": ["KubernetesOfficial", "AKSLongTermSupport"]},
                "patchVersions": {f"{minor}.0": {"upgrades": []}},
            }
            for minor in minors
        ]
    }


def _vm_sku(size: str, location: str, zone_restricted: bool) -> dict[str, Any]:
    zones = ["1", "2", "3"]
    restrictions = [
        {
            "type": "Zone",
            "values": [location],
            "restrictionInfo": {"locations": [location], "zones": zones},
            "reasonCode": "NotAvailableForSubscription",
        }
    ]
    return {
        "resourceType": "virtualMachines",
        "name": size,
        "locations": [location],
        "locationInfo": [{"location": location, "zones": zones}],
        "capabilities": [{"name": "EncryptionAtHostSupported", "value": "True"}],
        "restrictions": restrictions if zone_restricted else [],
    }


def _arm_error(status: int, code: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message}})


# pulumi-tls's outputs: which PEM block each resource yields under which output name.
_TLS_PEMS = {
    "tls:index/privateKey:PrivateKey": {"privateKeyPem": "EC PRIVATE KEY", "publicKeyPem": "PUBLIC KEY"},
    "tls:index/certRequest:CertRequest": {"certRequestPem": "CERTIFICATE REQUEST"},
    "tls:index/selfSignedCert:SelfSignedCert": {"certPem": "CERTIFICATE"},
    "tls:index/locallySignedCert:LocallySignedCert": {"certPem": "CERTIFICATE"},
}
# Where the mock certificates' validity starts: a fixed instant, so that a second plan is the same.
_TLS_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _pem(label: str, *parts: str) -> str:
    """A PEM block (RFC 7468) whose body is derived from ``parts``: the same inputs, the same block, and
    new ones (a new CA, a new request, a new lifetime) a new one, as the provider re-issues on
    replacement. Its shape, not a key or certificate anyone could use."""
    body = base64.b64encode(
        b"".join(hashlib.sha256(f"{label}/{i}/{'/'.join(parts)}".encode()).digest() for i in range(6))
    ).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----", ""])


def _tls_outputs(token: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """pulumi-tls's computed outputs: PEM blocks, stable per logical name and inputs, and a certificate's
    validity window from its ``validityPeriodHours``."""
    # A new ``earlyRenewalHours`` is an update in place, not a new certificate
    # (hashicorp/terraform-provider-tls#34).
    seed = json.dumps(
        {k: v for k, v in inputs.items() if k != "earlyRenewalHours"}, sort_keys=True, default=str
    )
    outputs: dict[str, Any] = {key: _pem(label, token, name, seed) for key, label in _TLS_PEMS[token].items()}
    if "validityPeriodHours" in inputs:
        end = _TLS_EPOCH + timedelta(hours=int(inputs["validityPeriodHours"]))
        outputs |= {
            "validityStartTime": _TLS_EPOCH.isoformat().replace("+00:00", "Z"),
            "validityEndTime": end.isoformat().replace("+00:00", "Z"),
            "readyForRenewal": False,
        }
    return outputs


@dataclass(frozen=True)
class ExistingAccount:
    """What the cloud account (AWS) or subscription (Azure) already holds that the program looks up before
    it registers anything: nothing in a fresh one (a new stack); a test of an existing stack's upgrade
    names what that stack made.

    - ``aliases``: KMS aliases (components/aws/keys.py ``refuse_silent_key_moves``);
    - ``databases``: RDS instances, identifier -> engine, and ``log_groups``: CloudWatch log group names
      (components/aws/registry_database.py ``registry_database_identity``);
    - ``agent_pools``: AKS agent pools, ``<resource group>/<cluster>/<pool>`` -> the pool's properties as
      the AgentPool API returns them (components/azure/node_pools.py ``warn_system_pool_drift``);
    - ``node_groups``: EKS managed node groups, ``<cluster>/<node group>`` -> its ``scalingConfig``
      (``minSize``, ``maxSize``, ``desiredSize``) as DescribeNodegroup returns it
      (components/aws/node_pools.py ``refuse_unreachable_sizes``);
    - ``encrypted_stores``: storage accounts and PostgreSQL flexible servers by name -> the Key Vault key
      each is encrypted with, and ``container_scopes``: blob containers, ``<account>/<container>`` -> the
      default encryption scope each was made with (components/azure/key_moves.py
      ``refuse_silent_key_moves``);
    - ``reservations``: EC2 capacity reservations by id (``cr-…``) -> their properties as Cloud Control
      GetResource reads ``AWS::EC2::CapacityReservation`` (its CloudFormation resource schema, as the awscc
      provider's ``awscc_ec2_capacity_reservation`` data source lists it: ``InstanceType``,
      ``AvailabilityZone``, ``State``, ``ReservationType`` ``default``/``capacity-block``, ``StartDate``,
      ``EndDate``, ``InstancePlatform``, ``Tenancy``...; components/aws/reservations.py)."""

    aliases: frozenset[str] = frozenset()
    databases: Mapping[str, str] = field(default_factory=dict)
    log_groups: frozenset[str] = frozenset()
    agent_pools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    node_groups: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    encrypted_stores: Mapping[str, str] = field(default_factory=dict)
    container_scopes: Mapping[str, str] = field(default_factory=dict)
    reservations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def instances(self, filters: list[dict[str, Any]]) -> list[str]:
        """DescribeDBInstances' filters (RDS API reference: ``db-instance-id`` and ``engine`` are the two
        the program may send; any other is refused rather than ignored)."""
        found = dict(self.databases)
        for each in filters:
            values = set(each["values"])
            if each["name"] == "engine":
                found = {i: e for i, e in found.items() if e in values}
            elif each["name"] == "db-instance-id":
                found = {i: e for i, e in found.items() if i in values}
            else:
                raise ValueError(f"the mocks do not filter RDS instances by {each['name']}")
        return sorted(found)


class PlanMocks(pulumi.runtime.Mocks):
    """Engine answers for every resource and invoke, from the stack's provider configuration."""

    def __init__(
        self,
        aws_region: str,
        azure_location: str,
        unregistered_features: frozenset[str] = frozenset(),
        zone_restricted_sizes: frozenset[str] = frozenset(),
        offered_versions: tuple[str, ...] = AKS_OFFERED_VERSIONS,
        existing: ExistingAccount | None = None,
    ) -> None:
        self.aws_region = aws_region
        self.azure_location = azure_location
        self.existing = existing or ExistingAccount()
        # The Azure program reads subscription features and VM sizes straight from ARM (components/azure/
        # arm.py); offline, ARM is this answer. Set in the plan's own context (run_plan), so it ends there.
        existing = self.existing
        ARM_TRANSPORT.set(
            _arm(
                unregistered_features,
                zone_restricted_sizes,
                offered_versions,
                existing.encrypted_stores,
                existing.container_scopes,
            )
        )

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        token, name, inputs = args.typ, args.name, dict(args.inputs)
        region = inputs.get("region") or self.aws_region
        if token.startswith("pulumi:providers:"):
            return f"{name}-provider-id", inputs
        if token.startswith("aws:"):
            outputs = _aws_outputs(token, name, inputs, region)
            # Computed outputs win over echoed inputs (an EKS cluster's vpcConfig gains its security group).
            return f"{outputs['name']}-id", {**inputs, **outputs}
        if token.startswith("azure-native:"):
            outputs = _azure_outputs(token, name, inputs)
            # Computed outputs win over echoed inputs: what Azure reads back (issuer URL, identity map).
            location = inputs.get("location", self.azure_location)
            return outputs["id"], {**inputs, **outputs, "location": location}
        if token == "docker-build:index:Image":
            return f"{name}-id", {**inputs, **_pushed_image(inputs)}
        if token == "command:local:Command":
            # A command's stdout and stderr exist once it has run (pulumi-command ``Command``); the program
            # waits on them (components/images.py: workloads after their image's signature).
            return f"{name}-id", {**inputs, "stdout": "", "stderr": ""}
        if token == "random:index/randomString:RandomString":
            # Lowercase letters and digits of the asked length, stable per logical name.
            length = int(inputs["length"])
            return f"{name}-id", {**inputs, "result": _short_hash(token, name).ljust(length, "0")[:length]}
        if token == "random:index/randomId:RandomId":
            # ``byte_length`` random bytes as lowercase hex (pulumi-random RandomId), stable per name.
            digits = 2 * int(inputs["byteLength"])
            return f"{name}-id", {**inputs, "hex": _short_hash(token, name).ljust(digits, "0")[:digits]}
        if token.startswith("tls:"):
            return f"{name}-id", {**inputs, **_tls_outputs(token, name, inputs)}
        if token == "random:index/randomPassword:RandomPassword":
            # Letters and digits of the asked length, stable per logical name (a placeholder, not a secret).
            length = int(inputs["length"])
            return f"{name}-id", {**inputs, "result": (_short_hash(token, name) * length)[:length]}
        return f"{name}-id", inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        if args.token == "azure-native:containerservice:listManagedClusterUserCredentials":
            return {
                "kubeconfigs": [
                    {"name": "clusterUser", "value": base64.b64encode(AKS_EXEC_KUBECONFIG.encode()).decode()}
                ]
            }, []
        if args.token == "aws:kms/getAlias:getAlias":
            name = str(args.args.get("name", ""))
            if name not in self.existing.aliases:
                # The provider's lookup fails for an alias the account does not have: a failed invoke.
                return {}, [("name", f"reading KMS Alias ({name}): couldn't find resource")]
            result = {
                "name": name,
                "arn": f"arn:aws:kms:{self.aws_region}:{ACCOUNT_ID}:{name}",
                "targetKeyId": f"{_short_hash(name)}-key-id",
            }
            return result, []
        if args.token == "aws:rds/getInstances:getInstances":
            identifiers = self.existing.instances(list(args.args.get("filters") or []))
            arns = [f"arn:aws:rds:{self.aws_region}:{ACCOUNT_ID}:db:{i}" for i in identifiers]
            return {"instanceIdentifiers": identifiers, "instanceArns": arns, "id": self.aws_region}, []
        if args.token == "aws:cloudwatch/getLogGroups:getLogGroups":
            prefix = str(args.args.get("logGroupNamePrefix") or "")
            names = sorted(g for g in self.existing.log_groups if g.startswith(prefix))
            arns = [f"arn:aws:logs:{self.aws_region}:{ACCOUNT_ID}:log-group:{g}" for g in names]
            return {"logGroupNames": names, "arns": arns, "id": self.aws_region}, []
        if args.token == "aws:eks/getNodeGroups:getNodeGroups":
            cluster = str(args.args.get("clusterName"))
            groups = sorted(
                g for c, _, g in (key.partition("/") for key in self.existing.node_groups) if c == cluster
            )
            if not groups:
                # ListNodegroups answers ResourceNotFoundException for a cluster that does not exist (EKS
                # API reference, ListNodegroups errors): a failed invoke. The mocked account has a
                # cluster where it has node groups.
                return {}, [("clusterName", f"listing EKS Node Groups: ResourceNotFoundException: {cluster}")]
            return {"clusterName": cluster, "names": groups, "id": cluster}, []
        if args.token == "aws:eks/getNodeGroup:getNodeGroup":
            cluster, group = str(args.args.get("clusterName")), str(args.args.get("nodeGroupName"))
            scaling = self.existing.node_groups.get(f"{cluster}/{group}")
            if scaling is None:
                return {}, [
                    ("nodeGroupName", f"reading EKS Node Group ({cluster}:{group}): couldn't find resource")
                ]
            described: dict[str, Any] = {
                "clusterName": cluster,
                "nodeGroupName": group,
                "id": f"{cluster}:{group}",
                "status": "ACTIVE",
                "scalingConfigs": [dict(scaling)],
            }
            return described, []
        if (
            args.token == "aws:cloudcontrol/getResource:getResource"
            and args.args.get("typeName") == CAPACITY_RESERVATION
        ):
            identifier = str(args.args.get("identifier"))
            reservation = self.existing.reservations.get(identifier)
            if reservation is None:
                # Cloud Control answers ResourceNotFoundException for an id the account does not have
                # (Cloud Control API reference, GetResource errors), which the provider's data source
                # reports as its finder's retry.NotFoundError (terraform-provider-aws
                # internal/service/cloudcontrol/resource_data_source.go and resource.go): a failed invoke.
                message = (
                    f"reading Cloud Control API ({CAPACITY_RESERVATION}) Resource ({identifier}): "
                    "couldn't find resource"
                )
                return {}, [("identifier", message)]
            properties = json.dumps({"Id": identifier, **reservation})
            return {"identifier": identifier, "typeName": CAPACITY_RESERVATION, "properties": properties}, []
        if args.token == "azure-native:containerservice:getAgentPool":
            keys = ("resourceGroupName", "resourceName", "agentPoolName")
            path = "/".join(str(args.args.get(k)) for k in keys)
            if path not in self.existing.agent_pools:
                # ARM answers 404 for a pool (or cluster, or group) that does not exist: a failed invoke.
                return {}, [("agentPoolName", f"agent pool {path} not found (404)")]
            return dict(self.existing.agent_pools[path]), []
        # No check failures: an empty list (the mock monitor iterates it; None raises TypeError).
        return _invoke_result(args.token, dict(args.args)), []
