package msgstore.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The batch reader behind {@code msgstore_spark.load}: the driver's Python plans the offset
 * ranges (with the msgstore client, as the {@code msgstore} Python source does) and passes them
 * as the {@code plan} option; executors fetch them from the owning nodes in the JVM and hand
 * Spark columnar batches, so no row crosses into a Python worker and back.
 *
 * <p>Options: {@code plan} (JSON: tasks of {topic, ranges [[partition, start, end, address]]},
 * endpoints, fetchSize, tag, timeoutMs, ca), {@code token}.
 */
public final class FetchSource implements TableProvider {
  static final StructType SCHEMA =
      new StructType()
          .add("topic", DataTypes.StringType)
          .add("partition", DataTypes.IntegerType)
          .add("offset", DataTypes.LongType)
          .add("key", DataTypes.StringType)
          .add("value", DataTypes.BinaryType)
          .add("tag", DataTypes.StringType)
          .add("msg_id", DataTypes.StringType)
          .add("timestamp", DataTypes.TimestampType);

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    return new FetchTable(new CaseInsensitiveStringMap(props));
  }

  static final class FetchTable implements Table, SupportsRead {
    private final CaseInsensitiveStringMap options;

    FetchTable(CaseInsensitiveStringMap options) {
      this.options = options;
    }

    @Override
    public String name() {
      return "msgstore";
    }

    @Override
    public StructType schema() {
      return SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
      return new FetchScan(options);
    }
  }

  /** Scan builder, scan and batch at once: Spark prunes the columns, then plans. */
  static final class FetchScan implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
    private final CaseInsensitiveStringMap options;
    private StructType required = SCHEMA;

    FetchScan(CaseInsensitiveStringMap options) {
      this.options = options;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      required = requiredSchema;
    }

    @Override
    public Scan build() {
      return this;
    }

    @Override
    public StructType readSchema() {
      return required;
    }

    @Override
    public String description() {
      return "msgstore fetch " + String.join(",", required.fieldNames());
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      JsonNode plan = parsePlan(options.get("plan"));
      List<FetchTask> tasks = new ArrayList<>();
      for (JsonNode task : plan.path("tasks")) {
        JsonNode ranges = task.path("ranges");
        int n = ranges.size();
        int[] partitions = new int[n];
        long[] starts = new long[n];
        long[] ends = new long[n];
        String[] addresses = new String[n];
        for (int i = 0; i < n; i++) {
          JsonNode r = ranges.get(i);
          partitions[i] = r.get(0).asInt();
          starts[i] = r.get(1).asLong();
          ends[i] = r.get(2).asLong();
          addresses[i] = r.get(3).asText();
        }
        tasks.add(new FetchTask(task.get("topic").asText(), partitions, starts, ends, addresses));
      }
      return tasks.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      JsonNode plan = parsePlan(options.get("plan"));
      List<String> endpoints = new ArrayList<>();
      plan.path("endpoints").forEach(e -> endpoints.add(e.asText()));
      NodeSettings settings =
          new NodeSettings(
              endpoints.toArray(new String[0]),
              options.get("token"),
              plan.path("ca").isTextual() ? plan.get("ca").asText() : null,
              plan.path("timeoutMs").asLong(60_000),
              plan.path("fetchSize").asInt(10_000),
              plan.path("tag").isTextual() ? plan.get("tag").asText() : null);
      return new FetchReaderFactory(settings, required);
    }

    private static JsonNode parsePlan(String raw) {
      if (raw == null) {
        throw new IllegalArgumentException(
            "the msgstore JVM reader needs its 'plan' option: use msgstore_spark.load(spark, ...)");
      }
      try {
        return new ObjectMapper().readTree(raw);
      } catch (IOException e) {
        throw new UncheckedIOException("the msgstore read plan is not JSON", e);
      }
    }
  }
}
