"""Users' children: each user's credential Secret and the store's access document (pure).

A user's Secret ``<user>`` is owned by the MessageStoreUser (deleting the user deletes it)
and holds ``token`` (token users) or ``tls.crt``/``tls.key`` (tls users, subject
``CN=<user>``, signed by the store's CA), plus ``ca.crt`` when the store serves TLS. A
credential is made once and kept: only a new value of the user's ``msgstore.io/rotate-token``
annotation, or a change of authentication type, replaces it (and a certificate is renewed
like the node certificates, after two thirds of its lifetime).

The store's Secret ``<store>-access`` (owned by the MessageStore) holds the access document
of all its users in ``access.json``: token digests, certificate subjects and ACL rules, never
a token. Its generation grows with every change and never goes back, even when the Secret
is deleted and written afresh (``next_generation``), because a node keeps the newest
document it has seen.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from storage_node import tls
from storage_node.access.document import (
    AccessDocument,
    User,
    new_token,
    parse_access,
    token_digest,
)
from storage_node.errors import InvalidArgument

from .. import API_VERSION, USER_KIND, naming
from ..user_spec import Authentication, UserSpec
from .meta import Owner, object_meta

TOKEN_KEY = "token"
CERT_KEY = "tls.crt"
KEY_KEY = "tls.key"
CA_KEY = "ca.crt"
AUTH_ANNOTATION = "msgstore.io/authentication"  # on the Secret: the type its credential is for
ROTATED_ANNOTATION = "msgstore.io/rotated-for"  # on the Secret: the rotate value it answers


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


@dataclass(frozen=True)
class UserOwner:
    """The MessageStoreUser that owns a credential Secret."""

    name: str
    namespace: str
    uid: str


def owned_by(obj: Mapping[str, Any] | None, uid: str) -> bool:
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


@dataclass(frozen=True)
class CredentialPlan:
    data: dict[str, str]  # Secret data, base64
    annotations: dict[str, str]
    issued: str | None = None  # why a new credential was made; None when it is kept


def plan_credentials(
    user: UserSpec,
    rotate: str,
    live: Mapping[str, Any] | None,
    ca_pem: bytes | None,
    ca: tls.CertKey | None,
    validity: datetime.timedelta,
    now: datetime.datetime,
) -> CredentialPlan:
    """The Secret's data: the credential kept unless rotation, a type change or (for a
    certificate) renewal asks for a new one. ``ca`` (with its key) is needed for tls users."""
    data = dict((live or {}).get("data") or {})
    notes = ((live or {}).get("metadata") or {}).get("annotations") or {}
    kind = user.authentication.value
    same = notes.get(AUTH_ANNOTATION) == kind and notes.get(ROTATED_ANNOTATION, "") == rotate
    out: dict[str, str] = {}
    issued: str | None = None
    if user.authentication is Authentication.TOKEN:
        if same and data.get(TOKEN_KEY):
            out[TOKEN_KEY] = data[TOKEN_KEY]
        else:
            out[TOKEN_KEY] = _b64(new_token().encode())
            issued = _why(live, notes, kind)
    else:
        if ca is None:
            raise ValueError("a tls user needs the store's CA")
        current = tls.CertKey(_unb64(data.get(CERT_KEY)), _unb64(data.get(KEY_KEY)))
        renewal = tls.renewal_reason(current, ca.cert_pem, [], [], now)
        if same and renewal is None:
            out[CERT_KEY], out[KEY_KEY] = data[CERT_KEY], data[KEY_KEY]
        else:
            pair = tls.issue_client_cert(ca, user.name, now, validity)
            out[CERT_KEY], out[KEY_KEY] = _b64(pair.cert_pem), _b64(pair.key_pem)
            issued = _why(live, notes, kind) if not same else f"certificate: {renewal}"
    if ca_pem:
        out[CA_KEY] = _b64(ca_pem)
    return CredentialPlan(
        data=out, annotations={AUTH_ANNOTATION: kind, ROTATED_ANNOTATION: rotate}, issued=issued
    )


def _why(live: Mapping[str, Any] | None, notes: Mapping[str, str], kind: str) -> str:
    if live is None:
        return "new user"
    if notes.get(AUTH_ANNOTATION) != kind:
        return f"authentication changed to {kind}"
    return "rotation requested"


def build_user_secret(owner: UserOwner, store: str, plan: CredentialPlan) -> dict[str, Any]:
    labels = naming.common_labels(store, naming.USER_COMPONENT)
    labels[naming.USER_LABEL] = owner.name
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": naming.user_secret_name(owner.name),
            "namespace": owner.namespace,
            "labels": labels,
            "annotations": dict(plan.annotations),
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": USER_KIND,
                    "name": owner.name,
                    "uid": owner.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": dict(sorted(plan.data.items())),
    }


def document_user(user: UserSpec, secret: Mapping[str, Any] | None) -> User | None:
    """The user as the access document lists it, from its Secret (None: no credential yet)."""
    data = (secret or {}).get("data") or {}
    notes = ((secret or {}).get("metadata") or {}).get("annotations") or {}
    if notes.get(AUTH_ANNOTATION) != user.authentication.value:
        return None  # the Secret still holds the credential of the other type
    if user.authentication is Authentication.TOKEN:
        token = _unb64(data.get(TOKEN_KEY)).decode(errors="replace")
        return User(user.name, token_sha256=token_digest(token)) if token else None
    return User(user.name, tls_subject=user.tls_subject) if data.get(CERT_KEY) else None


def render_access(
    users: Iterable[tuple[UserSpec, Mapping[str, Any] | None]],
) -> tuple[AccessDocument, list[str]]:
    """The document of a store's users (generation 0) and the names it holds, sorted.

    A user without a credential yet is left out; so is one whose token another user already
    has (a token copied by hand would make the document invalid for every node)."""
    listed: list[User] = []
    rules = []
    digests: set[str] = set()
    for spec, secret in sorted(users, key=lambda pair: pair[0].name):
        user = document_user(spec, secret)
        if user is None or (user.token_sha256 and user.token_sha256 in digests):
            continue
        if user.token_sha256:
            digests.add(user.token_sha256)
        listed.append(user)
        rules += list(spec.acls)
    doc = AccessDocument(generation=0, users=tuple(listed), acls=tuple(rules))
    parse_access(doc.to_json())  # never publish what a node would refuse
    return doc, [u.name for u in listed]


def _content(doc_json: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc_json.items() if k != "generation"}


def live_document(secret: Mapping[str, Any] | None) -> AccessDocument | None:
    """The document a live access Secret holds (None when missing or unreadable)."""
    raw = _unb64(((secret or {}).get("data") or {}).get(naming.ACCESS_KEY))
    if not raw:
        return None
    try:
        return parse_access(json.loads(raw))
    except (ValueError, InvalidArgument):
        return None


def next_generation(
    live: AccessDocument | None, rendered: AccessDocument, now_s: int
) -> int | None:
    """The generation to publish ``rendered`` with, or None when the live one says the same.

    The live one plus one; a first document (or one written again after its Secret was
    deleted) starts at the time in seconds, so it never goes below what the nodes still hold
    (they refuse an older document) even though the old Secret is gone."""
    if live is not None and _content(live.to_json()) == _content(rendered.to_json()):
        return None
    return live.generation + 1 if live is not None else now_s


def access_text(doc: AccessDocument) -> str:
    return json.dumps(doc.to_json(), indent=2, sort_keys=True) + "\n"


def build_access_secret(owner: Owner, doc: AccessDocument) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": object_meta(owner, naming.access_secret_name(owner.name), "access"),
        "data": {naming.ACCESS_KEY: _b64(access_text(doc).encode())},
    }


def with_generation(doc: AccessDocument, generation: int) -> AccessDocument:
    return AccessDocument(generation=generation, users=doc.users, acls=doc.acls)
