"""Admin mode (``msgstore console --admin``): a group's offsets are reset with the
session's own token, so the cluster decides. A read-only session is refused (403, nothing
changed), a full one moves the offsets, and a POST without the session's CSRF token or
from another site is refused before the cluster is asked."""

from __future__ import annotations

import re

from storage_node.client import Client
from tests.integration.console.conftest import ORDERS, READ_TOKEN, TOKEN
from tests.integration.console.test_console_auth import logged_in


def committed(endpoint: str) -> dict[int, int]:
    with Client(endpoint, token=TOKEN) as client:
        return client.committed_offsets("billing", ORDERS).get(ORDERS, {})


def reset_form(s, base: str) -> tuple[str, str]:
    page = s.get(f"{base}/groups/billing", timeout=30)
    assert page.status_code == 200
    form = re.search(r'<form method="post" action="([^"]+)"[^>]*id="reset-form"', page.text)
    csrf = re.search(r'id="reset-form">.*?name="csrf" value="([0-9a-f]+)"', page.text, re.S)
    assert form and csrf, "no reset form in admin mode"
    return form.group(1), csrf.group(1)


def test_a_read_only_session_cannot_reset_a_group(secured):
    before = committed(secured.endpoint)
    s = logged_in(secured.console, READ_TOKEN)
    action, csrf = reset_form(s, secured.console)
    answer = s.post(
        secured.console + action,
        data={"csrf": csrf, "topic": ORDERS, "partition": "", "to": "latest"},
        allow_redirects=False,
    )
    assert answer.status_code == 403, answer.text[:300]
    assert 'id="error-message"' in answer.text  # the cluster's refusal, shown as the page
    assert committed(secured.endpoint) == before


def test_cross_site_or_tokenless_reset_posts_are_refused(secured):
    before = committed(secured.endpoint)
    s = logged_in(secured.console)
    action, csrf = reset_form(s, secured.console)
    data = {"topic": ORDERS, "partition": "", "to": "latest"}
    no_csrf = s.post(secured.console + action, data=data, allow_redirects=False)
    cross = s.post(
        secured.console + action,
        data={**data, "csrf": csrf},
        headers={"Origin": "http://evil.example"},
        allow_redirects=False,
    )
    other_session = logged_in(secured.console).post(
        secured.console + action, data={**data, "csrf": csrf}, allow_redirects=False
    )
    for refused in (no_csrf, cross, other_session):
        assert refused.status_code == 403, refused.text[:300]
    assert committed(secured.endpoint) == before


def test_an_admin_session_resets_a_group(secured):
    s = logged_in(secured.console)
    action, csrf = reset_form(s, secured.console)
    with Client(secured.endpoint, token=TOKEN) as client:
        ends = {
            p["partition"]: p["next_offset"]
            for p in client.describe_topic(ORDERS)["partition_offsets"]
        }
    answer = s.post(
        secured.console + action,
        data={"csrf": csrf, "topic": ORDERS, "partition": "", "to": "latest"},
        allow_redirects=False,
    )
    assert answer.status_code == 303, answer.text[:300]
    assert committed(secured.endpoint) == ends
    page = s.get(secured.console + answer.headers["Location"], timeout=30)
    assert "The offsets were reset." in page.text
    assert re.findall(r'<td class="lag">(\d+)</td>', page.text) == ["0"] * len(ends)
    bad = s.post(
        secured.console + action,
        data={"csrf": csrf, "topic": ORDERS, "partition": "7", "to": "earliest"},
        allow_redirects=False,
    )
    assert bad.status_code == 400 and committed(secured.endpoint) == ends
