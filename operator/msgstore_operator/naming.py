"""Names and labels of the children of a MessageStore, in one place so every builder agrees."""

from __future__ import annotations

APP_NAME = "msgstore"
MANAGED_BY = "msgstore-operator"
NODE_COMPONENT = "node"

CONFIG_HASH_ANNOTATION = "msgstore.io/config-hash"
APPLIED_HASH_ANNOTATION = "msgstore.io/applied-hash"
ROUTING_KEY = "routing.json"
TOKEN_KEY_DEFAULT = "token"

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


def pod_name(name: str, ordinal: int) -> str:
    return f"{statefulset_name(name)}-{ordinal}"


def node_address(name: str, namespace: str, ordinal: int, port: int, domain: str) -> str:
    """Stable per-pod DNS name through the headless Service."""
    host = f"{pod_name(name, ordinal)}.{headless_service_name(name)}.{namespace}.svc.{domain}"
    return f"http://{host}:{port}"


def external_service_name(name: str, ordinal: int) -> str:
    return f"{pod_name(name, ordinal)}-external"


def external_address(host: str, port: int) -> str:
    """A node's address for clients outside the cluster (IPv6 literals in brackets)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def service_address(name: str, namespace: str, port: int, domain: str) -> str:
    return f"http://{client_service_name(name)}.{namespace}.svc.{domain}:{port}"
