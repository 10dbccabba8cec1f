"""The operator's CA rotation, step by step (operator/msgstore_operator/ca_rotation.py): what
the Secret holds and what the nodes trust and are issued in each phase, and that no step is
taken before the nodes show the previous one took effect. The nodes' answers are the
arguments of ``advance``; the probes themselves are the ones ``msgstore local rotate-ca``
runs against real nodes (tests/integration/node/test_mtls.py)."""

from __future__ import annotations

import datetime

from msgstore_operator import ca_rotation as rot
from msgstore_operator.children import Owner
from msgstore_operator.children import tls as tls_children

from storage_node import tls

OWNER = Owner(name="demo", namespace="ns1", uid="uid-1")
NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


def yes() -> bool:
    return True


def no() -> bool:
    return False


def through_secret(state: rot.CaState) -> rot.CaState:
    """The state as the next pass reads it back from the Secret the operator wrote."""
    secret = rot.build_secret(OWNER, state)
    current = tls_children.ca_from_secret(secret)
    assert current is not None
    return rot.read_state(secret, current)


def test_a_rotation_runs_its_three_steps_only_as_the_nodes_follow():
    old = tls_children.new_store_ca(OWNER, NOW)
    state = rot.CaState(old)
    assert rot.advance(OWNER, state, "", yes, yes, NOW) == (state, None)  # nothing asked
    assert state.bundle() == old.cert_pem and state.issuing() == old
    # asked: the new CA is trusted beside the old one; certificates still from the old
    state, what = rot.advance(OWNER, state, "2030-01", no, no, NOW)
    state = through_secret(state)
    assert what and state.phase == rot.TRUSTING and state.next is not None
    new = state.next
    assert tls.read_bundle(state.bundle()) == [old.cert, new.cert]
    assert state.issuing() == old and state.current == old
    # the nodes have not reloaded the bundle yet: no step
    assert rot.advance(OWNER, state, "2030-01", no, yes, NOW) == (state, None)
    state, what = rot.advance(OWNER, state, "2030-01", yes, no, NOW)
    state = through_secret(state)
    assert what and state.phase == rot.REISSUING and state.issuing() == new
    assert tls.read_bundle(state.bundle()) == [old.cert, new.cert]
    # not every node serves a certificate of the new CA yet: no step
    assert rot.advance(OWNER, state, "2030-01", yes, no, NOW) == (state, None)
    state, what = rot.advance(OWNER, state, "2030-01", yes, yes, NOW)
    state = through_secret(state)
    assert what == "the old CA is retired"
    assert state == rot.CaState(new, None, "", "2030-01")
    assert tls.read_bundle(state.bundle()) == [new.cert]
    # the same request is not run again; a new value starts another rotation
    assert rot.advance(OWNER, state, "2030-01", yes, yes, NOW) == (state, None)
    again, _ = rot.advance(OWNER, state, "2031-01", yes, yes, NOW)
    assert again.phase == rot.TRUSTING and again.next not in (None, new, old)


def test_node_certificates_follow_the_issuing_ca():
    from msgstore_operator.spec import parse_spec

    spec = parse_spec({})
    old = tls_children.new_store_ca(OWNER, NOW)
    trusting = rot.CaState(old, tls.new_ca("next", NOW), rot.TRUSTING, "x")
    plan = tls_children.plan_node_certs(
        OWNER, spec, 2, "cluster.local", trusting.issuing(), {}, NOW
    )
    reissuing = rot.CaState(old, trusting.next, rot.REISSUING, "x")
    again = tls_children.plan_node_certs(
        OWNER, spec, 2, "cluster.local", reissuing.issuing(), plan.data, NOW
    )
    assert [pod for pod, _ in again.issued] == ["demo-0", "demo-1"]
    assert all("not issued by CA" in why for _, why in again.issued)
