"""Everything a MessageStore should consist of right now, computed in one pure function."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import naming
from ..settings import config_hash, node_settings
from ..spec import StoreSpec
from .config import build_config_map, build_routing_config_map
from .console import build_console_deployment, build_console_service, console_name
from .meta import Owner
from .network import build_network_policy
from .policy import build_pdb
from .services import build_client_service, build_external_service, build_headless_service
from .spark import (
    build_compaction_cronjob,
    build_spark_role,
    build_spark_role_binding,
    build_spark_service_account,
    build_spark_templates_config_map,
)
from .statefulset import build_statefulset

EXTERNAL_SCAN = 8


@dataclass(frozen=True)
class ChildRef:
    """Identifies a child for deletion: (apiVersion, kind, name)."""

    api_version: str
    kind: str
    name: str


@dataclass(frozen=True)
class DesiredState:
    objects: list[dict[str, Any]]
    absent: list[ChildRef] = field(default_factory=list)
    config_hash: str = ""
    token_secret: str | None = None


def token_secret_for(owner: Owner, spec: StoreSpec) -> str | None:
    """The Secret holding the node token: the user's, the generated one, or none."""
    if not spec.auth.enabled:
        return None
    return spec.auth.token_secret or naming.token_secret_name(owner.name)


def spark_children(owner: Owner, spec: StoreSpec, endpoint: str, token: str | None) -> list:
    return [
        build_spark_service_account(owner),
        build_spark_role(owner),
        build_spark_role_binding(owner),
        build_compaction_cronjob(owner, spec, endpoint, token),
    ]


def spark_refs(owner: Owner) -> list[ChildRef]:
    account = naming.spark_account_name(owner.name)
    return [
        ChildRef("batch/v1", "CronJob", naming.compaction_cronjob_name(owner.name)),
        ChildRef("rbac.authorization.k8s.io/v1", "RoleBinding", account),
        ChildRef("rbac.authorization.k8s.io/v1", "Role", account),
        ChildRef("v1", "ServiceAccount", account),
    ]


def external_children(
    owner: Owner, spec: StoreSpec, replicas: int, known: int
) -> tuple[list[dict[str, Any]], list[ChildRef]]:
    """Per-node NodePort Services for nodes 0..replicas-1; the rest of ``known`` are absent."""
    objects: list[dict[str, Any]] = []
    absent: list[ChildRef] = []
    for ordinal in range(max(replicas, known)):
        port, kafka = spec.external.node_port(ordinal), spec.kafka_node_port(ordinal)
        if ordinal < replicas and (port is not None or kafka is not None):
            objects.append(build_external_service(owner, spec, ordinal, port, kafka))
        else:
            absent.append(
                ChildRef("v1", "Service", naming.external_service_name(owner.name, ordinal))
            )
    return objects, absent


def desired_children(
    owner: Owner,
    spec: StoreSpec,
    replicas: int,
    routing_text: str,
    domain: str,
    operator_namespace: str | None = None,
) -> DesiredState:
    """Children in the order they should be applied (config before the pods that read it).

    TLS material (CA, node certificates, a cert-manager Certificate) depends on live state
    and is applied by ``reconcile`` before these."""
    settings = node_settings(spec)
    digest = config_hash(settings)
    token = token_secret_for(owner, spec)
    endpoint = naming.service_address(owner.name, owner.namespace, spec.port, domain, spec.scheme)
    absent: list[ChildRef] = []
    objects = [
        build_config_map(owner, settings),
        build_routing_config_map(owner, routing_text),
        build_spark_templates_config_map(owner, spec),
        build_headless_service(owner, spec),
        build_client_service(owner, spec),
    ]
    netpol = naming.network_policy_name(owner.name)
    if spec.network_policy.enabled:
        # Before the pods: a node never runs unprotected.
        objects.append(build_network_policy(owner, spec, operator_namespace))
    else:
        absent.append(ChildRef("networking.k8s.io/v1", "NetworkPolicy", netpol))
    objects += [
        build_statefulset(owner, spec, replicas, digest, token, domain),
        build_pdb(owner),
    ]
    # Services of nodes that no longer exist (or of a switched-off listener) are removed; the
    # scan goes a few ordinals past the replicas so a scale-down leaves nothing behind.
    external, gone = external_children(owner, spec, replicas, replicas + EXTERNAL_SCAN)
    objects += external
    absent += gone
    if spec.compaction.mode == "spark":
        objects += spark_children(owner, spec, endpoint, token)
    else:
        absent += spark_refs(owner)
    if spec.console.enabled:
        objects += [
            build_console_deployment(owner, spec, endpoint, token),
            build_console_service(owner, spec),
        ]
    else:
        absent += [
            ChildRef("apps/v1", "Deployment", console_name(owner.name)),
            ChildRef("v1", "Service", console_name(owner.name)),
        ]
    return DesiredState(objects=objects, absent=absent, config_hash=digest, token_secret=token)
