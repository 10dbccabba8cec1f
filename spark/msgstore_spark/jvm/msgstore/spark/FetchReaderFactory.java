package msgstore.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Sent to the executors: every task reads columnar batches of the required columns. */
final class FetchReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;
  private final NodeSettings settings;
  private final StructType required;

  FetchReaderFactory(NodeSettings settings, StructType required) {
    this.settings = settings;
    this.required = required;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException("the msgstore reader is columnar only");
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new FetchReader(settings, required, (FetchTask) partition);
  }
}
