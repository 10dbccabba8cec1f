"""The ``msgstore`` data source: Spark's entry point for batch and streaming reads and writes."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from msgstore_spark.arrow_codec import READ_SCHEMA_DDL
from msgstore_spark.cluster import connect, ensure_topic
from msgstore_spark.errors import OptionError
from msgstore_spark.options import read_options, write_options
from msgstore_spark.reader import MsgStoreBatchReader
from msgstore_spark.stream_reader import MsgStoreStreamReader
from msgstore_spark.write_schema import check_write_schema
from msgstore_spark.writer import MsgStoreBatchWriter, MsgStoreStreamWriter


class MsgStoreDataSource(DataSource):
    """Topics of a msgstore cluster as a table: ``spark.read.format("msgstore")``.

    Read columns: topic, partition, offset, key, value (binary), tag, msg_id, timestamp.
    Options mirror Spark's Kafka connector (see the package docs).
    """

    @classmethod
    def name(cls) -> str:
        return "msgstore"

    def schema(self) -> str:
        return READ_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return MsgStoreBatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MsgStoreStreamReader(read_options(self.options, streaming=True))

    def _prepared_write_options(self, schema: StructType, overwrite: bool):  # noqa: ANN202
        if overwrite:
            raise OptionError(
                "mode", "msgstore topics are append-only: use mode('append') / outputMode('append')"
            )
        opts = write_options(self.options)
        check_write_schema(schema)
        client = connect(opts.conn)
        try:
            ensure_topic(client, opts.conn, opts.topic, opts.create_partitions, opts.compression)
        finally:
            client.close()
        return opts

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts = self._prepared_write_options(schema, overwrite)
        return MsgStoreBatchWriter(opts, self.options.get("summaryPath"))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return MsgStoreStreamWriter(self._prepared_write_options(schema, overwrite))
