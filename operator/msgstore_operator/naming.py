"""Names and labels of the children of a MessageStore, in one place so every builder agrees."""

from __future__ import annotations

import re

APP_NAME = "msgstore"
MANAGED_BY = "msgstore-operator"
CLI_MANAGED_BY = "msgstore-cli"  # objects rendered by `msgstore spark-job`
NODE_COMPONENT = "node"

CONFIG_HASH_ANNOTATION = "msgstore.io/config-hash"
APPLIED_HASH_ANNOTATION = "msgstore.io/applied-hash"
ROUTING_KEY = "routing.json"

DATA_DIR = "/var/lib/msgstore"
ROUTING_DIR = "/etc/msgstore/routing"
ROUTING_FILE = f"{ROUTING_DIR}/{ROUTING_KEY}"
DATA_VOLUME = "data"
ROUTING_VOLUME = "routing"


def selector_labels(name: str) -> dict[str, str]:
    """Labels that select the node pods of one MessageStore (immutable once created)."""
    return {
        "app.kubernetes.io/name": APP_NAME,
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": NODE_COMPONENT,
    }


def common_labels(name: str, component: str) -> dict[str, str]:
    """Labels every child carries, so `kubectl get all -l app.kubernetes.io/instance=NAME` works."""
    return {
        "app.kubernetes.io/name": APP_NAME,
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }


def label_selector_string(name: str) -> str:
    """The selector in the text form the scale subresource reports (sorted, stable)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(name).items()))


def statefulset_name(name: str) -> str:
    return name


def client_service_name(name: str) -> str:
    return name


def headless_service_name(name: str) -> str:
    return f"{name}-nodes"


def config_map_name(name: str) -> str:
    return f"{name}-config"


def routing_config_map_name(name: str) -> str:
    return f"{name}-routing"


def token_secret_name(name: str) -> str:
    return f"{name}-token"


def pdb_name(name: str) -> str:
    return name


def spark_account_name(name: str) -> str:
    return f"{name}-spark"


def compaction_cronjob_name(name: str) -> str:
    return f"{name}-compact"


def cli_managed() -> dict[str, str]:
    """The managed-by label of objects a user renders with the CLI (not owned by the operator)."""
    return {"app.kubernetes.io/managed-by": CLI_MANAGED_BY}


def ingest_job_name(name: str, topic: str) -> str:
    """The Job of `msgstore spark-job ingest`: store, "ingest" and the topic squeezed into a
    DNS label fragment, at most 52 characters (room for the suffix of the Job's pod names,
    labels <= 63)."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", topic.lower()).strip("-")
    fragment = (cleaned or "topic")[:20].rstrip("-")
    return f"{name}-ingest-{fragment}"[:52].rstrip("-")


def pod_name(name: str, ordinal: int) -> str:
    return f"{statefulset_name(name)}-{ordinal}"


def pod_dns_name(name: str, namespace: str, ordinal: int, domain: str) -> str:
    """Stable per-pod DNS name through the headless Service."""
    return f"{pod_name(name, ordinal)}.{headless_service_name(name)}.{namespace}.svc.{domain}"


def external_service_name(name: str, ordinal: int) -> str:
    return f"{pod_name(name, ordinal)}-external"


def external_address(host: str, port: int, scheme: str = "http") -> str:
    """A node's address for clients outside the cluster (IPv6 literals in brackets)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def node_address(
    name: str, namespace: str, ordinal: int, port: int, domain: str, scheme: str = "http"
) -> str:
    return f"{scheme}://{pod_dns_name(name, namespace, ordinal, domain)}:{port}"


def service_address(name: str, namespace: str, port: int, domain: str, scheme: str = "http") -> str:
    return f"{scheme}://{client_service_name(name)}.{namespace}.svc.{domain}:{port}"


def node_cert_names(name: str, namespace: str, ordinal: int, domain: str) -> list[str]:
    """DNS names a node's certificate carries: its pod names through the headless Service,
    the Services (a client may reach any node through them), and localhost."""
    pod, headless = pod_name(name, ordinal), headless_service_name(name)
    client = client_service_name(name)
    return [
        f"{pod}.{headless}.{namespace}.svc.{domain}",
        f"{pod}.{headless}.{namespace}.svc",
        f"{pod}.{headless}.{namespace}",
        f"{pod}.{headless}",
        f"{client}.{namespace}.svc.{domain}",
        f"{client}.{namespace}.svc",
        f"{client}.{namespace}",
        client,
        "localhost",
    ]


# Security children: TLS material, NetworkPolicy, Spark pod templates.
CLIENT_LABEL = "msgstore.io/client"
TLS_DIR = "/etc/msgstore/tls"
CA_DIR = "/etc/msgstore/ca"
CA_KEY = "ca.crt"
CA_FILE = f"{CA_DIR}/{CA_KEY}"
TLS_VOLUME = "tls"
CA_VOLUME = "ca"
TMP_VOLUME = "tmp"


def ca_secret_name(name: str) -> str:
    """CA certificate and key (only the operator reads it)."""
    return f"{name}-ca"


def ca_config_map_name(name: str) -> str:
    """The CA certificate for clients (public)."""
    return f"{name}-ca"


def node_certs_secret_name(name: str) -> str:
    return f"{name}-node-certs"


def certificate_name(name: str) -> str:
    """cert-manager Certificate (and its Secret is certificate_secret_name)."""
    return f"{name}-nodes"


def certificate_secret_name(name: str) -> str:
    return f"{name}-nodes-tls"


def network_policy_name(name: str) -> str:
    return f"{name}-nodes"


def spark_templates_config_map_name(name: str) -> str:
    return f"{name}-spark-templates"


# Users and ACLs: every MessageStoreUser's credential Secret, and the store's access document.
USER_COMPONENT = "user"
USER_LABEL = "msgstore.io/user"  # on a user's Secret: the user it belongs to
ROTATE_ANNOTATION = "msgstore.io/rotate-token"  # change its value to get a new credential
ACCESS_GENERATION_ANNOTATION = "msgstore.io/access-generation"  # on node pods: see access.py
ACCESS_DIR = "/etc/msgstore/access"
ACCESS_KEY = "access.json"
ACCESS_FILE = f"{ACCESS_DIR}/{ACCESS_KEY}"
ACCESS_VOLUME = "access"


def user_secret_name(user: str) -> str:
    """A user's credential Secret is named after the user, as Strimzi's User Operator does."""
    return user


def access_secret_name(name: str) -> str:
    """The store's access document (every user and ACL rule), mounted by every node."""
    return f"{name}-access"
