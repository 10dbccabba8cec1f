"""A real `msgstore local` cluster holding sample orders with a real `msgstore console`
process in front of it, and helpers that read the console's pages over HTTP like a browser
that runs no script."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import pytest
import requests

from storage_node.cli.local import LocalCluster
from storage_node.cli.local_console import LocalConsole
from storage_node.client import Client

TOKEN = "console-test-token"
READ_TOKEN = "console-read-token"  # the nodes' read-only token: reads, never writes
ORDERS = "orders"
XSS_KEY = "<script>document.title='pwned'</script>"
BINARY_BODY = b"\x00\xff\xfe<img src=x onerror=alert(1)>\x80"


@dataclass
class Sample:
    """What the sample data holds: results of the produce calls, by name."""

    cluster: LocalCluster
    endpoint: str  # a node (for the client and the CLI)
    console: str  # the console process
    order42: list[dict]  # the produce results of order-42's messages, oldest first
    xss: dict
    binary: dict


def produce_sample(client: Client) -> tuple[list[dict], dict, dict]:
    client.create_topic(ORDERS, partitions=6)
    order42 = []
    for step in ("created", "paid", "packed", "shipped"):
        doc = f'{{"order": 42, "step": "{step}"}}'
        order42 += client.produce(ORDERS, [{"key": "order-42", "value": doc, "tag": step}])
    others = [{"key": f"order-{n}", "value": f'{{"order": {n}}}'} for n in range(100, 160)]
    client.produce(ORDERS, others)
    xss = client.produce(
        ORDERS,
        [{"key": XSS_KEY, "tag": "<img src=x onerror=alert(1)>", "value": "<script>x=1</script>"}],
    )[0]
    binary = client.produce(ORDERS, [{"key": "blob-1", "value": BINARY_BODY}])[0]
    return order42, xss, binary


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sample]:
    c = LocalCluster(tmp_path_factory.mktemp("console"))
    c.up(nodes=3, env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0"})
    console = LocalConsole(c.dir)
    try:
        endpoint = c.addresses[0]
        with Client(c.addresses) as client:
            order42, xss, binary = produce_sample(client)
        url = console.start(c.addresses, scrape_seconds=0.5).url
        yield Sample(c, endpoint, url, order42, xss, binary)
    finally:
        stopped = console.stop()
        c.down()
    assert stopped, "the console process was not found to stop"


@dataclass
class Secured:
    """A one-node cluster that requires TOKEN (READ_TOKEN reads only), and an admin-mode
    console in front of it."""

    endpoint: str
    console: str


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    c = LocalCluster(tmp_path_factory.mktemp("console-token"))
    env = {
        "MSGSTORE_LIFECYCLE_INTERVAL_S": "0",
        "MSGSTORE_TOKEN": TOKEN,
        "MSGSTORE_READ_TOKEN": READ_TOKEN,
    }
    c.up(nodes=1, env=env)
    console = LocalConsole(c.dir)
    try:
        with Client(c.addresses, token=TOKEN) as client:
            client.create_topic(ORDERS, partitions=2)
            client.produce(ORDERS, [{"key": "order-42", "value": '{"order": 42}'}] * 3)
            client.commit_offset("billing", ORDERS, 0, 0)
        url = console.start(c.addresses, token=TOKEN, admin=True, scrape_seconds=0.5).url
        yield Secured(c.addresses[0], url)
    finally:
        console.stop()
        c.down()


def text_of(html: str, element_id: str) -> str:
    """The text of the element with this id (tags dropped, entities decoded)."""
    m = re.search(rf'id="{element_id}"[^>]*>(.*?)</', html, re.S)
    assert m, f"no element {element_id!r} in the page"
    return " ".join(unescape(m.group(1)).split())


def rows(html: str, css_class: str = "message-row") -> list[list[str]]:
    """The cells (as text) of every table row with this class."""
    out = []
    for body in re.findall(rf'<tr class="{css_class}">(.*?)</tr>', html, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)
        out.append([" ".join(unescape(re.sub(r"<[^>]+>", "", c)).split()) for c in cells])
    return out


def get(base: str, path: str, **kw) -> requests.Response:
    return requests.get(base + path, timeout=30, allow_redirects=False, **kw)


SCREENSHOTS = Path(__file__).resolve().parents[3] / "docs" / "console"
