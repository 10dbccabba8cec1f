"""Fetch paging over one connection, where the listener reads the next pages ahead
(kafka.fetch.ReadAhead): every record comes once and in order, byte-exact; the answer that
takes pages read ahead carries the high watermark of its own time; a Fetch that asks
something else gets what it asked."""

from __future__ import annotations

import datetime

from aiokafka.record._crecords import DefaultRecordBatch
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from tests.integration.kafka.conftest import KafkaNode, topic_name
from tests.integration.kafka.test_wire import produce_request
from tests.integration.kafka.wire import Wire, record_batch

PAGE_BYTES = 4096  # a partition's page: about 35 of the records below


def fetch(wire: Wire, topic: str, offsets: dict[int, int]) -> dict[int, tuple[list, int]]:
    """One Fetch of ``offsets`` ({partition: offset}); {partition: (records, high)}."""
    answer = wire.call(
        FetchRequest(
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=0),
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                FetchTopic(
                    topic=topic,
                    partitions=tuple(
                        FetchPartition(
                            partition=p,
                            current_leader_epoch=-1,
                            fetch_offset=o,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=PAGE_BYTES,
                        )
                        for p, o in offsets.items()
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
    )
    out = {}
    for part in answer.responses[0].partitions:
        assert part.error_code == ErrorCode.none
        records = []
        data = part.records or b""
        while data:
            size = 12 + int.from_bytes(data[8:12], "big")  # an answer may hold several
            batch = DefaultRecordBatch(bytes(data[:size]))
            records += [(r.offset, r.key, r.value) for r in batch]
            data = data[size:]
        out[part.partition_index] = (records, part.high_watermark)
    return out


def produce_rows(node: KafkaNode, topic: str, partition: int, rows: list) -> None:
    wire = Wire(node.kafka_port)
    try:
        answer = wire.call(produce_request(topic, {partition: record_batch(rows)}, acks=1))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    finally:
        wire.close()


def test_paging_over_one_connection_reads_every_record_once(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=2)
    rows = {
        p: [(f"k{p}-{i}".encode(), bytes([p, i % 256]) * 50) for i in range(300)] for p in (0, 1)
    }
    for p in (0, 1):
        produce_rows(kafka_node, topic, p, rows[p])
    wire = Wire(kafka_node.kafka_port)
    try:
        offsets = {0: 0, 1: 0}
        got: dict[int, list] = {0: [], 1: []}
        highs = []
        added = False
        while any(offsets[p] < 300 + (5 if added and p == 0 else 0) for p in (0, 1)):
            answer = fetch(wire, topic, offsets)
            for p, (records, high) in answer.items():
                got[p] += records
                if records:
                    offsets[p] = records[-1][0] + 1
                highs.append((p, high))
            if not added and offsets[0] > PAGE_BYTES // 100:
                # the next pages are being read ahead now: five more records must show in
                # the next answer's high watermark (and be read in their turn)
                produce_rows(kafka_node, topic, 0, [(b"late", b"L" * 10)] * 5)
                rows[0] += [(b"late", b"L" * 10)] * 5
                added = True
                answer = fetch(wire, topic, offsets)
                assert answer[0][1] == 305  # the high watermark of the answer's own time
                for p, (records, _) in answer.items():
                    got[p] += records
                    if records:
                        offsets[p] = records[-1][0] + 1
        for p in (0, 1):
            assert [o for o, _, _ in got[p]] == list(range(len(rows[p])))
            assert [(k, v) for _, k, v in got[p]] == rows[p]
    finally:
        wire.close()


def test_a_fetch_asking_other_offsets_gets_what_it_asked(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=1)
    rows = [(f"k{i}".encode(), b"x" * 100) for i in range(200)]
    produce_rows(kafka_node, topic, 0, rows)
    wire = Wire(kafka_node.kafka_port)
    try:
        first, _ = fetch(wire, topic, {0: 0})[0]
        assert first and first[0][0] == 0
        # not where the last answer ended (the pages read ahead start there): offset 7
        again, high = fetch(wire, topic, {0: 7})[0]
        assert again[0][0] == 7 and high == 200
        assert [(k, v) for _, k, v in again] == rows[7 : 7 + len(again)]
        # and from the end of that answer, pages follow on
        nxt, _ = fetch(wire, topic, {0: again[-1][0] + 1})[0]
        assert nxt[0][0] == again[-1][0] + 1
    finally:
        wire.close()
