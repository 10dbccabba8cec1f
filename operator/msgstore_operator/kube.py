"""Minimal typed access to the Kubernetes API for the children the operator manages.

Children are applied with server-side apply under one field manager, and only when the
desired object changed: each applied child carries a hash of what was applied, so a resumed
or repeated reconcile that finds the same hash sends nothing (no writes, no new events).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException

from . import naming

FIELD_MANAGER = "msgstore-operator"

PLURALS: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Secret"): "secrets",
    ("v1", "Service"): "services",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("v1", "Pod"): "pods",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("apps/v1", "StatefulSet"): "statefulsets",
    ("apps/v1", "Deployment"): "deployments",  # the store's web console
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("batch/v1", "CronJob"): "cronjobs",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("msgstore.io/v1alpha1", "MessageStore"): "messagestores",
    ("msgstore.io/v1alpha1", "MessageStoreUser"): "messagestoreusers",
    ("batch/v1", "Job"): "jobs",
    ("v1", "Event"): "events",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("cert-manager.io/v1", "Certificate"): "certificates",
}


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    plural = PLURALS[(api_version, kind)]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


def desired_hash(obj: dict[str, Any]) -> str:
    """Digest of a desired object, without the annotation that stores it."""
    clean = copy.deepcopy(obj)
    clean.get("metadata", {}).get("annotations", {}).pop(naming.APPLIED_HASH_ANNOTATION, None)
    return hashlib.sha256(json.dumps(clean, sort_keys=True).encode()).hexdigest()[:16]


def applied_hash(live: dict[str, Any] | None) -> str | None:
    if not live:
        return None
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    return annotations.get(naming.APPLIED_HASH_ANNOTATION)


class Kube:
    """Synchronous calls on one ApiClient (kopf runs sync handlers in a thread pool)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def _call(
        self,
        method: str,
        path: str,
        body: object = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        return self.api.call_api(
            path,
            method,
            query_params=query or [],
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            response_type="object",
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _request_timeout=30,
        )

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", object_path(api_version, kind, namespace, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else []
        if field_selector:
            query.append(("fieldSelector", field_selector))
        result = self._call("GET", object_path(api_version, kind, namespace), query=query)
        return list(result.get("items") or [])

    def apply(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Server-side apply ``obj`` unless the live object already has its hash.

        Returns the live object and whether anything was sent.
        """
        meta = obj["metadata"]
        live = self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        digest = desired_hash(obj)
        if live is not None and applied_hash(live) == digest:
            return live, False
        body = copy.deepcopy(obj)
        body["metadata"].setdefault("annotations", {})[naming.APPLIED_HASH_ANNOTATION] = digest
        result = self._call(
            "PATCH",
            object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]),
            body=body,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )
        return result, True

    def create_if_missing(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create once, never update (a generated token must not change under clients)."""
        meta = obj["metadata"]
        live = self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        if live is not None:
            return live, False
        try:
            path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"])
            return self._call("POST", path, body=obj), True
        except ApiException as exc:
            if exc.status == 409:
                found = self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
                if found is not None:
                    return found, False
            raise

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete if present (background propagation); True when something was deleted."""
        try:
            self._call(
                "DELETE",
                object_path(api_version, kind, namespace, name),
                body={"propagationPolicy": "Background"},
            )
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def patch_status(
        self, namespace: str, name: str, fields: dict[str, Any], plural: str = ""
    ) -> None:
        """Merge-patch the status subresource of a MessageStore (or of ``plural``)."""
        from . import GROUP, PLURAL, VERSION

        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural or PLURAL}/{name}/status"
        self._call(
            "PATCH", path, body={"status": fields}, content_type="application/merge-patch+json"
        )

    def merge_patch(
        self, api_version: str, kind: str, namespace: str, name: str, body: dict[str, Any]
    ) -> None:
        """A JSON merge patch (e.g. an annotation on a pod)."""
        self._call(
            "PATCH",
            object_path(api_version, kind, namespace, name),
            body=body,
            content_type="application/merge-patch+json",
        )

    def post_event(
        self, owner: dict[str, Any], event_type: str, reason: str, message: str, now: str
    ) -> None:
        """A core/v1 Event about the MessageStore, as `kubectl describe ms` shows them."""
        meta = owner["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": owner.get("apiVersion"),
                "kind": owner.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._call("POST", f"/api/v1/namespaces/{meta['namespace']}/events", body=body)
