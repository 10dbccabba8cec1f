"""Idempotent producers' sequence and epoch rules on the wire, as Apache Kafka's broker
applies them: a gap or a reordering is OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch than one
the partition has taken INVALID_PRODUCER_EPOCH (nothing stored for either), a duplicate is
answered with its first offset; the rules hold across a restart (the table is in the log)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

from tests.integration.kafka.conftest import KafkaNode, topic_name
from tests.integration.kafka.test_wire import TIMEOUT, produce
from tests.integration.kafka.wire import Wire, record_batch


def init(wire: Wire, pid: int = -1, epoch: int = -1) -> tuple[int, int]:
    answer = wire.call(
        InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=TIMEOUT,
            producer_id=pid,
            producer_epoch=epoch,
        )
    )
    assert answer.error_code == ErrorCode.none
    return answer.producer_id, answer.producer_epoch


def batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytearray:
    return record_batch([(b"k", v) for v in values], pid, epoch, seq)


def test_gaps_reordering_duplicates_and_old_epochs(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    wire = Wire(kafka_node.kafka_port)
    try:
        pid, epoch = init(wire)
        assert produce(wire, topic, batch(pid, epoch, 0, b"a", b"b")).base_offset == 0
        gap = produce(wire, topic, batch(pid, epoch, 5, b"x"))  # 2 expected
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        assert "expected 2" in (gap.error_message or "")
        before = produce(wire, topic, batch(pid, epoch, 1, b"y"))  # inside the last batch
        assert before.error_code == ErrorCode.out_of_order_sequence_number
        ok = produce(wire, topic, batch(pid, epoch, 2, b"c"))
        assert (ok.error_code, ok.base_offset) == (ErrorCode.none, 2)
        dup = produce(wire, topic, batch(pid, epoch, 0, b"a", b"b"))  # an older batch again
        assert (dup.error_code, dup.base_offset) == (ErrorCode.none, 0)
        assert kafka_node.offsets(topic) == [[0, 3]]
        # a new epoch (KIP-360) starts its sequences again; the old epoch is fenced
        pid2, epoch2 = init(wire, pid, epoch)
        assert (pid2, epoch2) == (pid, epoch + 1)
        assert produce(wire, topic, batch(pid, epoch2, 0, b"d")).base_offset == 3
        stale = produce(wire, topic, batch(pid, epoch, 3, b"z"))
        assert stale.error_code == ErrorCode.invalid_producer_epoch
        assert kafka_node.offsets(topic) == [[0, 4]]
    finally:
        wire.close()


def test_the_rules_hold_after_a_restart(tmp_path, request):
    node = KafkaNode(tmp_path / "n")
    node.start()
    try:
        topic = topic_name(request)
        node.create_topic(topic)
        wire = Wire(node.kafka_port)
        pid, epoch = init(wire)
        produce(wire, topic, batch(pid, epoch, 0, b"a"))
        produce(wire, topic, batch(pid, epoch + 1, 0, b"b"))
        wire.close()
        node.stop()
        node.start()
        wire = Wire(node.kafka_port)
        gap = produce(wire, topic, batch(pid, epoch + 1, 3, b"x"))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        stale = produce(wire, topic, batch(pid, epoch, 1, b"y"))
        assert stale.error_code == ErrorCode.invalid_producer_epoch
        ok = produce(wire, topic, batch(pid, epoch + 1, 1, b"c"))
        assert (ok.error_code, ok.base_offset) == (ErrorCode.none, 2)
        wire.close()
        assert node.offsets(topic) == [[0, 3]]
    finally:
        node.stop()
