"""The Azure upgrade to keys per data domain cannot skip its first step (review of issue 38, B4; review
rev35f A6 for the datasets).

docs/operations.md ("Keys per data domain", On Azure) asks a stack made before the split to set
``storage.onStackKey: [training-data, registry-database, logs, datasets]`` before upgrading; without it
the program gives the NFS account, the registry's PostgreSQL server and the audit archive new keys and
identities (a flexible server's key is set at creation only), and the ``datasets`` container a default
encryption scope, which a container takes at creation only (it would be replaced). Like AWS's
``refuse_silent_key_moves`` (tests/components/aws/test_aws_key_day2.py), the program reads each store
from Resource Manager before it registers anything and refuses, in one line naming the stack key, when a
store is under ``storage-cmk`` and the config would move it. The mocks' subscription holds the stores
``encrypted_stores`` names, as ARM reports them ("Storage Accounts - Get Properties"
``encryption.keyvaultproperties.keyname``; PostgreSQL flexible server ``dataEncryption.primaryKeyURI``),
and the containers ``container_scopes`` names ("Blob Containers - Get" ``defaultEncryptionScope``,
``$account-encryption-key`` for one made without a scope).
"""

from __future__ import annotations

import logging

import httpx
import pulumi
import pytest
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from components.azure import naming
from components.azure.arm import ArmReader
from components.azure.key_moves import moving_stores, refuse_silent_key_moves, stores
from components.azure.storage import DATASETS_SCOPE, objects_account_name
from components.config import PLATFORM_KEY, PROJECT, KeyDomain, PlatformConfig, parse_stack_config
from mlplatform.mocks import SUBSCRIPTION_ID, ExistingAccount, PlanMocks
from mlplatform.plan import isolated
from tests.stack_variants import cloud_only, template

STACK = "azure-enterprise-prod"
SUFFIX = naming.name_suffix(SUBSCRIPTION_ID, PROJECT, STACK)
DOMAINS = ["datasets", "training-data", "registry-database", "logs"]
# The datasets container as made before the datasets had a key (no scope: the account's key), and since.
CONTAINER = f"{objects_account_name(SUFFIX)}/datasets"
BEFORE_SCOPE = {CONTAINER: "$account-encryption-key"}
SINCE_SCOPE = {CONTAINER: DATASETS_SCOPE}


def _config(on_stack_key: list[str]) -> PlatformConfig:
    config = cloud_only(template(STACK))
    config[PLATFORM_KEY].setdefault("storage", {})["onStackKey"] = on_stack_key
    return parse_stack_config(config, STACK)


def _names(key: dict[KeyDomain, str]) -> dict[str, str]:
    """Each store's ARM name -> the key it is encrypted with."""
    found = stores(_config([]), SUFFIX)
    return {
        s.provider_path.rsplit("/", 1)[1]: key[s.domain]
        for s in found
        if s.domain in key and s.domain is not KeyDomain.DATASETS
    }


MADE_BEFORE = _names(dict.fromkeys(KeyDomain, "storage-cmk"))
MADE_SINCE = _names({d: f"{d.value}-cmk" for d in KeyDomain})


def _guard(
    on_stack_key: list[str], encrypted: dict[str, str], scopes: dict[str, str] | None = None
) -> list[str]:
    """Run the guard in a program under the mocks; the warnings it logs."""
    warnings: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logger = logging.Logger("key-moves")
    logger.addHandler(Lines(logging.WARNING))
    config = _config(on_stack_key)

    def run() -> None:
        existing = ExistingAccount(encrypted_stores=encrypted, container_scopes=scopes or {})
        mocks = PlanMocks("", "uaenorth", existing=existing)
        pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=STACK, preview=True, logger=logger)

        def program() -> None:
            refuse_silent_key_moves(config, pulumi.ComponentResource("test:index:Parent", "parent"))

        _sync_await(run_pulumi_func(program))

    isolated(run)
    return warnings


def test_the_template_has_all_four_stores() -> None:
    assert [s.domain.value for s in stores(_config([]), SUFFIX)] == DOMAINS
    assert len(MADE_BEFORE) == 3


def test_an_upgrade_without_the_first_step_is_refused_in_one_line() -> None:
    with pytest.raises(pulumi.RunError) as refused:
        _guard([], MADE_BEFORE, BEFORE_SCOPE)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        f"{PLATFORM_KEY}.storage.onStackKey: stack {STACK} keeps its datasets container of "
        f"{objects_account_name(SUFFIX)}, NFS account "
    )
    assert f"PostgreSQL server mlp-registry-{SUFFIX}" in message
    assert "the datasets container would be replaced" in message
    assert "set storage.onStackKey: [datasets, training-data, registry-database, logs] first" in message


def test_a_domain_left_out_of_the_first_step_is_named_alone() -> None:
    with pytest.raises(pulumi.RunError) as refused:
        _guard(["training-data", "logs", "datasets"], MADE_BEFORE, BEFORE_SCOPE)
    assert "set storage.onStackKey: [registry-database] first" in str(refused.value)
    assert "container would be replaced" not in str(refused.value)


def test_a_datasets_container_made_without_the_scope_is_refused_alone() -> None:
    """A stack split before the datasets had their own key (review rev35f A6): its other stores are on their
    own keys, its ``datasets`` container on the account's key. Moving it would replace the container
    (its default encryption scope is set at creation only), so the update is refused, naming ``datasets``."""
    with pytest.raises(pulumi.RunError) as refused:
        _guard([], MADE_SINCE, BEFORE_SCOPE)
    message = str(refused.value)
    assert "\n" not in message
    assert f"keeps its datasets container of {objects_account_name(SUFFIX)} on storage-cmk" in message
    assert "set storage.onStackKey: [datasets] first" in message


@pytest.mark.parametrize(
    ("on_stack_key", "encrypted", "scopes"),
    [
        (DOMAINS, MADE_BEFORE, BEFORE_SCOPE),
        (["datasets"], MADE_SINCE, BEFORE_SCOPE),
        ([], {}, {}),
        ([], MADE_SINCE, SINCE_SCOPE),
    ],
    ids=["first-step", "datasets-kept", "new-stack", "made-since-the-split"],
)
def test_the_documented_upgrade_a_new_stack_and_a_split_stack_pass(
    on_stack_key: list[str], encrypted: dict[str, str], scopes: dict[str, str]
) -> None:
    assert _guard(on_stack_key, encrypted, scopes) == []


def test_a_store_the_deployer_may_not_read_is_said_not_judged() -> None:
    """ARM's 403 (no read right on the store): the guard cannot judge the stack, says so and goes on."""

    def forbidden(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, json={"error": {"code": "AuthorizationFailed", "message": "no"}})

    with httpx.Client(base_url="https://arm", transport=httpx.MockTransport(forbidden)) as client:
        moving, unread = moving_stores(_config([]), ArmReader(client, SUBSCRIPTION_ID), SUFFIX)
    assert moving == []
    assert [line.split(":", 1)[0] for line in unread] == [
        f"cannot read the datasets container of {objects_account_name(SUFFIX)} to see its key",
        f"cannot read the NFS account {naming.storage_account_name('files', SUFFIX)} to see its key",
        f"cannot read the PostgreSQL server mlp-registry-{SUFFIX} to see its key",
        f"cannot read the audit archive {naming.storage_account_name('audit', SUFFIX)} to see its key",
    ]
