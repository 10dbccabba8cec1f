package msgstore.spark;

import java.io.Serializable;

/** How executors reach the nodes: what the Python side resolved from the read options. */
final class NodeSettings implements Serializable {
  private static final long serialVersionUID = 1L;
  final String[] endpoints;
  final String token;
  final String caFile;
  final long timeoutMs;
  final int fetchSize;
  final String tag;

  NodeSettings(
      String[] endpoints, String token, String caFile, long timeoutMs, int fetchSize, String tag) {
    this.endpoints = endpoints;
    this.token = token;
    this.caFile = caFile;
    this.timeoutMs = timeoutMs;
    this.fetchSize = fetchSize;
    this.tag = tag;
  }
}
