"""Pure builders of every child object of a MessageStore (plain dicts, ready to apply)."""

from .config import build_config_map, build_routing_config_map, build_token_secret
from .desired import DesiredState, desired_children
from .meta import Owner, owner_reference
from .policy import build_pdb
from .services import build_client_service, build_headless_service
from .spark import (
    build_compaction_cronjob,
    build_spark_role,
    build_spark_role_binding,
    build_spark_service_account,
)
from .statefulset import build_statefulset

__all__ = [
    "DesiredState",
    "Owner",
    "build_client_service",
    "build_compaction_cronjob",
    "build_config_map",
    "build_headless_service",
    "build_pdb",
    "build_routing_config_map",
    "build_spark_role",
    "build_spark_role_binding",
    "build_spark_service_account",
    "build_statefulset",
    "build_token_secret",
    "desired_children",
    "owner_reference",
]
