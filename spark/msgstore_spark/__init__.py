"""PySpark data source for msgstore: ``register(spark)`` then ``format("msgstore")``.

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

from msgstore_spark.source import MsgStoreDataSource

__all__ = ["MsgStoreDataSource", "register"]


def register(spark: Any) -> None:
    """Make ``format("msgstore")`` available on this SparkSession."""
    spark.dataSource.register(MsgStoreDataSource)
