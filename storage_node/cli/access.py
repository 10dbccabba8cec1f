"""``msgstore user ...`` and ``msgstore acl ...``: users and their ACL rules, for clusters
outside Kubernetes (a ``msgstore local`` cluster included), with the super-user's token.
On Kubernetes, MessageStoreUser resources manage them and these commands answer
``access_managed``. The model: docs/SECURITY.md, "Users and ACLs"."""

from __future__ import annotations

import argparse
import sys
from typing import Any

OPERATIONS = ("read", "write", "create", "delete", "describe", "alter")
RESOURCE_FLAGS = (  # flag, resource, pattern
    ("topic", "topic", "literal"),
    ("topic_prefix", "topic", "prefix"),
    ("group", "group", "literal"),
    ("group_prefix", "group", "prefix"),
)


def rule_line(rule: dict[str, Any]) -> str:
    """One rule as a line: ``app  write  topic  prefix  orders-``."""
    return "\t".join(rule[k] for k in ("user", "operation", "resource", "pattern", "name"))


def cmd_user_create(args: argparse.Namespace) -> int:
    from storage_node.cli.common import UsageError, client_of

    if args.no_token and not args.tls_subject:
        raise UsageError("--no-token needs --tls-subject (a certificate to prove the user)")
    with client_of(args) as client:
        doc = client.create_user(args.name, args.tls_subject, not args.no_token)
    if doc.get("token"):
        print(doc["token"])
        print(
            f"user {doc['name']} created; its token above is shown this once: keep it now",
            file=sys.stderr,
        )
    else:
        print(f"user {doc['name']} created (certificate subject {doc['tls_subject']})")
    return 0


def cmd_user_list(args: argparse.Namespace) -> int:
    from storage_node.cli.common import client_of

    with client_of(args) as client:
        for user in client.list_users():
            subject = user.get("tls_subject") or "-"
            print(f"{user['name']}\t{'token' if user['has_token'] else '-'}\t{subject}")
    return 0


def cmd_user_delete(args: argparse.Namespace) -> int:
    from storage_node.cli.common import client_of

    with client_of(args) as client:
        client.delete_user(args.name)
    print(f"user {args.name} deleted with its rules")
    return 0


def _rule_args(args: argparse.Namespace) -> tuple[str, str, str, str, str]:
    for flag, resource, pattern in RESOURCE_FLAGS:
        value = getattr(args, flag)
        if value is not None:
            return args.user, args.allow, resource, value, pattern
    raise AssertionError("argparse requires one resource flag")


def cmd_acl_add(args: argparse.Namespace) -> int:
    from storage_node.cli.common import client_of

    with client_of(args) as client:
        doc = client.add_acl(*_rule_args(args))
    print(rule_line(doc["acl"]))
    if not doc["changed"]:
        print("note: the rule was there already", file=sys.stderr)
    return 0


def cmd_acl_remove(args: argparse.Namespace) -> int:
    from storage_node.cli.common import client_of

    with client_of(args) as client:
        doc = client.remove_acl(*_rule_args(args))
    print(f"removed: {rule_line(doc['acl'])}")
    return 0


def cmd_acl_list(args: argparse.Namespace) -> int:
    from storage_node.cli.common import client_of

    with client_of(args) as client:
        for rule in client.list_acls(args.user):
            print(rule_line(rule))
    return 0


def _rule_parser(asub: Any, name: str, parent: argparse.ArgumentParser, text: str) -> Any:
    p = asub.add_parser(name, parents=[parent], help=text)
    p.add_argument("--user", required=True, help="the user the rule is for")
    p.add_argument("--allow", required=True, choices=OPERATIONS, help="the operation allowed")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", metavar="NAME", help="one topic")
    which.add_argument("--topic-prefix", metavar="P", help="every topic whose name starts with P")
    which.add_argument("--group", metavar="NAME", help="one consumer group")
    which.add_argument("--group-prefix", metavar="P", help="every group whose name starts with P")
    return p


def register_access(sub: Any, parent: argparse.ArgumentParser) -> None:
    users = sub.add_parser("user", help="users of the cluster (super-user token)")
    usub = users.add_subparsers(dest="user_command", required=True)
    create = usub.add_parser(
        "create", parents=[parent], help="create a user and print its new token (once)"
    )
    create.add_argument("name", help="user name: 1-128 of A-Z a-z 0-9 . _ -")
    create.add_argument("--tls-subject", help="a client certificate subject that proves it too")
    create.add_argument("--no-token", action="store_true", help="no token (certificate only)")
    create.set_defaults(func=cmd_user_create)
    lst = usub.add_parser("list", parents=[parent], help="every user (never a token)")
    lst.set_defaults(func=cmd_user_list)
    delete = usub.add_parser(
        "delete", parents=[parent], help="delete a user and its rules (its token stops working)"
    )
    delete.add_argument("name", help="user name")
    delete.set_defaults(func=cmd_user_delete)

    acls = sub.add_parser("acl", help="ACL rules: what each user may do (super-user token)")
    asub = acls.add_subparsers(dest="acl_command", required=True)
    _rule_parser(asub, "add", parent, "allow a user an operation").set_defaults(func=cmd_acl_add)
    _rule_parser(asub, "remove", parent, "remove a rule (the same flags as add)").set_defaults(
        func=cmd_acl_remove
    )
    lst = asub.add_parser("list", parents=[parent], help="every rule, or one user's")
    lst.add_argument("--user", help="only this user's rules")
    lst.set_defaults(func=cmd_acl_list)
