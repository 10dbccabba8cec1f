"""The console's metrics history: a node's Prometheus text read into series, rates from
counters (a restart is no negative rate), the ring buffer's bound, the SVG charts (numbers
and escaped text only), and the time search's cursor."""

from __future__ import annotations

import pytest

from storage_node.console.charts import chart, human
from storage_node.console.history import History, latest_rate, rates
from storage_node.console.scraper import merge, samples_of
from storage_node.console.timerange import parse_cursor
from storage_node.errors import InvalidArgument

METRICS = """\
# TYPE msgstore_appended_messages counter
msgstore_appended_messages_total 120.0
# TYPE msgstore_appended_bytes counter
msgstore_appended_bytes_total 4096.0
msgstore_disk_free_bytes 600.0
msgstore_disk_size_bytes 1000.0
msgstore_partition_next_offset{topic="orders",partition="0"} 70.0
msgstore_partition_next_offset{topic="orders",partition="3"} 30.0
msgstore_group_committed_offset{group="billing",topic="orders",partition="0"} 50.0
msgstore_group_lag_messages{group="billing",topic="orders",partition="0"} 20.0
msgstore_group_lag_messages{group="billing",topic="orders",partition="3"} 30.0
"""


OTHER_NODE = """\
msgstore_appended_messages_total 5.0
msgstore_partition_first_offset{topic="orders",partition="1"} 4.0
msgstore_partition_next_offset{topic="orders",partition="1"} 10.0
"""


def test_a_nodes_metrics_become_the_console_series():
    s = samples_of("node-0", METRICS).series
    assert s["node/node-0/in_messages"] == 120 and s["node/node-0/in_bytes"] == 4096
    assert s["node/node-0/disk_used"] == 400 and s["node/node-0/disk_size"] == 1000
    assert s["topic/orders/in"] == 100 and s["topic/orders/out"] == 50
    assert s["node/node-0/out_messages"] == 50


def test_group_lag_is_counted_as_group_describe_does_across_nodes():
    both = merge([samples_of("node-0", METRICS), samples_of("node-1", OTHER_NODE)])
    assert both["topic/orders/in"] == 110
    assert both["node/node-0/in_messages"] == 120 and both["node/node-1/in_messages"] == 5
    # partition 0: 70 - 50; partition 3 (no commit, first 0): 30; partition 1 on the other
    # node (no commit, first 4): 10 - 4
    assert both["group/billing/lag"] == 20 + 30 + 6


def test_rates_of_counters_never_go_negative_and_the_ring_is_bounded():
    assert list(rates([(0, 0), (10, 100), (20, 50), (30, 150)])) == [
        (10, 10.0),
        (20, 0.0),  # a restarted node's counter dropped: no traffic, not minus five
        (30, 10.0),
    ]
    assert latest_rate([(0, 0)]) is None and latest_rate([(0, 0), (2, 10)]) == 5
    h = History(points=3)
    for t in range(5):
        h.add(float(t), {"x": float(t * t)})
    assert h.values("x") == [(2.0, 4.0), (3.0, 9.0), (4.0, 16.0)]
    assert h.rate("x") == [(3.0, 5.0), (4.0, 7.0)] and h.last("x") == 16
    assert h.names("x") == ["x"] and h.values("nothing") == []


def test_charts_are_svg_of_numbers_and_escaped_text():
    empty = chart("<b>lag</b>", [])
    assert "no data yet" in empty.svg and "<b>" not in empty.svg and "&lt;b&gt;" in empty.svg
    drawn = chart("in", [(0.0, 0.0), (60.0, 1500.0), (120.0, 500.0)], "B")
    assert "<polyline" in drawn.svg and "style=" not in drawn.svg and "<script" not in drawn.svg
    assert drawn.latest == "500B" and drawn.peak == "1.5kB"
    flat = chart("idle", [(0.0, 0.0), (10.0, 0.0)])
    assert flat.peak == "0" and "max 0" in flat.svg
    assert human(2_500_000) == "2.5M" and human(3) == "3" and human(0.25) == "0.2"


def test_the_time_search_cursor_is_checked():
    assert parse_cursor("", [0, 1]) is None
    assert parse_cursor("0:10,1:4", [0, 1]) == {0: 10, 1: 4}
    for bad in ("x", "0:", "0:-1", "7:1", "0:1,a:b"):
        with pytest.raises(InvalidArgument):
            parse_cursor(bad, [0, 1])
