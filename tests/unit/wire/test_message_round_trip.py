"""A stored message written as JSON (``message_to_json``) reads back whole: on a node as the
store's Message (a peer's lookup answer) and on the console as its own, through the one
reader of the shared fields (``message_fields``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from storage_node.console.views import message_of
from storage_node.server.lookups import message_from_json
from storage_node.store import Message
from storage_node.wire.message_json import message_fields, message_to_json

text = st.text(max_size=12)
headers = st.lists(st.tuples(text, st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
messages = st.builds(
    Message,
    topic=st.from_regex(r"[a-z]{1,8}", fullmatch=True),
    partition=st.integers(0, 1023),
    offset=st.integers(0, 2**40),
    key=st.one_of(st.none(), st.text(min_size=1, max_size=12)),
    tag=st.one_of(st.none(), text),
    msg_id=st.from_regex(r"app-7f000001-[0-9]{1,6}-[0-9]{1,4}", fullmatch=True),
    timestamp=st.integers(0, 2**42),
    store_timestamp=st.integers(0, 2**42),
    value=st.one_of(st.binary(max_size=16), text.map(str.encode)),
    headers=headers.map(tuple),
)


@settings(max_examples=200, deadline=None)
@given(messages)
def test_a_peer_answer_reads_back_as_the_stored_message(m: Message) -> None:
    assert message_from_json(message_to_json(m)) == m


@settings(max_examples=200, deadline=None)
@given(messages)
def test_the_console_reads_the_same_fields_and_its_text_headers(m: Message) -> None:
    doc = message_to_json(m)
    shown = message_of(doc)
    fields = message_fields(doc)
    assert fields["value"] == m.value
    assert {name: getattr(shown, name) for name in fields} == fields
    if "headers" in doc:  # every value text: shown as given, a null as ""
        assert shown.headers == [(k, "" if v is None else v.decode()) for k, v in m.headers]


def test_a_binary_value_reads_back_from_base64() -> None:
    doc = {
        "topic": "t",
        "partition": 0,
        "offset": 3,
        "msg_id": "app-7f000001-1-1",
        "timestamp": 1,
        "store_timestamp": 2,
        "value_base64": "AP8=",
    }
    fields = message_fields(doc)
    assert fields["value"] == b"\x00\xff" and fields["key"] is None and fields["tag"] is None
