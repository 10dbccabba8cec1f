"""PySpark data source for msgstore: ``register(spark)`` then ``format("msgstore")``, and
``load(spark, **options)``, the batch read in the JVM (``jvm_reader``: the same read options,
no Python worker between the nodes and Spark; its jar comes with
``session.with_msgstore_settings``).

Batch and streaming reads (offset ranges per topic partition, small ones sharing a task,
read from the owning nodes) and writes (idempotent binary batches sent to each partition's
owner). Options mirror Spark's Kafka connector:

read   endpoints, topic | topics, startingOffsets, endingOffsets, startingTimestamp,
       endingTimestamp, startingOffsetsByTimestamp, endingOffsetsByTimestamp,
       maxRecordsPerPartition, minRecordsPerTask, maxOffsetsPerTrigger (streams),
       failOnDataLoss, fetchSize, tag, token, ca, timeoutSeconds
write  endpoints, topic, partitions (create the topic when absent), compression,
       batchSize, maxBatchBytes, summaryPath, token, ca, timeoutSeconds

``ca`` (or env MSGSTORE_CA) names the CA certificate file that the nodes' HTTPS
certificates must verify against; with it every endpoint must be https.
"""

from __future__ import annotations

from typing import Any

from msgstore_spark.jvm_reader import load
from msgstore_spark.source import MsgStoreDataSource

__all__ = ["MsgStoreDataSource", "load", "register"]


def register(spark: Any) -> None:
    """Make ``format("msgstore")`` available on this SparkSession."""
    spark.dataSource.register(MsgStoreDataSource)
