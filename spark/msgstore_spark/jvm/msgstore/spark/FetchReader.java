package msgstore.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads one task's ranges. A fetch thread per owning node asks it for the next page of each of
 * its partitions (one multi-partition fetch) and queues the answers, a few ahead, so the nodes
 * work side by side while Spark takes in the pages before. A node that moved a partition (421) is
 * followed to the owner it names; an outage or a replaced leader is retried on the other
 * endpoints, backing off, until the timeout.
 */
final class FetchReader implements PartitionReader<ColumnarBatch> {
  private static final int MAX_PAGE_BYTES = 64 * 1024 * 1024;
  private static final int AHEAD = 4; // answers fetched ahead of Spark
  private static final Object END = new Object();
  private static final com.fasterxml.jackson.databind.ObjectMapper JSON =
      new com.fasterxml.jackson.databind.ObjectMapper();

  private final NodeSettings settings;
  private final String topic;
  private final String path;
  private final int[] partitions;
  private final long[] next; // where the next fetch of each partition starts (fetch thread)
  private final long[] ends;
  private final String[] addresses; // each partition's owner, as far as this task knows
  private final PageColumns columns;
  private final List<NodeConnection> connections = new CopyOnWriteArrayList<>();
  private final BlockingQueue<Object> ready = new ArrayBlockingQueue<>(AHEAD);
  private final ArrayDeque<Pending> pages = new ArrayDeque<>();
  private final List<Thread> fetchers = new ArrayList<>();
  private volatile boolean closed;
  private int running; // fetch threads not ended yet (read by the task's thread only)
  private ColumnarBatch current;

  private record Pending(Body body, PageColumns.Page page, int keep) {}

  /** An answer's array and how many of its pages are still to be decoded (task thread). */
  private static final class Body {
    final byte[] array;
    final ByteBuffer view;
    int pagesLeft;

    Body(byte[] array, ByteBuffer view) {
      this.array = array;
      this.view = view;
    }
  }

  FetchReader(NodeSettings settings, StructType required, FetchTask task) {
    this.settings = settings;
    this.topic = task.topic;
    this.path = "/v1/topics/" + java.net.URLEncoder.encode(topic, java.nio.charset.StandardCharsets.UTF_8) + "/fetch";
    this.partitions = task.partitions.clone();
    this.next = task.starts.clone();
    this.ends = task.ends.clone();
    this.addresses = task.addresses.clone();
    this.columns = new PageColumns(required, topic, settings.fetchSize);
    for (int[] mine : byAddress(java.util.stream.IntStream.range(0, partitions.length).toArray()).values()) {
      Thread t = new Thread(() -> fetchAll(mine), "msgstore-fetch-" + topic);
      t.setDaemon(true);
      fetchers.add(t);
    }
    running = fetchers.size();
    fetchers.forEach(Thread::start);
  }

