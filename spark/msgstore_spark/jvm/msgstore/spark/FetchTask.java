package msgstore.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One Spark task: offset ranges [start, end) of partitions of a topic (each partition once),
 * each first asked of the node at its address.
 */
final class FetchTask implements InputPartition {
  private static final long serialVersionUID = 1L;
  final String topic;
  final int[] partitions;
  final long[] starts;
  final long[] ends;
  final String[] addresses;

  FetchTask(String topic, int[] partitions, long[] starts, long[] ends, String[] addresses) {
    this.topic = topic;
    this.partitions = partitions;
    this.starts = starts;
    this.ends = ends;
    this.addresses = addresses;
  }
}
