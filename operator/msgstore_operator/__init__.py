"""Kubernetes operator for msgstore clusters (the ``MessageStore`` custom resource).

Pure modules build every child object from the resource's spec (``naming``, ``spec``,
``assignment``, ``routing``, ``settings``, ``children``, ``status``); ``kube`` applies them and
``handlers`` wires everything to kopf. Run with ``kopf run -m msgstore_operator`` (importing
the package registers the handlers).
"""

GROUP = "msgstore.io"
VERSION = "v1alpha1"
PLURAL = "messagestores"
KIND = "MessageStore"
API_VERSION = f"{GROUP}/{VERSION}"

from . import handlers  # noqa: E402,F401  (registers the kopf handlers)
