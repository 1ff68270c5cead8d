"""The real MLflow server of tests/workloads/registry/, for the rollout's runs against a registry."""

from tests.workloads.registry.conftest import registry_uri

__all__ = ["registry_uri"]
