"""Answers of several led logs combined into the one answer a single log gives."""

from __future__ import annotations

from typing import Any


def sum_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Compaction reports (counts and bytes) added key by key; one report unchanged."""
    if len(reports) == 1:
        return reports[0]
    out: dict[str, Any] = {}
    for report in reports:
        for key, value in report.items():
            out[key] = out.get(key, 0) + value if key in out else value
    return out
