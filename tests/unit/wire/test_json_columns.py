"""The JSON body parsed column by column gives exactly what the request model gives, and
what the column check does not take is refused by the model."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_node.errors import InvalidBatch
from storage_node.server.api_models import Batch, parse
from storage_node.server.json_batch import parse_json_batch
from storage_node.store import AppendColumns
from storage_node.wire.message_json import packed_columns, results_json

text = st.text(max_size=12)
message = st.fixed_dictionaries(
    {"value": text},
    optional={
        "key": st.one_of(st.none(), st.text(min_size=1, max_size=12)),  # "" is refused
        "tag": st.one_of(st.none(), text),
        "timestamp": st.one_of(st.none(), st.integers(0, 2**40)),
        "partition": st.one_of(st.none(), st.integers(0, 5)),
    },
)


def as_lists(batch) -> dict:  # noqa: ANN001
    return {
        "values": batch.values.to_list(),
        "keys": batch.keys.to_list(),
        "tags": batch.tags.to_list(),
        "timestamps": None if batch.timestamps is None else batch.timestamps.tolist(),
        "partitions": None if batch.partitions is None else batch.partitions.tolist(),
    }


@settings(max_examples=150, deadline=None)
@given(st.lists(message, min_size=1, max_size=20))
def test_columns_match_the_per_message_parse(messages: list[dict]) -> None:
    body = {"messages": messages}
    batch, _pid, _seq = parse_json_batch(body, 1000)
    items = [m.model_dump() | {"value": m.value_bytes()} for m in parse(Batch, body).messages]
    got = as_lists(batch)
    assert got["values"] == [m["value"] for m in items]
    assert got["keys"] == [None if m["key"] is None else m["key"].encode() for m in items]
    assert got["tags"] == [None if m["tag"] is None else m["tag"].encode() for m in items]
    for name, field in (("timestamps", "timestamp"), ("partitions", "partition")):
        want = [-1 if m[field] is None else m[field] for m in items]
        assert (got[name] or [-1] * len(items)) == want
    assert as_lists(parse(Batch, body).packed()) == got


@pytest.mark.parametrize(
    "messages",
    [
        [{"value": "a"}, {"value": 5}],
        [{"value": "a"}, {"key": "k"}],
        [{"value": "a", "value_base64": "YQ=="}],
        [{"value": "a", "colour": "red"}],
        [{"value": "a", "key": 7}],
        [{"value": "a", "key": "k"}, {"value": "b", "key": ""}],
        [{"value": "a", "timestamp": -1}],
        [{"value": "a", "timestamp": True}],
        [{"value": "a", "partition": "1"}],
        [{"value": "a", "msg_id": ["x"]}],
        ["not an object"],
    ],
)
def test_both_refuse_the_same_bodies(messages: list) -> None:
    assert packed_columns(messages) is None  # the column check leaves them to the model
    with pytest.raises(InvalidBatch):
        parse_json_batch({"messages": messages}, 1000)
    with pytest.raises(InvalidBatch):
        parse(Batch, {"messages": messages}, InvalidBatch)


def test_base64_and_non_ascii_values_take_the_exact_path() -> None:
    body = {"messages": [{"value_base64": "AAEC"}, {"value": "é"}, {"value": "plain"}]}
    assert packed_columns(body["messages"]) is None
    batch, _p, _s = parse_json_batch(body, 1000)
    assert batch.values.to_list() == [b"\x00\x01\x02", "é".encode(), b"plain"]


def test_results_json_is_the_documented_shape() -> None:
    done = AppendColumns([1, 0], [7, 8], ["t-0a000001-5-1", "t-0a000001-5-2"])
    assert json.loads(results_json(done)) == {
        "results": [
            {"partition": 1, "offset": 7, "msg_id": "t-0a000001-5-1"},
            {"partition": 0, "offset": 8, "msg_id": "t-0a000001-5-2"},
        ]
    }
