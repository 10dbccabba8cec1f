"""The ``msgstore`` command line (``main``) and the local multi-node cluster it starts.

``main`` builds the parser; ``common`` holds what every subcommand shares; ``produce``,
``consume`` and ``admin`` are the data and group commands; ``local`` runs node processes on
loopback; ``spark_job`` renders Kubernetes Jobs with the operator's own builders.
"""
