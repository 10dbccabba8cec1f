"""Kubernetes operator for msgstore clusters (the ``MessageStore`` custom resource).

Pure modules build every child object from the resource's spec (``naming``, ``spec``,
``assignment``, ``routing``, ``settings``, ``children``, ``status``, and ``spark_job``, which
the ``msgstore spark-job`` command shares); ``kube`` applies them and ``handlers`` wires
everything to kopf. Run with ``kopf run -m msgstore_operator.handlers``: importing the
package itself loads no kopf, so the pure modules serve the CLI too.
"""

GROUP = "msgstore.io"
VERSION = "v1alpha1"
PLURAL = "messagestores"
KIND = "MessageStore"
API_VERSION = f"{GROUP}/{VERSION}"
USER_PLURAL = "messagestoreusers"
USER_KIND = "MessageStoreUser"
