"""MessageStoreUser rendering: the spec, the credential Secret, and the store's access
document as a node reads it (the access model's own parser and the node's AccessFile)."""

from __future__ import annotations

import base64
import datetime
import json

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from msgstore_operator import naming
from msgstore_operator.children import Owner
from msgstore_operator.children.users import (
    AUTH_ANNOTATION,
    ROTATED_ANNOTATION,
    UserOwner,
    build_access_secret,
    build_user_secret,
    live_document,
    next_generation,
    plan_credentials,
    render_access,
    with_generation,
)
from msgstore_operator.user_spec import Authentication, UserSpecProblem, parse_user

from storage_node import tls
from storage_node.access.access_file import AccessFile
from storage_node.access.authorizer import Authorizer
from storage_node.access.document import Operation, ResourceType, token_digest

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
DAYS = datetime.timedelta(days=90)
STORE = Owner(name="shop", namespace="ns1", uid="store-uid")


def body(name="orders-app", kind="token", acls=None, store="shop"):
    return {
        "metadata": {"name": name, "namespace": "ns1", "uid": f"uid-{name}"},
        "spec": {"store": store, "authentication": {"type": kind}, "acls": acls or []},
    }


def rule(op, name, kind="topic", pattern="literal"):
    return {"operation": op, "resource": {"type": kind, "name": name, "patternType": pattern}}


def secret_of(user, plan):
    return build_user_secret(UserOwner(user.name, "ns1", f"uid-{user.name}"), "shop", plan)


def token_of(secret):
    return base64.b64decode(secret["data"]["token"]).decode()


@pytest.fixture(scope="module")
def ca():
    return tls.new_ca("test CA", NOW - datetime.timedelta(days=1))


def test_spec_rules_become_the_access_models_rules():
    user = parse_user(
        body(acls=[rule("write", "orders-", pattern="prefix"), rule("read", "billing", "group")])
    )
    assert user.authentication is Authentication.TOKEN and user.store == "shop"
    assert [(r.operation, r.resource, r.pattern.value, r.name) for r in user.acls] == [
        (Operation.WRITE, ResourceType.TOPIC, "prefix", "orders-"),
        (Operation.READ, ResourceType.GROUP, "literal", "billing"),
    ]
    # patternType defaults to literal; the same rule twice is kept once
    twice = parse_user(body(acls=[rule("read", "a"), {"operation": "read", "resource": {
        "type": "topic", "name": "a"}}]))  # fmt: skip
    assert len(twice.acls) == 1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (body(acls=[rule("write", "billing", "group")]), "group rule allows only read"),
        (body(acls=[rule("read", "orders eu")]), "acls[0]: ACL rule of orders-app: resource"),
        (body(acls=[rule("rm", "orders")]), "acls[0]: ACL rule of orders-app: 'rm'"),
        (body(acls=[rule("read", "", pattern="prefix")]), "resource name ''"),
        (body(kind="password"), "must be token or tls"),
        (body(name="x" * 65, kind="tls"), "at most 64"),
        (body(acls=[rule("read", f"t{i}") for i in range(129)]), "at most 128 rules"),
        (body(store=""), "spec.store must name a MessageStore"),
    ],
)
def test_bad_specs_are_refused_with_the_reason(raw, message):
    with pytest.raises(UserSpecProblem, match=None) as err:
        parse_user(raw)
    assert message in str(err.value)


def test_a_token_is_made_once_and_kept_until_rotation_is_asked(ca):
    user = parse_user(body())
    first = plan_credentials(user, "", None, ca.cert_pem, ca, DAYS, NOW)
    assert first.issued == "new user"
    secret = secret_of(user, first)
    token = token_of(secret)
    assert len(token) >= 43  # 32 random bytes, URL-safe base64
    assert base64.b64decode(secret["data"]["ca.crt"]) == ca.cert_pem
    assert secret["metadata"]["annotations"] == {AUTH_ANNOTATION: "token", ROTATED_ANNOTATION: ""}
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "MessageStoreUser"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-orders-app"
    assert secret["metadata"]["labels"][naming.USER_LABEL] == "orders-app"
    assert secret["metadata"]["labels"]["app.kubernetes.io/instance"] == "shop"

    again = plan_credentials(user, "", secret, ca.cert_pem, ca, DAYS, NOW)
    assert again.issued is None and token_of(secret_of(user, again)) == token

    rotated = plan_credentials(user, "2026-11-26", secret, ca.cert_pem, ca, DAYS, NOW)
    assert rotated.issued == "rotation requested"
    assert token_of(secret_of(user, rotated)) != token
    # without TLS on the store there is no ca.crt
    plain = plan_credentials(user, "", secret, None, None, DAYS, NOW)
    assert "ca.crt" not in plain.data and plain.data["token"] == secret["data"]["token"]


