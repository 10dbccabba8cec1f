"""Replication building blocks on real files: the routing table's log routes and their
validation, leader-epoch history, and the checks a follower makes on a shipment."""

from __future__ import annotations

import ipaddress
import shutil
import threading
from pathlib import Path

import pytest

from storage_node.cli.local import free_port
from storage_node.errors import CorruptData, Fenced, InvalidArgument, NotOwner, OffsetOutOfRange
from storage_node.formats.record import check_frames
from storage_node.replication.epochs import LeaderEpochs, check_epoch
from storage_node.replication.replicas import LogHost, standin_ip
from storage_node.replication.shipping import FETCH_BYTES
from storage_node.store import MessageIn, Store, StoreConfig, TopicConfig
from storage_node.wire.routing_table import new_local_table, parse_routing


def _table_doc() -> dict:
    table = new_local_table([(f"node-{i}", f"http://127.0.0.1:{7000 + i}") for i in range(3)], 3)
    return table.with_topic("t", 3, "lz4", 1.0).to_json()


def test_log_routes_round_trip_and_resolve_leaders() -> None:
    doc = _table_doc()
    table = parse_routing(doc)
    assert table.replication_factor == 3 and table.min_in_sync == 2
    assert table.logs["node-0"].replicas == ("node-0", "node-1", "node-2")
    assert parse_routing(table.to_json()) == table
    moved = table.with_logs(
        {
            **table.logs,
            "node-0": type(table.logs["node-0"])(
                "node-0", "node-2", 5, ("node-0", "node-1", "node-2")
            ),
        }
    )
    assert moved.node_address("node-0") == "http://127.0.0.1:7002"
    assert moved.owned_partitions("t", "node-2") == [0, 2]


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["replication"].update(factor=4),
        lambda d: d["replication"].update(min_in_sync=3, factor=2),
        lambda d: d["logs"]["node-0"].update(leader="node-9"),
        lambda d: d["logs"]["node-0"].update(epoch=-1),
        lambda d: d["logs"]["node-0"].update(replicas=["node-1", "node-2"]),
        lambda d: d["topics"]["t"].update(owners=["node-0", "node-1", "nope"]),
    ],
)
def test_bad_log_routes_are_refused(change: object) -> None:
    doc = _table_doc()
    change(doc)  # type: ignore[operator]
    with pytest.raises(InvalidArgument):
        parse_routing(doc)


def test_replication_factor_needs_enough_nodes() -> None:
    with pytest.raises(InvalidArgument):
        new_local_table([("node-0", "http://127.0.0.1:1")], 2)
    with pytest.raises(InvalidArgument):
        new_local_table([("node-0", "http://127.0.0.1:1")], 0)


def test_leader_epochs_persist_and_answer_epoch_ends(tmp_path: Path) -> None:
    epochs = LeaderEpochs(str(tmp_path))
    epochs.begin(1, 0)
    epochs.begin(3, 500)
    epochs.begin(2, 100)  # older than the newest: ignored
    again = LeaderEpochs(str(tmp_path))
    assert again.entries == [(1, 0), (3, 500)]
    assert again.end_of(1, 900) == 500
    assert again.end_of(3, 900) == 900
    again.truncate(400)
    assert again.entries == [(1, 0)]
    check_epoch(3, 3, "x")
    with pytest.raises(Fenced):
        check_epoch(2, 3, "x")


def test_shipments_hold_whole_checked_batches(tmp_path: Path) -> None:
    store = Store.open(StoreConfig(data_dir=str(tmp_path), lifecycle_interval_s=0))
    try:
        store.create_topic(TopicConfig(name="t", partitions=1))
        for i in range(3):
            store.append("t", [MessageIn(value=b"v%d" % j, key=f"k{i}-{j}") for j in range(50)])
        _seg, shipped = store.log.read_frames(0, FETCH_BYTES)
        assert len(shipped) == store.log.durable_end
        assert check_frames(shipped) >= 3
        _seg, part = store.log.read_frames(0, len(shipped) - 1)
        assert 0 < len(part) < len(shipped)  # cut back to the last whole batch
        check_frames(part)
        damaged = bytearray(shipped)
        damaged[40] ^= 0xFF
        with pytest.raises(CorruptData):
            check_frames(bytes(damaged))
        with pytest.raises(CorruptData):
            check_frames(shipped[:-3])
    finally:
        store.close()


