"""The recent past of the cluster, kept in memory: samples of the nodes' metrics in one
ring buffer per series (no Prometheus needed), and rates per second computed from them.

Series names: ``node/<id>/in_messages`` (messages appended), ``node/<id>/in_bytes``,
``node/<id>/out_messages`` (offsets committed by consumer groups on partitions it serves),
``node/<id>/disk_used``, ``topic/<t>/in`` (sum of its partitions' next offsets),
``topic/<t>/out`` (sum of the groups' committed offsets), ``group/<g>/lag`` (as ``msgstore
group describe`` counts it)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

Point = tuple[float, float]  # (seconds since the epoch, value)

COUNTERS = ("in_messages", "in_bytes", "out_messages", "/in", "/out")


@dataclass
class History:
    points: int = 360  # a sample every 10 s for an hour
    _series: dict[str, deque[Point]] = field(default_factory=dict)

    def add(self, when: float, samples: dict[str, float]) -> None:
        for name, value in samples.items():
            ring = self._series.get(name)
            if ring is None:
                ring = self._series[name] = deque(maxlen=self.points)
            ring.append((when, value))

    def values(self, name: str) -> list[Point]:
        return list(self._series.get(name, ()))

    def last(self, name: str) -> float | None:
        ring = self._series.get(name)
        return ring[-1][1] if ring else None

    def rate(self, name: str) -> list[Point]:
        """Per second between consecutive samples of a counter (a restart's drop counts
        as no traffic, not as a negative rate)."""
        return list(rates(self.values(name)))

    def names(self, prefix: str) -> list[str]:
        return sorted(n for n in self._series if n.startswith(prefix))


def rates(points: Iterable[Point]) -> Iterable[Point]:
    before: Point | None = None
    for when, value in points:
        if before is not None and when > before[0]:
            yield when, max(0.0, value - before[1]) / (when - before[0])
        before = (when, value)


def latest_rate(points: list[Point]) -> float | None:
    """The most recent rate of a counter, None before two samples."""
    found = list(rates(points[-2:]))
    return found[-1][1] if found else None
