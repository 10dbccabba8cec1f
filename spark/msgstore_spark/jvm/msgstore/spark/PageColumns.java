package msgstore.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OffHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One page of a fetch answer (a binary read answer, docs/BATCH_FORMAT.md) turned into a
 * ColumnarBatch of the required columns: numbers copied in bulk, each text or binary column's
 * blob appended once and its rows pointed into it. The vectors are reused page after page and
 * live off the heap (freed when the task's reader closes), out of the collector's way.
 */
final class PageColumns {
  static final int HEADER = 24; // magic, count, next offset, flags, meta length
  static final int ROW_BYTES = 3 * 8 + 5 * 4;
  private static final byte[] READ_MAGIC = "MSR1".getBytes(StandardCharsets.US_ASCII);

  private final String[] names;
  private final ColumnVector[] vectors;
  private final ConstantColumnVector partitionVector;
  private final ColumnarBatch batch;

  PageColumns(StructType required, String topic, int capacity) {
    names = required.fieldNames();
    vectors = new ColumnVector[names.length];
    ConstantColumnVector partition = null;
    for (int i = 0; i < names.length; i++) {
      StructField field = required.fields()[i];
      switch (names[i]) {
        case "topic" -> {
          ConstantColumnVector v = new ConstantColumnVector(capacity, DataTypes.StringType);
          v.setUtf8String(UTF8String.fromString(topic));
          vectors[i] = v;
        }
        case "partition" -> {
          partition = new ConstantColumnVector(capacity, DataTypes.IntegerType);
          vectors[i] = partition;
        }
        default -> vectors[i] = new OffHeapColumnVector(capacity, field.dataType());
      }
    }
    partitionVector = partition;
    batch = new ColumnarBatch(vectors);
  }

  /** Where a page sits in an answer and what it says of the partition's next offset. */
  record Page(int partition, int at, int length, int count, long nextOffset) {}

  /** Reads and checks a page's header; the body is checked when it is decoded. */
  static Page page(ByteBuffer b, int partition, int at, int length) throws IOException {
    if (length < HEADER) {
      throw new IOException("malformed fetch answer: a page of " + length + " bytes has no header");
    }
    for (int i = 0; i < 4; i++) {
      if (b.get(at + i) != READ_MAGIC[i]) {
        throw new IOException("malformed fetch answer: a page does not start with MSR1");
      }
    }
    int count = b.getInt(at + 4);
    long next = b.getLong(at + 8);
    if (count < 0 || (long) count * ROW_BYTES > length - HEADER) {
      throw new IOException("malformed fetch answer: page of partition " + partition + " claims " + count + " rows");
    }
    return new Page(partition, at, length, count, next);
  }

  /** The first ``keep`` rows of the page as the batch (valid until the next call). */
  ColumnarBatch decode(ByteBuffer b, Page page, int keep) throws IOException {
    int count = page.count();
    int p = page.at() + HEADER;
    int offsets = p, stamps = p + 8 * count, parts = p + 24 * count;
    int[] lengthsAt = new int[4]; // keys, tags, message IDs, values
    for (int c = 0; c < 4; c++) {
      lengthsAt[c] = parts + 4 * count + 4 * c * count;
    }
    int[] blobAt = new int[5];
    blobAt[0] = p + ROW_BYTES * count;
    for (int c = 0; c < 4; c++) {
      long sum = 0;
      for (int i = 0; i < count; i++) {
        int len = b.getInt(lengthsAt[c] + 4 * i);
        if (len < -1 || (len < 0 && c == 3)) {
          throw new IOException("malformed fetch answer: negative length in partition " + page.partition());
        }
        sum += Math.max(len, 0);
      }
      if (blobAt[c] + sum > page.at() + page.length()) {
        throw new IOException("malformed fetch answer: blobs run past the page of partition " + page.partition());
      }
      blobAt[c + 1] = (int) (blobAt[c] + sum);
    }
    byte[] array = b.array();
    if (partitionVector != null) {
      partitionVector.setInt(page.partition());
    }
    for (int i = 0; i < names.length; i++) {
      switch (names[i]) {
        case "offset" -> {
          WritableColumnVector v = writable(i, keep);
          v.putLongsLittleEndian(0, keep, array, offsets);
        }
        case "timestamp" -> {
          WritableColumnVector v = writable(i, keep);
          for (int r = 0; r < keep; r++) {
            v.putLong(r, b.getLong(stamps + 8 * r) * 1000L); // ms -> Spark's microseconds
          }
        }
        case "key" -> text(b, writable(i, keep), keep, lengthsAt[0], blobAt[0], blobAt[1]);
        case "tag" -> text(b, writable(i, keep), keep, lengthsAt[1], blobAt[1], blobAt[2]);
        case "msg_id" -> text(b, writable(i, keep), keep, lengthsAt[2], blobAt[2], blobAt[3]);
        case "value" -> text(b, writable(i, keep), keep, lengthsAt[3], blobAt[3], blobAt[4]);
        default -> {
          // topic and partition are constant vectors
        }
      }
    }
    batch.setNumRows(keep);
    return batch;
  }

  private WritableColumnVector writable(int i, int rows) {
    WritableColumnVector v = (WritableColumnVector) vectors[i];
    v.reset();
    v.reserve(rows);
    return v;
  }

  /** A text/binary column: the blob appended once, each row a slice of it (-1: null). */
  private static void text(ByteBuffer b, WritableColumnVector v, int rows, int lengthsAt, int from, int to) {
    WritableColumnVector data = v.arrayData();
    int base = data.appendBytes(to - from, b.array(), from);
    int cursor = base;
    for (int r = 0; r < rows; r++) {
      int len = b.getInt(lengthsAt + 4 * r);
      if (len < 0) {
        v.putNull(r);
      } else {
        v.putArray(r, cursor, len);
        cursor += len;
      }
    }
  }

  void close() {
    batch.close();
  }

  static ByteBuffer wrap(byte[] body, int length) {
    return ByteBuffer.wrap(body, 0, length).slice().order(ByteOrder.LITTLE_ENDIAN);
  }
}
