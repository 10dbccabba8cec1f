"""kopf wiring: ``kopf run -m msgstore_operator.handlers --standalone --liveness=URL``.

Create, resume, update and a periodic timer all run the same idempotent reconcile pass
(see ``reconcile``); deletion needs no handler because every child carries an owner
reference and the garbage collector removes it.

Settings (environment variables of the operator process):

* ``MSGSTORE_OPERATOR_INTERVAL_S``: seconds between status refreshes (default 10);
* ``MSGSTORE_OPERATOR_CLUSTER_DOMAIN``: DNS domain of the cluster (default cluster.local);
* ``MSGSTORE_NODE_IMAGE`` / ``MSGSTORE_SPARK_IMAGE``: images used when a spec names none.

Which namespaces are watched is kopf's choice: ``--namespace=NS`` or ``--all-namespaces``.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
from typing import Any

import kopf
import kubernetes
import urllib3
from kubernetes.client.rest import ApiException

from . import GROUP, PLURAL, VERSION
from .kube import Kube
from .reconcile import NotYet, SpecProblem, reconcile
from .status import changed_fields

INTERVAL_S = float(os.environ.get("MSGSTORE_OPERATOR_INTERVAL_S", "10"))
CLUSTER_DOMAIN = os.environ.get("MSGSTORE_OPERATOR_CLUSTER_DOMAIN", "cluster.local")
DEFAULT_IMAGES = (os.environ.get("MSGSTORE_NODE_IMAGE"), os.environ.get("MSGSTORE_SPARK_IMAGE"))
PREFIX = "msgstore.io"

_kube: Kube | None = None
_kube_lock = threading.Lock()
_last_success: dict[str, str] = {}


def kube() -> Kube:
    """One API client for the process: in-cluster credentials, else the kubeconfig."""
    global _kube
    with _kube_lock:
        if _kube is None:
            try:
                kubernetes.config.load_incluster_config()
            except kubernetes.config.ConfigException:
                kubernetes.config.load_kube_config()
            _kube = Kube(kubernetes.client.ApiClient())
        return _kube


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Keep kopf's bookkeeping in our own annotations (the status schema is strict)."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    # Post only the events we choose (what changed, warnings), not every log line: a status
    # refresh every few seconds must not flood the resource's events.
    settings.posting.level = logging.INFO
    settings.posting.loggers = False
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    kube()


def _run(body: kopf.Body, patch: kopf.Patch, logger: logging.Logger, post_events: bool) -> None:
    try:
        outcome = reconcile(kube(), body, CLUSTER_DOMAIN, now_text(), DEFAULT_IMAGES)
    except SpecProblem as exc:
        kopf.warn(body, reason="InvalidSpec", message=str(exc))
        raise kopf.PermanentError(str(exc)) from exc
    except NotYet as exc:
        kopf.warn(body, reason="Waiting", message=str(exc))
        raise kopf.TemporaryError(str(exc), delay=15) from exc
    except ApiException as exc:
        if exc.status in (400, 403, 422):
            message = (
                f"the API server refused a child object: {exc.status} {exc.reason}: {exc.body}"
            )
            kopf.warn(body, reason="ApplyFailed", message=message[:1000])
            raise kopf.TemporaryError(message, delay=30) from exc
        raise kopf.TemporaryError(f"API error {exc.status} {exc.reason}", delay=5) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise kopf.TemporaryError(f"API server unreachable: {exc}", delay=5) from exc
    if post_events:
        for kind, reason, message in outcome.events:
            (kopf.warn if kind == "warning" else kopf.info)(body, reason=reason, message=message)
    for key, value in changed_fields(body.get("status") or {}, outcome.status).items():
        patch.status[key] = value
    _last_success[f"{body.metadata.namespace}/{body.metadata.name}"] = now_text()
    if outcome.changed:
        logger.info("applied: %s", ", ".join(outcome.changed))


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile_handler(body: kopf.Body, patch: kopf.Patch, logger: logging.Logger, **_: Any) -> None:
    """Bring the children in line with the spec (only what changed is sent)."""
    _run(body, patch, logger, post_events=True)


@kopf.timer(GROUP, VERSION, PLURAL, interval=INTERVAL_S, initial_delay=INTERVAL_S / 2)
def refresh(body: kopf.Body, patch: kopf.Patch, logger: logging.Logger, **_: Any) -> None:
    """Keep status true from the StatefulSet and pods, and repair drifted children."""
    _run(body, patch, logger, post_events=True)


@kopf.on.probe(id="reconciled")
def reconciled_probe(**_: Any) -> dict[str, str]:
    """Shown by the liveness endpoint: when each store was last reconciled successfully."""
    return dict(_last_success)
