package msgstore.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark task: offset ranges [start, end) of partitions of a topic, first asked of one node. */
final class FetchTask implements InputPartition {
  private static final long serialVersionUID = 1L;
  final String topic;
  final String address;
  final int[] partitions;
  final long[] starts;
  final long[] ends;

  FetchTask(String topic, String address, int[] partitions, long[] starts, long[] ends) {
    this.topic = topic;
    this.address = address;
    this.partitions = partitions;
    this.starts = starts;
    this.ends = ends;
  }
}
