"""The Kafka record codec in-process: msgstore's compiled codec (storage_node/kafka/records.py
over record_codec.pyx) against aiokafka's Cython codec, which the listener used before, on
the same batches, in interleaved rounds.

  read   a produced batch (ProducerPerformance's shape: no keys, 100-byte values, 600
         records) into the store's columns. aiokafka: its reader makes a record object per
         record, then the columns are packed from them (what records.decode_batch did).
  write  a Fetch page of 9,000 rows (100-byte values, a message ID each) as one batch from
         the read's columns. aiokafka: the columns as lists, then its builder, record by
         record (what fetch.encode_page did).

Prints one JSON line per direction: microseconds per record of each (medians of the
rounds) and ``speedup`` (aiokafka's time / msgstore's).

Usage: python bench/kafka_codec.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from aiokafka.record._crecords import DefaultRecordBatch, DefaultRecordBatchBuilder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage_node.formats.packed import PackedBatch, PackedColumn  # noqa: E402
from storage_node.kafka.records import MSG_ID_HEADER, decode_batch, encode_batch  # noqa: E402

VALUE = b"x" * 100
PRODUCED = 600
PAGE = 9_000


def aiokafka_read(data: bytes) -> PackedBatch:
    records = list(DefaultRecordBatch(data))
    return PackedBatch(
        values=PackedColumn.of_bytes([r.value if r.value is not None else b"" for r in records]),
        keys=PackedColumn.of_bytes([r.key for r in records]),
        tags=PackedColumn.empty(len(records)),
        msg_ids=PackedColumn.empty(len(records)),
        timestamps=np.fromiter((r.timestamp for r in records), np.int64, len(records)),
    )


def aiokafka_write(offsets: np.ndarray, timestamps: np.ndarray, page: PackedBatch) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
    for delta, ts, key, value, msg_id in zip(
        (offsets - offsets[0]).tolist(),
        timestamps.tolist(),
        page.keys.to_list(),
        page.values.to_list(),
        page.msg_ids.to_list(),
        strict=True,
    ):
        builder.append(delta, ts, key, value, [(MSG_ID_HEADER, msg_id)])
    out = builder.build()
    struct.pack_into(">q", out, 0, int(offsets[0]))  # the base offset (outside the CRC)
    return bytes(out)


def timed(run: Callable[[], object], records: int, seconds: float = 0.5) -> float:
    """Microseconds per record of ``run``, repeated for about ``seconds``."""
    count, started = 0, time.perf_counter()
    while True:
        run()
        count += 1
        spent = time.perf_counter() - started
        if spent >= seconds:
            return spent / count / records * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**30)
    for i in range(PRODUCED):
        builder.append(i, 1_700_000_000_000 + i, None, VALUE, [])
    produced = bytes(builder.build())
    assert (
        decode_batch(produced).packed.values.to_list() == aiokafka_read(produced).values.to_list()
    )

    offsets = np.arange(1_000, 1_000 + PAGE, dtype=np.int64)
    timestamps = 1_700_000_000_000 + np.arange(PAGE, dtype=np.int64)
    page = PackedBatch(
        values=PackedColumn.of_bytes([VALUE] * PAGE),
        keys=PackedColumn.empty(PAGE),
        tags=PackedColumn.empty(PAGE),
        msg_ids=PackedColumn.of_bytes([b"orders-7f000001-487000-%d" % i for i in range(PAGE)]),
    )

    def ours_write() -> bytes:
        return encode_batch(
            1_000, offsets, timestamps, page.keys, page.values, page.tags, page.msg_ids
        )

    same = [(r.offset, r.value, r.headers) for r in DefaultRecordBatch(ours_write())]
    assert same == [
        (r.offset, r.value, r.headers)
        for r in DefaultRecordBatch(aiokafka_write(offsets, timestamps, page))
    ]

    runs: dict[str, dict[str, list[float]]] = {"read": {}, "write": {}}
    for _ in range(args.rounds):
        for name, run, records, direction in (
            ("msgstore", lambda: decode_batch(produced), PRODUCED, "read"),
            ("aiokafka", lambda: aiokafka_read(produced), PRODUCED, "read"),
            ("msgstore", ours_write, PAGE, "write"),
            ("aiokafka", lambda: aiokafka_write(offsets, timestamps, page), PAGE, "write"),
        ):
            runs[direction].setdefault(name, []).append(timed(run, records))
    for direction, by_name in runs.items():
        ours, theirs = (statistics.median(by_name[n]) for n in ("msgstore", "aiokafka"))
        print(
            json.dumps(
                {
                    "bench": f"kafka_codec_{direction}",
                    "records": PRODUCED if direction == "read" else PAGE,
                    "value_bytes": len(VALUE),
                    "rounds": args.rounds,
                    "msgstore_us_per_record": round(ours, 3),
                    "aiokafka_us_per_record": round(theirs, 3),
                    "speedup": round(theirs / ours, 1),
                }
            )
        )


if __name__ == "__main__":
    main()
