"""The console's pages over HTTP against a real 3-node local cluster: every documented URL
form, what each page says, escaping, bad input (a clear error page, nothing changed), and a
partial answer with a node stopped."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from urllib.parse import quote

import requests

from storage_node.client import Client
from storage_node.console.charts import human
from storage_node.console.views import fmt_ms
from tests.integration.console.conftest import BINARY_BODY, ORDERS, XSS_KEY, get, rows, text_of

CLI = [sys.executable, "-m", "storage_node.cli"]


def test_search_by_key_is_what_the_client_finds_newest_first(sample):
    page = get(sample.console, f"/search?topic={ORDERS}&key=order-42")
    assert page.status_code == 200
    found = rows(page.text)
    with Client(sample.endpoint) as client:
        expected = client.lookup_key(ORDERS, "order-42")["messages"]
    assert [r[5] for r in found] == [m["msg_id"] for m in expected]
    assert [r[5] for r in found] == [m["msg_id"] for m in reversed(sample.order42)]
    assert [r[4] for r in found] == ["shipped", "packed", "paid", "created"]
    summary = text_of(page.text, "summary")
    assert summary.startswith("4 shown ·") and "newest first" in summary and " ms" in summary
    assert "more exist" not in summary


def test_search_says_when_it_stopped_at_its_cap_and_when_it_found_nothing(sample):
    capped = get(sample.console, f"/search?topic={ORDERS}&key=order-42&limit=2")
    assert [r[4] for r in rows(capped.text)] == ["shipped", "packed"]
    assert text_of(capped.text, "summary").startswith("2 shown, more exist")
    exact = get(sample.console, f"/search?topic={ORDERS}&key=order-42&limit=4")
    assert "more exist" not in text_of(exact.text, "summary")
    none = get(sample.console, f"/search?topic={ORDERS}&key=order-999")
    assert none.status_code == 200 and rows(none.text) == []
    assert text_of(none.text, "summary").startswith("none found")


def test_search_filters_by_tag_partition_and_time(sample):
    tagged = get(sample.console, f"/search?topic={ORDERS}&key=order-42&tag=paid")
    assert [r[4] for r in rows(tagged.text)] == ["paid"]
    p = sample.order42[0]["partition"]
    same = get(sample.console, f"/search?topic={ORDERS}&key=order-42&partition={p}")
    assert len(rows(same.text)) == 4
    other = get(sample.console, f"/search?topic={ORDERS}&key=order-42&partition={(p + 1) % 6}")
    assert rows(other.text) == []
    with Client(sample.endpoint) as client:
        paid = client.get_message(sample.order42[1]["msg_id"])
    stored = paid["store_timestamp"]
    window = get(
        sample.console,
        f"/search?topic={ORDERS}&key=order-42&from={stored}&until={stored}",
    )
    assert "paid" in [r[4] for r in rows(window.text)]
    assert {r[0] for r in rows(window.text)} == {fmt_ms(stored)}  # only that millisecond
    future = get(sample.console, f"/search?topic={ORDERS}&key=order-42&from=2999-01-01T00:00:00Z")
    assert rows(future.text) == []


def test_search_by_message_id_opens_the_message_page(sample):
    msg_id = sample.order42[1]["msg_id"]
    found = get(sample.console, f"/search?msg_id={msg_id}")
    assert found.status_code == 303 and found.headers["Location"] == f"/messages/{msg_id}"
    page = get(sample.console, found.headers["Location"])
    assert page.status_code == 200
    assert text_of(page.text, "msg-id") == msg_id
    assert text_of(page.text, "key") == "order-42" and text_of(page.text, "tag") == "paid"
    assert text_of(page.text, "offset") == str(sample.order42[1]["offset"])
    app, iphex, hour, seq = msg_id.rsplit("-", 3)
    assert f"<td>{app}</td>" in page.text and f"<td>{seq}</td>" in page.text
    assert "<td>127.0.0." in page.text  # the producer IP the ID encodes (a loopback node)
    # the body as pretty JSON by default, and the key's timeline, newest first
    assert text_of(page.text, "view-current") == "json"
    assert "&#34;step&#34;: &#34;paid&#34;" in page.text
    assert [r[4] for r in rows(page.text)] == ["shipped", "packed", "paid", "created"]


def test_message_body_views_and_the_raw_download_are_binary_safe(sample):
    base = f"/messages/{sample.binary['msg_id']}"
    page = get(sample.console, base)
    assert text_of(page.text, "view-current") == "hex"  # not UTF-8: hex by default
    assert "00 ff fe 3c 69 6d 67" in page.text
    text = get(sample.console, base + "?view=text")
    assert "not valid UTF-8" in text.text and "&lt;img src=x onerror=alert(1)&gt;" in text.text
    assert "<img src=x" not in text.text
    raw = get(sample.console, base + "/raw")
    assert raw.status_code == 200 and raw.content == BINARY_BODY
    assert raw.headers["Content-Type"] == "application/octet-stream"
    assert raw.headers["Content-Disposition"].startswith("attachment;")


def test_search_by_partition_and_offset_and_the_neighbour_links(sample):
    first = sample.order42[0]
    p = first["partition"]
    page = get(sample.console, f"/search?topic={ORDERS}&partition={p}&offset={first['offset']}")
    found = rows(page.text)
    assert found[0][2] == str(first["offset"]) and found[0][5] == first["msg_id"]
    assert [int(r[2]) for r in found] == sorted(int(r[2]) for r in found)
    message = get(sample.console, f"/messages/{sample.order42[1]['msg_id']}")
    nxt = re.search(r'id="next" href="([^"]+)"|href="([^"]+)" id="next"', message.text)
    assert nxt, "no link to the next offset"
    link = (nxt.group(1) or nxt.group(2)).replace("&amp;", "&")
    assert f"offset={sample.order42[1]['offset'] + 1}" in link
    one = get(sample.console, link)
    assert [r[2] for r in rows(one.text)] == [str(sample.order42[1]["offset"] + 1)]


def test_a_key_like_script_is_shown_as_text(sample):
    page = get(sample.console, f"/search?topic={ORDERS}&key={quote(XSS_KEY)}")
    assert [r[3] for r in rows(page.text)] == [XSS_KEY]
    assert XSS_KEY not in page.text and "<img src=x" not in page.text
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in page.text
    message = get(sample.console, f"/messages/{sample.xss['msg_id']}")
    assert "<script>" not in message.text and "&lt;script&gt;x=1&lt;/script&gt;" in message.text
    assert "script-src 'self'" in message.headers["Content-Security-Policy"]


def test_bad_input_gets_a_clear_error_page_and_changes_nothing(sample):
    with Client(sample.endpoint) as client:
        before = sorted(t["name"] for t in client.list_topics())
    cases = [
        (f"/search?topic={ORDERS}&partition=0&offset=-1", 400, "offset must be between"),
        (f"/search?topic={ORDERS}&partition=0&offset=abc", 400, "offset must be an integer"),
        (f"/search?topic={ORDERS}&partition=99&offset=0", 400, "partition must be between"),
        (f"/search?topic={ORDERS}&offset=0", 400, "needs a partition"),
        (f"/search?topic={ORDERS}&key=k&from=yesterday", 400, "from must be a date"),
        ("/search?topic=no-such-topic&key=k", 404, "unknown topic"),
        ("/search?topic=bad%20name&key=k", 400, "topic"),
        ("/search?msg_id=not-an-id", 400, "malformed message ID"),
        ("/messages/not-an-id", 400, "malformed message ID"),
        ("/messages/app-7f000001-1-1", 404, "no message with ID"),
        (f"/messages/{ORDERS}-7f000001-1-1?view=exec", 404, "no message"),
        (f"/messages/{sample.order42[0]['msg_id']}?view=exec", 400, "view must be one of"),
        ("/topics/no-such-topic", 404, "unknown topic"),
        ("/groups/no-such-group", 404, "no committed offsets"),
        ("/groups/bad%20name", 400, "invalid consumer group name"),
        ("/search?key=k", 400, "search needs a topic"),
    ]
    for path, status, words in cases:
        page = get(sample.console, path)
        assert page.status_code == status, (path, page.status_code, page.text[:300])
        assert page.headers["Content-Type"].startswith("text/html"), path
        assert words in text_of(page.text, "error-message"), (path, page.text[:500])
    with Client(sample.endpoint) as client:
        assert sorted(t["name"] for t in client.list_topics()) == before


def test_topics_and_topic_page(sample):
    topics = get(sample.console, "/topics")
    assert f'href="/topics/{ORDERS}"' in topics.text
    page = get(sample.console, f"/topics/{ORDERS}")
    assert page.status_code == 200
    with Client(sample.endpoint) as client:
        doc = client.describe_topic(ORDERS)
    shown = re.findall(
        r"<tr><td>(\d+)</td><td>(node-\d)</td>.*?<td>(\d+)</td>\s*<td>(\d+)</td>\s*<td>(\d+)</td>",
        page.text,
        re.S,
    )
    assert [(int(p), o, int(f), int(n), int(c)) for p, o, f, n, c in shown] == [
        (
            i["partition"],
            i["owner"],
            i["first_offset"],
            i["next_offset"],
            i["next_offset"] - i["first_offset"],
        )
        for i in doc["partition_offsets"]
    ]
    assert sum(int(c) for *_, c in shown) == 4 + 60 + 2
    # each partition's stored bytes, as the node serving it counts them (asked through the
    # node the console asked: the description gathers them from the other nodes)
    sizes = re.findall(r'<td class="size"><data value="(\d+)">([^<]+)</data>', page.text)
    assert [int(v) for v, _ in sizes] == [i["stored_bytes"] for i in doc["partition_offsets"]]
    assert [text for _, text in sizes] == [human(int(v), "B") for v, _ in sizes]
    for info, (*_, count) in zip(doc["partition_offsets"], shown, strict=True):
        served = requests.get(
            f"{info['owner_address']}/v1/topics/{ORDERS}", params={"scope": "local"}, timeout=30
        ).json()["partition_offsets"][info["partition"]]
        assert info["stored_bytes"] == served["stored_bytes"]
        assert (info["stored_bytes"] > 0) == (int(count) > 0)


def test_group_lag_equals_group_describe_sortable_and_lagging_only(sample):
    with Client(sample.endpoint) as client:
        doc = client.describe_topic(ORDERS)
        busy = [i for i in doc["partition_offsets"] if i["next_offset"] > 1]
        client.commit_offset("billing", ORDERS, busy[0]["partition"], busy[0]["next_offset"])
        client.commit_offset("billing", ORDERS, busy[1]["partition"], 1)
    cli = subprocess.run(
        [*CLI, "group", "describe", "billing", "--json", "--endpoint", sample.endpoint],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    expected = {
        (r["topic"], r["partition"]): r["lag"] for r in json.loads(cli.stdout)["partitions"]
    }
    page = get(sample.console, "/groups/billing")
    assert page.status_code == 200
    shown = rows(page.text, "lag-row")
    assert {(r[0], int(r[1])): int(r[4]) for r in shown} == expected
    lags = [int(r[4]) for r in shown]
    assert lags == sorted(lags, reverse=True)  # by lag, largest first
    assert text_of(page.text, "total-lag").startswith(f"Total lag: {sum(expected.values())}")
    lagging = rows(get(sample.console, "/groups/billing?lagging=1").text, "lag-row")
    assert lagging and all(int(r[4]) > 0 for r in lagging)
    assert len(lagging) == sum(1 for v in expected.values() if v > 0)
    by_partition = rows(
        get(sample.console, "/groups/billing?sort=partition&order=asc").text, "lag-row"
    )
    assert [int(r[1]) for r in by_partition] == sorted(int(r[1]) for r in by_partition)
    assert "billing" in get(sample.console, "/groups").text


def test_cluster_page_lists_every_node_with_health(sample):
    page = get(sample.console, "/")
    assert page.status_code == 200
    nodes = re.findall(
        r"<td>(node-\d)(?: \(this node\))?</td><td>(http://[^<]+)</td>\s*<td class=\"health\">([^<]+)</td>",
        page.text,
    )
    assert sorted(nodes) == sorted(
        (f"node-{i}", a, "ready") for i, a in enumerate(sample.cluster.addresses)
    )
    assert "each node serves its own log" in page.text


def test_a_stopped_node_makes_a_partial_answer_that_names_it(sample):
    """Run last in this module: it stops a node and starts it again."""
    with Client(sample.endpoint) as client:
        owners = client.describe_topic(ORDERS)["owners"]
    holder = owners[sample.order42[0]["partition"]]
    sample.cluster.stop(holder)
    try:
        page = get(sample.console, f"/search?topic={ORDERS}&key=order-42")
        assert page.status_code == 200
        assert holder in text_of(page.text, "unreachable")
        assert text_of(page.text, "summary").startswith("none found")
        cluster = get(sample.console, "/")
        health = dict(
            re.findall(
                r"<td>(node-\d)(?: \(this node\))?</td><td>[^<]+</td>\s*<td class=\"health\">([^<]+)</td>",
                cluster.text,
            )
        )
        assert health[holder] != "ready" and "unreachable" in health[holder]
        offset = get(
            sample.console,
            f"/search?topic={ORDERS}&partition={sample.order42[0]['partition']}&offset=0",
        )
        assert holder in text_of(offset.text, "unreachable")
    finally:
        sample.cluster.restart(holder)
    again = get(sample.console, f"/search?topic={ORDERS}&key=order-42")
    assert len(rows(again.text)) == 4


def test_a_messages_headers_are_shown_text_as_text_and_binary_as_hex(sample):
    """Kafka record headers as the node stores them: a UTF-8 value as text (escaped), any
    other as hex, a null value empty, in order with repeated names kept."""
    headers = [("trace", b"abc-1"), ("bin", b"\x00\xff"), ("dup", None), ("dup", b"<b>x</b>")]
    with Client(sample.endpoint) as client:
        (stored,) = client.produce(ORDERS, [{"key": "headers-1", "value": "v", "headers": headers}])
    page = get(sample.console, f"/messages/{stored['msg_id']}")
    assert page.status_code == 200
    assert rows(page.text, "header-row") == [["abc-1"], ["hex: 00 ff"], [""], ["<b>x</b>"]]
    names = re.findall(r'<tr class="header-row"><th scope="row">(.*?)</th>', page.text)
    assert names == ["trace", "bin", "dup", "dup"]
    assert "<b>x</b>" not in page.text  # escaped