def test_written_bytes_ship_before_their_fsync_and_wake_the_fetches(tmp_path: Path) -> None:
    # async mode writes at every flush and fsyncs once a minute here: the written bytes
    # wait for their fsync, as a sync leader's bytes do while its fsync runs
    config = StoreConfig(
        data_dir=str(tmp_path),
        lifecycle_interval_s=0,
        flush_mode="async",
        flush_max_age_ms=1,
        async_fsync_interval_ms=60_000,
    )
    store = Store.open(config)
    try:
        woken = threading.Event()
        store.log.on_written = woken.set
        store.create_topic(TopicConfig(name="t", partitions=1))
        store.append("t", [MessageIn(value=b"v%d" % j) for j in range(50)])
        assert woken.wait(10), "the write did not call on_written"
        log = store.log
        assert log.durable_end < log.shippable_end == log.end
        _seg, shipped = log.read_frames(0, FETCH_BYTES)
        assert len(shipped) == log.shippable_end  # not yet durable, shipped all the same
        assert check_frames(shipped) >= 1
        with pytest.raises(OffsetOutOfRange):
            log.read_frames(log.shippable_end + 1, FETCH_BYTES)
        log.flush()
        assert log.durable_end == log.shippable_end
    finally:
        store.close()


def test_local_up_refuses_a_bad_replication_factor_and_changes_nothing(tmp_path: Path) -> None:
    from storage_node.cli.local import LocalCluster

    target = tmp_path / "cluster"
    for nodes, factor, min_in_sync in ((1, 3, None), (3, 4, None), (3, 3, 4)):
        with pytest.raises(InvalidArgument):
            LocalCluster(target).up(nodes=nodes, replication_factor=factor, min_in_sync=min_in_sync)
        assert not target.exists()


def test_offset_commits_in_a_log_reach_its_copy_and_come_back_on_replay(tmp_path: Path) -> None:
    leader = Store.open(StoreConfig(data_dir=str(tmp_path / "a"), lifecycle_interval_s=0))
    copy = Store.open(StoreConfig(data_dir=str(tmp_path / "b"), lifecycle_interval_s=0))
    try:
        for s in (leader, copy):
            s.create_topic(TopicConfig(name="t", partitions=1))
        leader.append("t", [MessageIn(value=b"v%d" % j) for j in range(10)])
        leader.commit_offset("g", "t", 0, 4, in_log=True)
        leader.commit_offset("g", "t", 0, 7, in_log=True)  # the newest commit wins
        end = leader.log.end
        with pytest.raises(OffsetOutOfRange):  # a bad commit changes nothing
            leader.commit_offset("g", "t", 0, 11, in_log=True)
        assert leader.log.end == end and leader.log.durable_end == end
        assert leader.committed_offsets("g") == {"t": {0: 7}}
        segment, shipped = leader.log.read_frames(0, FETCH_BYTES)
        copy.append_copied(shipped, 0, segment)
        assert copy.committed_offsets("g") == {"t": {0: 7}}
        assert copy.read("t", 0, 0, max_messages=100).next_offset == 10  # no extra messages
    finally:
        leader.close()
        copy.close()
    # the offsets file and the checkpoint lost: replay finds the commits in the log
    shutil.rmtree(tmp_path / "b" / "offsets")
    (tmp_path / "b" / "checkpoint").unlink()
    again = Store.open(StoreConfig(data_dir=str(tmp_path / "b"), lifecycle_interval_s=0))
    try:
        assert again.committed_offsets("g") == {"t": {0: 7}}
        assert again.read("t", 0, 0, max_messages=100).next_offset == 10
    finally:
        again.close()


def test_a_copy_promoted_before_it_heard_from_a_leader_keeps_its_logs_ip(tmp_path: Path) -> None:
    # the leader of node-0's log died before node-1's copy fetched anything (so it never
    # learned the log's IP); node-1's own log gives IDs with node-1's IP, so node-0's log
    # must not: it takes node-0's IP from the routing table
    nodes = [(f"node-{i}", f"http://127.0.0.{i + 1}:{free_port()}") for i in range(3)]
    table = new_local_table(nodes, 3).with_topic("t", 3, "lz4", 1.0)
    config = StoreConfig(data_dir=str(tmp_path), lifecycle_interval_s=0, node_ip="127.0.0.2")
    host = LogHost("node-1", str(tmp_path), config, {}, False)
    try:
        host.apply(table)  # follows node-0's and node-2's logs (their leaders are down)
        routes = dict(table.logs)
        old = routes["node-0"]
        routes["node-0"] = type(old)("node-0", "node-1", old.epoch + 3, old.replicas)
        host.apply(table.with_logs(routes))
        led = host.logs["node-0"]
        assert led.role == "leader" and led.node_ip() == "127.0.0.1"
        assert led.store.node_ip != host.logs["node-1"].store.node_ip
    finally:
        host.close()


