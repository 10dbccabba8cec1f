"""A strict reader of a /metrics page, as Prometheus' own text parser reads it.

prometheus-client's text parser accepts a page Prometheus refuses (a metric family declared
twice, a family's samples split apart), so the page is checked line by line first: every
family has one HELP and one TYPE, before its samples, which come in one run; no series
appears twice; every value is a number. Then prometheus-client parses it, and the
OpenMetrics form of the same registry goes through prometheus-client's OpenMetrics parser,
which is strict as well.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import requests
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)(\s+-?\d+)?$'
)
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
SUFFIXES = {
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
    "counter": ("_total", "_created"),
    "gauge": ("_created",),
}
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@dataclass
class Family:
    name: str
    type: str = ""
    help: str = ""
    labels: set[str] = field(default_factory=set)
    samples: int = 0


def check_text(text: str) -> dict[str, Family]:
    """The families of a page in the Prometheus text format; AssertionError naming the first
    line a strict parser refuses."""
    families: dict[str, Family] = {}
    closed: set[str] = set()  # families whose samples ended
    current: str | None = None
    series: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for number, line in enumerate(text.splitlines(), 1):
        where = f"line {number}: {line!r}"
        if not line.strip():
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            assert len(parts) >= 3 and NAME.match(parts[2]), where
            name = parts[2]
            fam = families.setdefault(name, Family(name))
            assert name not in closed, f"{where}: family {name} declared again after its samples"
            if parts[1] == "HELP":
                assert not fam.help, f"{where}: second HELP of {name}"
                fam.help = parts[3] if len(parts) > 3 else ""
            else:
                assert not fam.type, f"{where}: second TYPE of {name}"
                assert len(parts) == 4 and parts[3] in SUFFIXES | {"untyped": ()}, where
                assert fam.samples == 0, f"{where}: TYPE of {name} after its samples"
                fam.type = parts[3]
            if current is not None and current != name:
                closed.add(current)
            current = name
            continue
        if line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"{where}: not a sample"
        sample_name, labels_text, value = match.group(1), match.group(2) or "", match.group(3)
        owner = _family_of(sample_name, families)
        assert owner is not None, f"{where}: sample of no declared family"
        assert owner not in closed, f"{where}: samples of {owner} split apart"
        if current is not None and current != owner:
            closed.add(current)
        current = owner
        labels = tuple(sorted(LABEL.findall(labels_text.strip("{}"))))
        assert len({k for k, _v in labels}) == len(labels), f"{where}: a label twice"
        key = (sample_name, labels)
        assert key not in series, f"{where}: series appears twice"
        series.add(key)
        if value not in ("+Inf", "-Inf", "NaN"):
            float(value)  # ValueError for anything else
        fam = families[owner]
        fam.samples += 1
        fam.labels.update(k for k, _v in labels if k not in ("le", "quantile"))
    for fam in families.values():
        assert fam.type, f"family {fam.name} has no TYPE"
    list(text_string_to_metric_families(text))  # prometheus-client's reading too
    return families


def _family_of(sample: str, families: dict[str, Family]) -> str | None:
    if sample in families:
        return sample
    for name, fam in families.items():
        for suffix in SUFFIXES.get(fam.type, ()):
            if sample == name + suffix:
                return name
    return None


def scrape(address: str, verify: str | bool = True, token: str = "") -> dict[str, Family]:
    """Scrape a node in both formats and check both strictly; the text page's families."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    text = requests.get(address + "/metrics", timeout=30, verify=verify, headers=headers)
    assert text.status_code == 200, text.text
    families = check_text(text.text)
    om = requests.get(
        address + "/metrics",
        timeout=30,
        verify=verify,
        headers={**headers, "Accept": OPENMETRICS},
    )
    assert om.status_code == 200 and om.headers["Content-Type"].startswith(
        "application/openmetrics-text"
    ), om.headers
    list(openmetrics_families(om.text))  # raises on any clash or malformed line
    return families


def samples(address: str, name: str, verify: str | bool = True) -> dict[tuple, float]:
    """The samples of one metric on a node's page: {sorted label items: value}."""
    page = requests.get(address + "/metrics", timeout=30, verify=verify).text
    out: dict[tuple, float] = {}
    for fam in text_string_to_metric_families(page):
        for sample in fam.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out