  @Override
  public boolean next() throws IOException {
    while (pages.isEmpty()) {
      if (running == 0) {
        return false;
      }
      Object got;
      try {
        got = ready.take();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IOException("interrupted while reading topic " + topic, e);
      }
      if (got == END) {
        running--;
      } else if (got instanceof IOException e) {
        throw new IOException(e.getMessage(), e);
      } else if (got instanceof Throwable t) {
        throw new IOException("msgstore fetch of topic " + topic + " failed: " + t, t);
      } else {
        @SuppressWarnings("unchecked")
        List<Pending> answer = (List<Pending>) got;
        pages.addAll(answer);
      }
    }
    Pending p = pages.poll();
    current = columns.decode(p.body().view, p.page(), p.keep());
    if (--p.body().pagesLeft == 0) {
      BufferPool.give(p.body().array); // decoding copied what the batch needs
    }
    return true;
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  @Override
  public void close() {
    closed = true;
    fetchers.forEach(Thread::interrupt);
    connections.forEach(NodeConnection::close); // unblocks a read in progress
    columns.close();
  }

  /**
   * A fetch thread over its partitions (``mine``, indexes into this task's arrays, touched by
   * no other thread): step after step until their ranges are read, then END (or the error).
   */
  private void fetchAll(int[] mine) {
    Map<String, NodeConnection> open = new HashMap<>();
    try {
      while (!closed) {
        int[] unread = Arrays.stream(mine).filter(i -> next[i] < ends[i]).toArray();
        if (unread.length == 0) {
          hand(END);
          return;
        }
        for (Map.Entry<String, int[]> e : byAddress(unread).entrySet()) {
          hand(fetch(open, e.getKey(), e.getValue(), 0));
        }
      }
    } catch (Throwable t) {
      if (!closed) {
        hand(t);
      }
    } finally {
      open.values().forEach(NodeConnection::close);
    }
  }

  private void hand(Object item) {
    try {
      while (!closed) {
        if (ready.offer(item, 100, TimeUnit.MILLISECONDS)) {
          return;
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** One fetch of these partitions from one node: its pages, the positions moved past them. */
  private List<Pending> fetch(Map<String, NodeConnection> open, String address, int[] which, int attempt)
      throws IOException {
    NodeConnection.Answer answer;
    try {
      NodeConnection conn = open.get(address);
      if (conn == null) {
        conn = new NodeConnection(settings, address);
        open.put(address, conn);
        connections.add(conn);
      }
      answer = conn.post(path, body(which));
    } catch (IOException e) {
      if (closed) {
        throw e;
      }
      if (NodeConnection.untrusted(e)) {
        throw new IOException(
            "TLS to msgstore node " + address + " failed: " + e.getMessage() + "; check the 'ca' option (or MSGSTORE_CA)", e);
      }
      return retry(open, address, which, attempt, e);
    }
    if (answer.status() != 200) {
      NodeConnection.NodeError err = NodeConnection.error(address, answer);
      if (!err.retryable()) {
        throw err;
      }
      if (err.status == 421 && err.owner != null && !err.owner.equals(address)) {
        for (int i : which) {
          if (err.partition < 0 || partitions[i] == err.partition) {
            addresses[i] = err.owner;
          }
        }
      }
      return retry(open, address, which, attempt, err);
    }
    if (!answer.contentType().startsWith(NodeConnection.BATCH_TYPE)) {
      throw new IOException(
          "msgstore node " + address + " answered " + answer.contentType() + ", not " + NodeConnection.BATCH_TYPE);
    }
    List<Pending> got = pages(address, new Body(answer.body(), PageColumns.wrap(answer.body(), answer.length())));
    if (got.isEmpty()) {
      BufferPool.give(answer.body());
    }
    return got;
  }

  private String body(int[] which) {
    StringBuilder body = new StringBuilder("{\"partitions\":[");
    long rest = 0;
    for (int k = 0; k < which.length; k++) {
      int i = which[k];
      body.append(k == 0 ? "" : ",")
          .append("{\"partition\":").append(partitions[i])
          .append(",\"offset\":").append(next[i]).append('}');
      rest = Math.max(rest, ends[i] - next[i]);
    }
    body.append("],\"max_messages\":").append(Math.min(settings.fetchSize, rest))
        .append(",\"max_bytes\":").append(MAX_PAGE_BYTES);
    if (settings.tag != null) {
      body.append(",\"tag\":").append(JSON.valueToTree(settings.tag).toString());
    }
    return body.append('}').toString();
  }

  /** Check a fetch answer's framing and take its pages (rows at or past a range's end cut). */
  private List<Pending> pages(String address, Body body) throws IOException {
    ByteBuffer b = body.view;
    int size = b.limit();
    if (size < 8 || b.get(0) != 'M' || b.get(1) != 'S' || b.get(2) != 'F' || b.get(3) != '1') {
      throw new IOException("malformed fetch answer from " + address + ": no MSF1 header");
    }
    int count = b.getInt(4);
    int pos = 8;
    List<Pending> out = new ArrayList<>(count);
    for (int k = 0; k < count; k++) {
      if (pos + 8 > size) {
        throw new IOException("malformed fetch answer from " + address + ": truncated page header");
      }
      int partition = b.getInt(pos);
      int length = b.getInt(pos + 4);
      pos += 8;
      if (length < 0 || pos + (long) length > size) {
        throw new IOException("malformed fetch answer from " + address + ": truncated page");
      }
      int i = indexOf(partition);
      PageColumns.Page page = PageColumns.page(b, partition, pos, length);
      pos += length;
      int keep = 0; // offsets rise within a page
      int offsetsAt = page.at() + PageColumns.HEADER;
      while (keep < page.count() && b.getLong(offsetsAt + 8 * keep) < ends[i]) {
        keep++;
      }
      if (page.nextOffset() >= 0) {
        next[i] = page.nextOffset();
      } else {
        ends[i] = next[i]; // the partition holds nothing more
      }
      if (page.count() == 0) {
        ends[i] = Math.min(ends[i], next[i]);
      }
      if (keep > 0) {
        out.add(new Pending(body, page, keep));
      }
    }
    if (pos != size) {
      throw new IOException("malformed fetch answer from " + address + ": bytes after its pages");
    }
    body.pagesLeft = out.size();
    return out;
  }

  private int indexOf(int partition) throws IOException {
    for (int i = 0; i < partitions.length; i++) {
      if (partitions[i] == partition) {
        return i;
      }
    }
    throw new IOException("fetch answer holds partition " + partition + ", which this task did not ask for");
  }

  /** Ask again after a move (at once) or an outage (backing off, then the next endpoint). */
  private List<Pending> retry(
      Map<String, NodeConnection> open, String address, int[] which, int attempt, IOException cause)
      throws IOException {
    long waited = 0;
    for (int k = 0; k < attempt; k++) {
      waited += backoff(k);
    }
    if (waited >= settings.timeoutMs || attempt >= 30) {
      throw new IOException(
          "msgstore fetch of topic " + topic + " gave up after " + (attempt + 1) + " tries: " + cause.getMessage(),
          cause);
    }
    boolean moved = cause instanceof NodeConnection.NodeError err && err.status == 421 && err.owner != null;
    if (!moved) {
      try {
        Thread.sleep(backoff(attempt));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IOException("interrupted while retrying a fetch of topic " + topic, e);
      }
      // an outage: the next endpoint answers with the owner (421) if it is not the owner itself
      String[] all = settings.endpoints;
      String nextAddress = all[(Arrays.asList(all).indexOf(address) + 1) % all.length];
      for (int i : which) {
        addresses[i] = nextAddress;
      }
    }
    List<Pending> out = new ArrayList<>();
    for (Map.Entry<String, int[]> e : byAddress(which).entrySet()) {
      out.addAll(fetch(open, e.getKey(), e.getValue(), attempt + 1));
    }
    return out;
  }

  /** These partitions (indexes) grouped by the node each is asked of now, in order. */
  private Map<String, int[]> byAddress(int[] which) {
    Map<String, List<Integer>> groups = new LinkedHashMap<>();
    for (int i : which) {
      groups.computeIfAbsent(addresses[i], a -> new ArrayList<>()).add(i);
    }
    Map<String, int[]> out = new LinkedHashMap<>();
    groups.forEach((address, list) -> out.put(address, list.stream().mapToInt(Integer::intValue).toArray()));
    return out;
  }

  private static long backoff(int attempt) {
    return Math.min(2000L, 50L << Math.min(attempt, 6));
  }
}
