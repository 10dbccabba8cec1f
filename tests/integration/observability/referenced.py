"""The metric names that the alert rules, the dashboards and docs/OPERATIONS.md use."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "helm" / "msgstore" / "files" / "monitoring"
RULES_FILE = MONITORING / "msgstore-rules.yaml"
DASHBOARDS = MONITORING / "dashboards"
OPERATIONS = REPO / "docs" / "OPERATIONS.md"
NAME = re.compile(r"\bmsgstore_[a-z0-9_]*[a-z0-9]\b")
# suffixes a query adds to a family's name (histogram series, counter samples)
SUFFIXES = ("_bucket", "_sum", "_count", "_total")


def family(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def rules() -> list[dict[str, Any]]:
    """Every rule of the plain rules file."""
    doc = yaml.safe_load(RULES_FILE.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def panel_expressions(board: dict[str, Any]) -> list[str]:
    """The PromQL of every target of every panel (rows' panels included)."""
    out: list[str] = []
    for panel in board.get("panels", []):
        for inner in [panel, *panel.get("panels", [])]:
            out += [t["expr"] for t in inner.get("targets", []) if t.get("expr")]
    return out


def referenced_metrics() -> set[str]:
    texts = [rule["expr"] for rule in rules()]
    for board in dashboards().values():
        texts += panel_expressions(board)
        texts += [v.get("query", "") for v in board.get("templating", {}).get("list", [])]
    texts.append(OPERATIONS.read_text())
    names = {family(n) for text in texts for n in NAME.findall(str(text))}
    return {n for n in names if not n.endswith("_")}