def test_on_kubernetes_a_copy_promoted_before_it_heard_from_a_leader_gets_its_own_ip(
    tmp_path: Path,
) -> None:
    # Node addresses are host names there, so the table cannot say a log's IP. A copy of
    # node-2's log promoted on node-0 before it copied anything once took node-0's own IP:
    # node-0's log and node-2's then gave the same message IDs to different messages (the
    # end-to-end replication test found a lookup by ID answered with another message).
    nodes = [(f"node-{i}", f"http://node-{i}.nodes.shop.svc:{free_port()}") for i in range(3)]
    table = new_local_table(nodes, 3).with_topic("t", 3, "lz4", 1.0)
    config = StoreConfig(data_dir=str(tmp_path), lifecycle_interval_s=0, node_ip="10.244.2.19")
    host = LogHost("node-0", str(tmp_path), config, {}, False)
    try:
        host.apply(table)
        routes = dict(table.logs)
        for log_id in ("node-0", "node-2"):  # the controller names node-0 their leader
            old = routes[log_id]
            routes[log_id] = type(old)(log_id, "node-0", old.epoch + 1, old.replicas)
        host.apply(table.with_logs(routes))
        own, taken = host.logs["node-0"], host.logs["node-2"]
        assert own.role == taken.role == "leader"
        # not the pod's IP either: a later pod may be given it (and its log another's IDs)
        for hosted in (own, taken):
            assert hosted.node_ip() == standin_ip(hosted.id, sorted(table.logs))
            assert ipaddress.IPv4Address(hosted.node_ip()) in ipaddress.IPv4Network("240.0.0.0/4")
        assert own.store.node_ip != taken.store.node_ip
        for hosted in (own, taken):
            hosted.store.create_topic(TopicConfig("t", 3, "lz4"))
        for p in range(3):  # IDs handed out by both logs never meet
            own.store.append("t", [MessageIn(b"a", partition=p)])
            taken.store.append("t", [MessageIn(b"b", partition=p)])
        ids_own = {m.msg_id for p in range(3) for m in own.store.read("t", p, 0).messages}
        ids_taken = {m.msg_id for p in range(3) for m in taken.store.read("t", p, 0).messages}
        assert ids_own and ids_taken and not ids_own & ids_taken
    finally:
        host.close()


def test_standin_ips_differ_for_every_log_of_a_table() -> None:
    """Hash collisions move a log to the next free address, the same way on every node."""
    names = [f"store-{i}" for i in range(2000)]
    ips = [standin_ip(n, names) for n in names]
    assert len(set(ips)) == len(names)
    assert all(ipaddress.IPv4Address(ip) in ipaddress.IPv4Network("240.0.0.0/4") for ip in ips)
    assert standin_ip("store-7", list(reversed(names))) == ips[7]  # order of the table: none


def test_a_corrupt_log_json_is_an_error_never_a_stand_in_ip(tmp_path: Path, caplog) -> None:
    # log.json keeps the IP a log's message IDs carry; read as "no IP", a damaged file once
    # made the new leader pick a stand-in IP and hand out IDs of another identity
    nodes = [(f"node-{i}", f"http://node-{i}.nodes.shop.svc:{free_port()}") for i in range(3)]
    table = new_local_table(nodes, 3).with_topic("t", 3, "lz4", 1.0)
    config = StoreConfig(data_dir=str(tmp_path), lifecycle_interval_s=0, node_ip="10.244.2.19")
    host = LogHost("node-1", str(tmp_path), config, {}, False)
    try:
        host.apply(table)  # follows node-0's log (its leader is down)
        info = tmp_path / "logs" / "node-0" / "log.json"
        info.write_bytes(b'{"node_ip": ')  # torn
        routes = dict(table.logs)
        for log_id in ("node-0", "node-1"):  # the controller names node-1 their leader
            old = routes[log_id]
            routes[log_id] = type(old)(log_id, "node-1", old.epoch + 1, old.replicas)
        with pytest.raises(CorruptData, match="log.json"):
            host.apply(table.with_logs(routes))
        assert "cannot lead it" in caplog.text
        assert info.read_bytes() == b'{"node_ip": '  # reported, not replaced
        assert host.logs["node-0"].role != "leader"
        assert host.logs["node-1"].role == "leader"  # the other logs followed the table
        with pytest.raises(NotOwner):
            host.leader_store("node-0")
    finally:
        host.close()
