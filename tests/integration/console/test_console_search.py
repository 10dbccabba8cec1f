"""What the separate console finds equals what the project's own tools find: a key search
equals ``msgstore query``; a time range gives exactly the messages stored in it; paging
(cursor links) walks a whole topic newest first with no message skipped or repeated; and
the charts draw the metrics the console reads from the nodes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html import unescape

from waiting import wait_until

from storage_node.client import Client
from storage_node.console.charts import human
from tests.integration.console.conftest import ORDERS, get, rows, text_of

CLI = [sys.executable, "-m", "storage_node.cli"]


def every_message(endpoint: str) -> list[dict]:
    with Client(endpoint) as client:
        info = client.describe_topic(ORDERS)
        out = []
        for p in info["partition_offsets"]:
            out += list(client.read_all(ORDERS, p["partition"], p["first_offset"]))
    return out


def newest_first(messages: list[dict]) -> list[str]:
    order = sorted(
        messages, key=lambda m: (m["store_timestamp"], m["partition"], m["offset"]), reverse=True
    )
    return [m["msg_id"] for m in order]


def older_link(html: str) -> str | None:
    m = re.search(r'href="([^"]+)" rel="next" id="older"', html)
    return unescape(m.group(1)) if m else None


def walk(base: str, first: str) -> tuple[list[str], int]:
    """Every message ID over the pages from ``first`` following the Older links."""
    ids: list[str] = []
    pages = 0
    link: str | None = first
    while link:
        page = get(base, link)
        assert page.status_code == 200, page.text[:300]
        ids += [r[5] for r in rows(page.text)]
        pages += 1
        link = older_link(page.text)
        assert pages < 100
    return ids, pages


def test_a_key_search_equals_msgstore_query(sample):
    cli = subprocess.run(
        [*CLI, "query", ORDERS, "order-42", "--endpoint", sample.endpoint],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    expected = [json.loads(line)["msg_id"] for line in cli.stdout.splitlines()]
    page = get(sample.console, f"/search?topic={ORDERS}&key=order-42")
    assert [r[5] for r in rows(page.text)] == expected and len(expected) == 4


def test_key_search_paging_walks_past_the_cap(sample):
    ids, pages = walk(sample.console, f"/search?topic={ORDERS}&key=order-42&limit=1")
    assert ids == [m["msg_id"] for m in reversed(sample.order42)] and pages == 4


def test_a_time_range_gives_exactly_the_messages_stored_in_it(sample):
    messages = every_message(sample.endpoint)
    times = sorted({m["store_timestamp"] for m in messages})
    begin, end = times[len(times) // 4], times[3 * len(times) // 4]
    inside = [m for m in messages if begin <= m["store_timestamp"] <= end]
    page = get(sample.console, f"/search?topic={ORDERS}&from={begin}&until={end}&limit=500")
    assert page.status_code == 200
    assert [r[5] for r in rows(page.text)] == newest_first(inside)
    assert "more exist" not in text_of(page.text, "summary")
    one = get(sample.console, f"/search?topic={ORDERS}&from={begin}&until={end}&partition=1")
    assert [r[5] for r in rows(one.text)] == newest_first(
        [m for m in inside if m["partition"] == 1]
    )


def test_time_paging_walks_the_whole_topic_newest_first(sample):
    messages = every_message(sample.endpoint)
    ids, pages = walk(sample.console, f"/search?topic={ORDERS}&from=0&limit=7")
    assert ids == newest_first(messages)
    assert pages == -(-len(messages) // 7)
    first = get(sample.console, f"/search?topic={ORDERS}&from=0&limit=7")
    assert text_of(first.text, "summary").startswith("7 shown, more exist")


def test_bad_cursors_and_filters_are_refused(sample):
    for path, words in (
        (f"/search?topic={ORDERS}&from=0&before=x", "before must be"),
        (f"/search?topic={ORDERS}&from=0&before=99:1", "before must be"),
        (f"/search?topic={ORDERS}&key=order-42&before=abc", "before must be"),
        (f"/search?topic={ORDERS}&from=0&tag=paid", "a tag filter needs a key"),
    ):
        page = get(sample.console, path)
        assert page.status_code == 400, path
        assert words in text_of(page.text, "error-message"), path


def test_charts_draw_what_the_nodes_metrics_say(sample):
    with Client(sample.endpoint) as client:
        client.produce(ORDERS, [{"key": f"load-{n}", "value": "x" * 100} for n in range(200)])
        spans = client.describe_topic(ORDERS)["partition_offsets"]
        busy = max(spans, key=lambda p: p["next_offset"])
        client.commit_offset("charted", ORDERS, busy["partition"], busy["first_offset"])

    def drawn(path: str, title: str) -> str | None:
        page = get(sample.console, path).text
        m = re.search(
            rf'<svg[^>]*aria-label="{re.escape(title)}".*?</svg>\s*<figcaption>[^<]*', page, re.S
        )
        return m.group(0) if m and "<polyline" in m.group(0) else None

    wait_until(lambda: drawn("/", "node-0: messages in per second"), 60, "a node chart", 0.5)

    def topic_rate() -> str | None:
        chart = drawn(f"/topics/{ORDERS}", f"{ORDERS}: messages in per second")
        return chart if chart and "peak 0" not in chart else None

    # the 200 messages show as a rate above zero once a scrape after them is in
    wait_until(topic_rate, 60, "the topic's in-rate above zero", 0.5)
    total = int(text_of(get(sample.console, "/groups/charted").text, "total-lag").split()[2])
    assert total > 0
    # the chart's latest point is the lag the page computes (as group describe does)
    wait_until(
        lambda: (drawn("/groups/charted", "lag of charted (messages), last hour") or "").endswith(
            f"now {human(total)}, peak {human(total)}"
        ),
        60,
        f"the lag chart at {total}",
        0.5,
    )
