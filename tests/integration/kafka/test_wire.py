"""The listener's answers to exact bytes: retried idempotent batches, corrupt CRCs, batches
too large, and garbage (truncated frames, wrong sizes, unknown API keys, random bytes): an
error answer or a closed connection, the node keeps serving, nothing is stored."""

from __future__ import annotations

import datetime
import random
import socket
import struct

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_reader

from tests.integration.kafka.conftest import KafkaNode, topic_name
from tests.integration.kafka.wire import Wire, record_batch

TIMEOUT = datetime.timedelta(seconds=10)


def produce_request(topic: str, batches: dict, acks: int = -1) -> ProduceRequest:
    """One Produce of one topic: ``{partition: record batch}``."""
    return ProduceRequest(
        acks=acks,
        timeout=TIMEOUT,
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=tuple(
                    PartitionProduceData(index=p, records=bytes(b)) for p, b in batches.items()
                ),
            ),
        ),
    )


def produce(wire: Wire, topic: str, batch: bytes, partition: int = 0, acks: int = -1):
    (topic_answer,) = wire.call(produce_request(topic, {partition: batch}, acks)).responses
    (answer,) = topic_answer.partition_responses
    return answer


def still_serving(node: KafkaNode) -> None:
    wire = Wire(node.kafka_port)
    try:
        answer = wire.call(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert answer.error_code == ErrorCode.none
        assert {a.api_key for a in answer.api_keys} >= {0, 1, 2, 3, 18, 22}
    finally:
        wire.close()


def closed(wire: Wire) -> bool:
    try:
        return wire.read_frame() is None
    except ConnectionResetError:
        return True


def test_a_retried_idempotent_batch_is_stored_once(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    wire = Wire(kafka_node.kafka_port)
    init = wire.call(InitProducerIdRequest(transactional_id=None, transaction_timeout=TIMEOUT))
    assert init.error_code == ErrorCode.none and init.producer_id > 0
    pid, epoch = init.producer_id, init.producer_epoch
    first = record_batch([(b"k", b"one"), (b"k", b"two")], pid, epoch, 0)
    second = record_batch([(b"k", b"three")], pid, epoch, 2)
    a = produce(wire, topic, first)
    again = produce(wire, topic, first)  # the retry of a batch whose answer was lost
    b = produce(wire, topic, second)
    assert (a.error_code, again.error_code, b.error_code) == (ErrorCode.none,) * 3
    assert (a.base_offset, again.base_offset, b.base_offset) == (0, 0, 2)
    assert kafka_node.offsets(topic) == [[0, 3]]
    other = wire.call(InitProducerIdRequest(transactional_id=None, transaction_timeout=TIMEOUT))
    assert other.producer_id != pid  # every producer its own id
    wire.close()


def test_a_corrupt_crc_is_refused_and_nothing_is_stored(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    wire = Wire(kafka_node.kafka_port)
    good = record_batch([(b"k", b"value")])
    bad_crc = bytearray(good)
    bad_crc[17] ^= 0xFF  # the CRC field
    bad_body = bytearray(good)
    bad_body[-1] ^= 0x01  # a byte of the last record's value
    bad_size = bytearray(good)
    struct.pack_into(">i", bad_size, 8, len(good))  # the length field 12 bytes too long
    for batch in (bad_crc, bad_body, bad_size, good[:40]):
        answer = produce(wire, topic, batch)
        assert answer.error_code == ErrorCode.corrupt_message, answer
        assert answer.error_message
    assert kafka_node.offsets(topic) == [[0, 0]]
    assert produce(wire, topic, good).error_code == ErrorCode.none  # the connection goes on
    assert kafka_node.offsets(topic) == [[0, 1]]
    wire.close()


@pytest.mark.parametrize("codec", [1, 4], ids=["gzip", "zstd"])
def test_a_decompression_bomb_is_refused_and_nothing_is_stored(
    kafka_node: KafkaNode, request, codec: int
):
    """A few hundred kilobytes that decompress to 80 MiB (past the 64 MiB bound,
    kafka/decompress.py): MESSAGE_TOO_LARGE, nothing stored, the connection goes on."""
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    wire = Wire(kafka_node.kafka_port)
    try:
        bomb = record_batch([(None, b"\0" * (1 << 20))] * 80, codec=codec)
        assert len(bomb) < 1 << 20
        answer = produce(wire, topic, bomb)
        assert answer.error_code == ErrorCode.message_too_large, answer
        assert "decompress to more than" in answer.error_message
        assert kafka_node.offsets(topic) == [[0, 0]]
        small = record_batch([(b"k", b"v" * 1000)] * 10, codec=codec)
        assert produce(wire, topic, small).error_code == ErrorCode.none
        assert kafka_node.offsets(topic) == [[0, 10]]
    finally:
        wire.close()


def test_errors_of_a_partition_are_answered_in_its_slot(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    wire = Wire(kafka_node.kafka_port)
    batch = record_batch([(b"k", b"v")])
    assert produce(wire, topic + "-none", batch).error_code == (
        ErrorCode.unknown_topic_or_partition
    )
    assert produce(wire, topic, batch, partition=7).error_code == (
        ErrorCode.unknown_topic_or_partition
    )
    large = record_batch([(b"k", b"x" * 70_000)])  # the node allows 65,536-byte values
    assert produce(wire, topic, large).error_code == ErrorCode.message_too_large
    not_utf8 = record_batch([(b"\xff\xfe", b"v")])
    assert produce(wire, topic, not_utf8).error_code == ErrorCode.invalid_record
    assert kafka_node.offsets(topic) == [[0, 0]]
    wire.close()


def test_an_api_versions_request_of_a_newer_version_gets_v0_and_unsupported_version(
    kafka_node: KafkaNode,
):
    wire = Wire(kafka_node.kafka_port)
    body = struct.pack(">hhih", 18, 99, 5, 1) + b"x" + b"\0"
    wire.send_raw(struct.pack(">i", len(body)) + body)
    data = wire.read_frame()
    assert data is not None and struct.unpack_from(">i", data)[0] == 5
    answer, _ = entity_reader(ApiVersionsV0)(data, 4)
    assert answer.error_code == ErrorCode.unsupported_version
    assert any(a.api_key == 18 for a in answer.api_keys)
    wire.close()


GARBAGE = {
    "unknown api key": struct.pack(">i", 10) + struct.pack(">hhi", 9999, 0, 1) + b"\0\0",
    "negative size": struct.pack(">i", -5) + b"12345",
    "zero size": struct.pack(">i", 0),
    "size over the limit": struct.pack(">i", 2**31 - 1) + b"\0" * 64,
    "unsupported produce version": struct.pack(">i", 10) + struct.pack(">hhi", 0, 1, 1) + b"\0\0",
    "body that does not parse": struct.pack(">i", 14)
    + struct.pack(">hhi", 3, 9, 1)
    + b"\xff\xff\xff\xff\xff\xff",
}


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_garbage_closes_the_connection_and_the_node_keeps_serving(kafka_node: KafkaNode, name: str):
    wire = Wire(kafka_node.kafka_port)
    wire.send_raw(GARBAGE[name])
    assert closed(wire), name
    wire.close()
    still_serving(kafka_node)


def test_a_truncated_frame_closes_the_connection(kafka_node: KafkaNode):
    wire = Wire(kafka_node.kafka_port)
    wire.send_raw(struct.pack(">i", 100) + struct.pack(">hhi", 18, 0, 1))
    wire.sock.shutdown(socket.SHUT_WR)
    assert closed(wire)
    wire.close()
    still_serving(kafka_node)


def test_random_frames_never_store_anything(kafka_node: KafkaNode, request):
    """Seeded random frames: valid API keys and versions with random bodies, random sizes
    and cut frames, each on a fresh connection; every one ends with an answer or a closed
    connection, and the topic stays empty."""
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    rnd = random.Random(28)
    good = record_batch([(b"k", b"value")])
    for _ in range(150):
        key = rnd.choice([0, 0, 0, 1, 2, 3, 18, 22, rnd.randrange(-5, 200)])
        version = rnd.randrange(-1, 14)
        body = struct.pack(">hhi", key, version, 1) + bytes(
            rnd.randrange(256) for _ in range(rnd.randrange(0, 120))
        )
        if rnd.random() < 0.3:  # a real produce body with a bit flipped inside the batch
            wire = Wire(kafka_node.kafka_port)
            frame = bytearray(wire.frame(produce_request(topic, {0: good}, acks=1)))
            # from the magic byte on: the CRC covers the batch from its attributes, and the
            # base offset and leader epoch before the magic are not checked (as in Kafka)
            at = rnd.randrange(len(frame) - len(good) + 16, len(frame))
            frame[at] ^= 1 << rnd.randrange(8)
            wire.close()
            body = bytes(frame[4:])
        size = len(body) if rnd.random() < 0.8 else rnd.randrange(-10, len(body) + 10)
        wire = Wire(kafka_node.kafka_port)
        try:
            wire.send_raw(struct.pack(">i", size) + body)
            wire.sock.shutdown(socket.SHUT_WR)
            while True:  # answers until the node closes its side
                if closed(wire):
                    break
        finally:
            wire.close()
    still_serving(kafka_node)
    assert kafka_node.offsets(topic) == [[0, 0]]


def test_a_retried_batch_is_stored_once_across_a_restart(tmp_path):
    node = KafkaNode(tmp_path / "restarted")
    node.start()
    try:
        node.create_topic("kept")
        wire = Wire(node.kafka_port)
        init = wire.call(InitProducerIdRequest(transactional_id=None, transaction_timeout=TIMEOUT))
        batch = record_batch([(b"k", b"v1"), (b"k", b"v2")], init.producer_id, 0, 0)
        assert produce(wire, "kept", batch).base_offset == 0
        wire.close()
        assert node.stop() == 0
        node.start()  # same data directory and ports
        wire = Wire(node.kafka_port)
        again = produce(wire, "kept", batch)  # the producer retries after the node came back
        wire.close()
        assert (again.error_code, again.base_offset) == (ErrorCode.none, 0)
        assert node.offsets("kept") == [[0, 2]]
    finally:
        node.stop()


def test_a_request_of_many_partitions_is_answered_partition_by_partition(
    kafka_node: KafkaNode, request
):
    """The distinct partitions of one Produce are appended together: each answer sits in its
    partition's slot with that partition's base offset (an error in the middle stays its
    own); a partition named twice gets its batches in the request's order."""
    topic, other = topic_name(request) + "-a", topic_name(request) + "-b"
    kafka_node.create_topic(topic, partitions=3)
    kafka_node.create_topic(other)

    def data(part: int, n: int) -> PartitionProduceData:
        rows = [(f"k{part}-{i}".encode(), b"v" * (i + 1)) for i in range(n)]
        return PartitionProduceData(index=part, records=bytes(record_batch(rows)))

    wire = Wire(kafka_node.kafka_port)
    try:
        first = wire.call(
            ProduceRequest(
                acks=1,
                timeout=TIMEOUT,
                topic_data=(
                    TopicProduceData(
                        name=topic, partition_data=(data(0, 2), data(9, 1), data(1, 3), data(2, 4))
                    ),
                    TopicProduceData(name=other, partition_data=(data(0, 5),)),
                ),
            )
        )
        got = [
            (t.name, p.index, p.error_code, p.base_offset)
            for t in first.responses
            for p in t.partition_responses
        ]
        assert got == [
            (topic, 0, ErrorCode.none, 0),
            (topic, 9, ErrorCode.unknown_topic_or_partition, -1),
            (topic, 1, ErrorCode.none, 0),
            (topic, 2, ErrorCode.none, 0),
            (other, 0, ErrorCode.none, 0),
        ]
        twice = wire.call(
            ProduceRequest(
                acks=1,
                timeout=TIMEOUT,
                topic_data=(TopicProduceData(name=topic, partition_data=(data(1, 2), data(1, 6))),),
            )
        )
        assert [p.base_offset for p in twice.responses[0].partition_responses] == [3, 5]
    finally:
        wire.close()
    assert kafka_node.offsets(topic) == [[0, 2], [0, 11], [0, 4]]
    assert kafka_node.offsets(other) == [[0, 5]]


def test_a_bad_record_in_one_partition_of_a_request_fails_only_that_partition(
    kafka_node: KafkaNode, request
):
    """Plain batches of one request are appended to the store as one batch; a record the
    store refuses (a key that is not UTF-8, a value over the limit) sends each partition's
    batch on its own, so the others are stored and answered with their base offsets."""
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=4)
    good = [(f"k{i}".encode(), b"v") for i in range(3)]
    batches = {
        0: record_batch(good),
        1: record_batch([*good, (b"\xff\xfe", b"v")]),  # not UTF-8: INVALID_RECORD
        2: record_batch(good),
        3: record_batch([(b"k", b"x" * 70_000)]),  # over the node's value limit
    }
    wire = Wire(kafka_node.kafka_port)
    try:
        for _round in range(2):
            answer = wire.call(produce_request(topic, batches, acks=1))
            got = {
                p.index: (p.error_code, p.base_offset)
                for p in answer.responses[0].partition_responses
            }
            base = 3 * _round
            assert got == {
                0: (ErrorCode.none, base),
                1: (ErrorCode.invalid_record, -1),
                2: (ErrorCode.none, base),
                3: (ErrorCode.message_too_large, -1),
            }
    finally:
        wire.close()
    assert kafka_node.offsets(topic) == [[0, 6], [0, 0], [0, 6], [0, 0]]
