"""Non-stop writes: producer threads append while the background lifecycle worker seals,
compacts and uploads files underneath them and reader threads look up what was just
acknowledged; every acknowledged message must be found at every moment, whatever state its
files are in, and afterwards each partition holds exactly the acknowledged messages in order.
"""

from __future__ import annotations

import threading
from pathlib import Path

from storage_node.store import MessageIn, Store, TopicConfig

from .support import read_all, small_config

TOPIC = "busy"
PRODUCERS = 3
BATCHES = 25


def test_reads_see_every_ack_while_files_move(tmp_path: Path) -> None:
    config = small_config(
        tmp_path / "data",
        segment_bytes=32 * 1024,
        lifecycle_interval_s=0.02,
        compact_after_s=0,
        upload_after_s=0,
    )
    store = Store.open(config)
    store.create_topic(TopicConfig(name=TOPIC, partitions=4))
    acked: list[tuple[MessageIn, str, int, int]] = []
    lock = threading.Lock()
    done = threading.Event()
    failures: list[str] = []

    def produce(thread: int) -> None:
        for batch in range(BATCHES):
            messages = [
                MessageIn(value=b"p%d-b%d-i%d|" % (thread, batch, i) + b"x" * (i * 37), key=f"k{i}")
                for i in range(12)
            ]
            results = store.append(TOPIC, messages)
            with lock:
                acked.extend(
                    (m, r.msg_id, r.partition, r.offset)
                    for m, r in zip(messages, results, strict=True)
                )

    def read_back() -> None:
        checked = 0
        while not done.is_set() or checked < len(acked):
            with lock:
                if checked >= len(acked):
                    pending = None
                else:
                    pending = acked[checked]
                    checked += 1
            if pending is None:
                done.wait(0.001)
                continue
            message, msg_id, partition, offset = pending
            try:
                by_id = store.get_message(msg_id)
                by_offset = store.read(TOPIC, partition, offset, max_messages=1).messages
                by_key = store.lookup_key(TOPIC, message.key, max_count=10_000).messages
            except Exception as exc:  # any error while files move is a failure
                failures.append(f"{msg_id}: {type(exc).__name__}: {exc}")
                continue
            if by_id.value != message.value or not by_offset or by_offset[0].value != message.value:
                failures.append(f"{msg_id} served wrong bytes")
            if not any(m.msg_id == msg_id for m in by_key):
                failures.append(f"{msg_id} missing from key lookup")

    try:
        producers = [threading.Thread(target=produce, args=(t,)) for t in range(PRODUCERS)]
        readers = [threading.Thread(target=read_back) for _ in range(2)]
        for thread in producers + readers:
            thread.start()
        for thread in producers:
            thread.join()
        done.set()
        for thread in readers:
            thread.join()
        assert not failures, failures[:10]

        states = {f.state for f in store.list_files()}
        assert states & {"compacted", "uploaded"}, f"the worker moved no file: {states}"
        stored = read_all(store, TOPIC)
        expected = {(p, o): m.value for m, _i, p, o in acked}
        for partition, messages in stored.items():
            for m in messages:
                assert expected.pop((partition, m.offset)) == m.value
        assert not expected, f"{len(expected)} acknowledged messages not stored"
    finally:
        store.close()
