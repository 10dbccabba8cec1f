"""Which DataFrame columns a write accepts, checked on the driver before any task runs."""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from msgstore_spark.errors import ColumnError

_INTS = (ByteType, ShortType, IntegerType, LongType)
ACCEPTED = {
    "value": (StringType, BinaryType),
    "key": (StringType,),
    "tag": (StringType,),
    "msg_id": (StringType,),
    "partition": _INTS,
    "timestamp": (TimestampType, TimestampNTZType, *_INTS),
}
# columns of a msgstore read that a copy job may carry along; the write assigns its own
IGNORED = ("topic", "offset")


def check_write_schema(schema: StructType) -> None:
    """Raise naming the column when the DataFrame cannot be written as messages."""
    names = [f.name for f in schema.fields]
    if "value" not in names:
        raise ColumnError(
            "value", f"the DataFrame needs a 'value' column (string or binary); it has {names}"
        )
    for f in schema.fields:
        if f.name in IGNORED:
            continue
        allowed = ACCEPTED.get(f.name)
        if allowed is None:
            raise ColumnError(
                f.name,
                f"column {f.name!r} is not a message field; keep only "
                f"{', '.join(ACCEPTED)} (select or drop the others)",
            )
        if not isinstance(f.dataType, allowed):
            kinds = " or ".join(t.__name__.removesuffix("Type").lower() for t in allowed)
            raise ColumnError(
                f.name, f"column {f.name!r} must be {kinds}, not {f.dataType.simpleString()}"
            )
