"""The ``make run`` walkthrough (``python -m storage_node.demo``) and its sample data.

``sample_data`` generates the order events deterministically, so nothing large ships with
the package; ``spark`` runs the Spark job scripts of a given directory on local[*].
"""