def test_a_tls_user_gets_a_client_certificate_of_the_stores_ca(ca):
    user = parse_user(body(kind="tls"))
    plan = plan_credentials(user, "", None, ca.cert_pem, ca, DAYS, NOW)
    secret = secret_of(user, plan)
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    pem = base64.b64decode(secret["data"]["tls.crt"])
    tls.verify_issued_by(pem, ca.cert_pem, NOW)
    cert = x509.load_pem_x509_certificate(pem)
    assert cert.subject.rfc4514_string() == "CN=orders-app" == user.tls_subject
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert tls.key_matches(pem, base64.b64decode(secret["data"]["tls.key"]))
    # kept while good; renewed after two thirds of its lifetime; new on a type change
    assert plan_credentials(user, "", secret, ca.cert_pem, ca, DAYS, NOW).issued is None
    later = NOW + datetime.timedelta(days=61)
    assert "renewal due" in (
        plan_credentials(user, "", secret, ca.cert_pem, ca, DAYS, later).issued or ""
    )
    as_token = plan_credentials(parse_user(body()), "", secret, ca.cert_pem, ca, DAYS, NOW)
    assert as_token.issued == "authentication changed to token" and set(as_token.data) == {
        "token", "ca.crt"}  # fmt: skip


def test_the_document_lists_every_user_with_a_credential_and_its_rules(ca, tmp_path):
    writer = parse_user(body("orders-app", acls=[rule("write", "orders-", pattern="prefix")]))
    reader = parse_user(
        body("auditor", acls=[rule("read", "orders-eu"), rule("read", "g", "group")])
    )
    certified = parse_user(body("edge", kind="tls", acls=[rule("write", "edge")]))
    pending = parse_user(body("pending", acls=[rule("read", "x")]))
    secrets = {}
    for user in (writer, reader, certified):
        plan = plan_credentials(user, "", None, ca.cert_pem, ca, DAYS, NOW)
        secrets[user.name] = secret_of(user, plan)
    pairs = [(u, secrets.get(u.name)) for u in (writer, reader, certified, pending)]
    doc, names = render_access(pairs)
    assert names == ["auditor", "edge", "orders-app"] and doc.generation == 0
    assert doc.user("orders-app").token_sha256 == token_digest(token_of(secrets["orders-app"]))
    assert doc.user("edge").tls_subject == "CN=edge" and doc.user("edge").token_sha256 is None
    assert doc.user("pending") is None and not doc.rules_of("pending")

    # What a node does with it: the Secret's bytes as the mounted file.
    secret = build_access_secret(STORE, with_generation(doc, 7))
    assert secret["metadata"]["name"] == "shop-access"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "store-uid"
    path = tmp_path / "access.json"
    path.write_bytes(base64.b64decode(secret["data"]["access.json"]))
    auth = Authorizer("super", "", AccessFile(path))
    who = auth.authenticate(token_of(secrets["orders-app"]))
    assert who is not None and who.name == "orders-app"
    assert auth.allows(who, Operation.WRITE, ResourceType.TOPIC, "orders-eu")
    assert not auth.allows(who, Operation.WRITE, ResourceType.TOPIC, "payments")
    assert not auth.allows(who, Operation.READ, ResourceType.TOPIC, "orders-eu")
    auditor = auth.authenticate(token_of(secrets["auditor"]))
    assert auditor is not None
    assert auth.allows(auditor, Operation.READ, ResourceType.TOPIC, "orders-eu")
    assert not auth.allows(auditor, Operation.WRITE, ResourceType.TOPIC, "orders-eu")
    assert auth.authenticate_subject("CN=edge") is not None
    assert token_of(secrets["orders-app"]) not in path.read_text()  # digests only


def test_a_secret_of_the_other_type_or_a_shared_token_stays_out_of_the_document(ca):
    one = parse_user(body("one"))
    two = parse_user(body("two"))
    secret = secret_of(one, plan_credentials(one, "", None, None, None, DAYS, NOW))
    copied = json.loads(json.dumps(secret))  # a token copied by hand into another Secret
    doc, names = render_access([(one, secret), (two, copied)])
    assert names == ["one"]
    as_tls = parse_user(body("one", kind="tls"))
    assert render_access([(as_tls, secret)])[1] == []  # the Secret still holds a token


def test_the_generation_grows_on_every_change_and_never_goes_back():
    user = parse_user(body(acls=[rule("read", "a")]))
    secret = secret_of(user, plan_credentials(user, "", None, None, None, DAYS, NOW))
    doc, _ = render_access([(user, secret)])
    now_s = int(NOW.timestamp())
    first = next_generation(None, doc, now_s)
    assert first == now_s  # a fresh Secret starts at the time, above anything older
    live = live_document(build_access_secret(STORE, with_generation(doc, first)))
    assert live is not None and live.generation == first
    assert next_generation(live, doc, now_s + 5) is None  # nothing changed: nothing written
    changed = parse_user(body(acls=[rule("read", "a"), rule("write", "b")]))
    doc2, _ = render_access([(changed, secret)])
    assert next_generation(live, doc2, now_s + 60) == first + 1  # a counter from here on
    revoked, names = render_access([])
    assert names == [] and next_generation(live, revoked, now_s) == first + 1
    # the Secret deleted: its successor starts at the time, above every generation before
    assert next_generation(None, revoked, now_s + 60) == now_s + 60
    assert live_document({"data": {"access.json": base64.b64encode(b"{").decode()}}) is None
    assert live_document(None) is None


def test_a_client_certificate_needs_a_common_name_of_at_most_64_characters(ca):
    for bad in ("", "x" * 65):
        with pytest.raises(ValueError, match="1-64 characters"):
            tls.issue_client_cert(ca, bad, NOW)
    assert tls.cert_info(tls.issue_client_cert(ca, "x" * 64, NOW).cert_pem).subject_cn == "x" * 64
