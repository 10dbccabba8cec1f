"""The console's value formatting: time filters read back, message IDs decoded, bodies in
their three views (capped, binary-safe), and the login's redirect and origin checks."""

from __future__ import annotations

import pytest

from storage_node.console.sessions import Sessions, safe_next
from storage_node.console.views import (
    BODY_CAP,
    body_view,
    decode_msg_id,
    default_view,
    headers_of,
    parse_time,
)
from storage_node.errors import InvalidArgument


def test_time_filters_read_iso_and_milliseconds_as_utc():
    assert parse_time("from", "1795722147046") == 1795722147046
    assert parse_time("from", "2026-11-26T19:00:00Z") == 1795719600000
    assert parse_time("from", "2026-11-26T19:00") == 1795719600000  # datetime-local: UTC
    assert parse_time("from", "2026-11-26T20:00:00+01:00") == 1795719600000
    assert parse_time("from", "  ") is None
    for bad in ("yesterday", "2026-13-01", "1e9"):
        with pytest.raises(InvalidArgument, match="from must be a date"):
            parse_time("from", bad)


def test_a_message_id_is_decoded_into_what_it_encodes():
    parts = decode_msg_id("orders-7f000003-498811-17")
    assert parts == {
        "app": "orders",
        "producer IP": "127.0.0.3",
        "hour": "2026-11-26 19:00 UTC",
        "sequence": "17",
    }
    with pytest.raises(InvalidArgument, match="malformed message ID"):
        decode_msg_id("orders-zz-1-1")


def test_body_views_are_capped_and_binary_safe():
    assert body_view(b'{"a": [1, 2]}', "json").text == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    not_json = body_view(b"plain", "json")
    assert not_json.view == "text" and "not JSON" in not_json.note
    binary = b"\x00\xff<b>"
    assert body_view(binary, "hex").text == "00000000  00 ff 3c 62 3e" + " " * 33 + "  ..<b>"
    text = body_view(binary, "text")
    assert text.text == "\x00\ufffd<b>" and "not valid UTF-8" in text.note
    big = b"x" * (BODY_CAP + 10)
    shown = body_view(big, "text")
    assert shown.cut and len(shown.text) == BODY_CAP and shown.size == BODY_CAP + 10
    assert default_view(b'{"a": 1}') == "json"
    assert default_view(binary) == "hex"
    assert default_view("héllo".encode()) == "text"


def test_login_redirects_stay_on_the_console_and_csrf_is_bound_to_the_process():
    assert safe_next("/search?topic=t") == "/search?topic=t"
    for bad in (None, "", "//evil.example", "https://evil.example", "/\\evil", "search"):
        assert safe_next(bad) == "/"
    one, other = Sessions(), Sessions()
    assert one.login_csrf("b") == one.login_csrf("b")
    assert one.login_csrf("b") != one.login_csrf("c")  # bound to the browser's cookie
    assert one.login_csrf("b") != other.login_csrf("b")  # each console start signs anew


def test_headers_are_shown_as_text_and_binary_ones_as_hex():
    assert headers_of({}) == [] and headers_of({"headers": []}) == []
    assert headers_of({"headers": [["trace", "abc"], ["dup", None], ["x", "<script>"]]}) == [
        ("trace", "abc"),
        ("dup", ""),
        ("x", "<script>"),
    ]
    # a value that is not UTF-8: the node answers every value in base64
    assert headers_of({"headers_base64": [["bin", "AP8="], ["t", "b2s="]]}) == [
        ("bin", "hex: 00 ff"),
        ("t", "ok"),
    ]
    assert headers_of({"headers": "not a list"}) == []
