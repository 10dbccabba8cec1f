"""Deleting a group's committed offsets: all, a topic's, one partition's; bad requests change
nothing; a deletion written into the log (a replicated log's) is applied again by recovery,
after the commits it follows."""

from __future__ import annotations

import os
import shutil

import pytest

from storage_node.errors import InvalidName, UnknownTopic
from storage_node.store import MessageIn, Store, TopicConfig
from tests.unit.store.conftest import small_config


def fill(s: Store) -> None:
    for topic in ("a", "b"):
        s.create_topic(TopicConfig(topic, 2))
        s.append(topic, [MessageIn(b"x", partition=p) for p in (0, 1)])
    for group in ("g", "h"):
        for topic in ("a", "b"):
            for p in (0, 1):
                s.commit_offset(group, topic, p, 1, in_log=True)


def test_delete_all_a_topic_or_one_partition(tmp_path):
    s = Store.open(small_config(tmp_path / "d"))
    try:
        fill(s)
        assert s.delete_offsets("g", "a", 1) is True
        assert s.committed_offsets("g") == {"a": {0: 1}, "b": {0: 1, 1: 1}}
        assert s.delete_offsets("g", "a", 1) is False  # already gone
        assert s.delete_offsets("g", "b") is True
        assert s.committed_offsets("g") == {"a": {0: 1}}
        assert s.delete_offsets("h") is True
        assert s.consumer_groups() == ["g"]
        assert s.delete_offsets("nobody") is False
        with pytest.raises(InvalidName):
            s.delete_offsets("bad group!")
        with pytest.raises(UnknownTopic):
            s.delete_offsets("g", "no-such-topic", 0)
        assert s.committed_offsets("g") == {"a": {0: 1}}
    finally:
        s.close()


def test_recovery_replays_logged_deletions_after_the_commits(tmp_path):
    d = tmp_path / "d"
    s = Store.open(small_config(d))
    fill(s)
    s.delete_offsets("g", "a", 0, in_log=True)
    s.delete_offsets("h", in_log=True)
    expect = (s.consumer_groups(), s.committed_offsets("g"))
    s.close()
    os.unlink(d / "checkpoint")
    shutil.rmtree(d / "offsets")
    s = Store.open(small_config(d))
    try:
        assert (s.consumer_groups(), s.committed_offsets("g")) == expect
        assert expect == (["g"], {"a": {1: 1}, "b": {0: 1, 1: 1}})
    finally:
        s.close()
