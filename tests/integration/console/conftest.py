"""A real `msgstore local` cluster holding sample orders, and helpers that read the console's
pages over HTTP like a browser that runs no script."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import pytest
import requests

from storage_node.cli.local import LocalCluster
from storage_node.client import Client

TOKEN = "console-test-token"
ORDERS = "orders"
XSS_KEY = "<script>document.title='pwned'</script>"
BINARY_BODY = b"\x00\xff\xfe<img src=x onerror=alert(1)>\x80"


@dataclass
class Sample:
    """What the sample data holds: results of the produce calls, by name."""

    cluster: LocalCluster
    endpoint: str
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
    try:
        endpoint = c.addresses[0]
        with Client(c.addresses) as client:
            order42, xss, binary = produce_sample(client)
        yield Sample(c, endpoint, order42, xss, binary)
    finally:
        c.down()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A one-node cluster that requires TOKEN; its address."""
    c = LocalCluster(tmp_path_factory.mktemp("console-token"))
    c.up(nodes=1, env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0", "MSGSTORE_TOKEN": TOKEN})
    try:
        with Client(c.addresses, token=TOKEN) as client:
            client.create_topic(ORDERS, partitions=2)
            client.produce(ORDERS, [{"key": "order-42", "value": '{"order": 42}'}])
        yield c.addresses[0]
    finally:
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
