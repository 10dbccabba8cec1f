"""Small time-series charts as inline SVG, drawn on the server: no script runs in the
browser and nothing is styled inline (presentation attributes only), so the strict CSP
holds. Every chart has a text title and says its latest value and its peak."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

from storage_node.console.history import Point

WIDTH, HEIGHT, PAD = 320, 80, 4


@dataclass(frozen=True)
class Chart:
    title: str
    svg: str  # markup built from numbers and escaped text only
    latest: str
    peak: str
    points: int


def human(value: float, unit: str = "") -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.1f}{suffix}{unit}"
    return f"{value:.1f}{unit}" if value % 1 else f"{value:.0f}{unit}"


def chart(title: str, points: list[Point], unit: str = "") -> Chart:
    """A line over ``points`` (time, value); an empty frame that says "no data yet"
    before two samples."""
    label = escape(title, quote=True)
    head = (
        f'<svg class="chart" role="img" aria-label="{label}" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{label}</title>"
        f'<rect x="0.5" y="0.5" width="{WIDTH - 1}" height="{HEIGHT - 1}" fill="#fff" '
        f'stroke="#999"/>'
    )
    if len(points) < 2:
        body = (
            f'<text x="{WIDTH // 2}" y="{HEIGHT // 2}" text-anchor="middle" fill="#333" '
            f'font-size="12">no data yet</text>'
        )
        return Chart(title, head + body + "</svg>", "-", "-", len(points))
    t0, t1 = points[0][0], points[-1][0]
    peak = max(v for _, v in points)
    top = peak or 1.0  # an all-zero series is drawn along the bottom
    span = (t1 - t0) or 1.0
    xy = " ".join(
        f"{PAD + (t - t0) / span * (WIDTH - 2 * PAD):.1f},"
        f"{HEIGHT - PAD - v / top * (HEIGHT - 2 * PAD - 12):.1f}"
        for t, v in points
    )
    start = datetime.fromtimestamp(t0, tz=UTC).strftime("%H:%M")
    end = datetime.fromtimestamp(t1, tz=UTC).strftime("%H:%M UTC")
    body = (
        f'<polyline class="series" fill="none" stroke="#0b5394" stroke-width="1.5" '
        f'points="{xy}"/>'
        f'<text x="{PAD}" y="12" font-size="10" fill="#333">max {escape(human(peak, unit))}'
        f"</text>"
        f'<text x="{PAD}" y="{HEIGHT - PAD - 1}" font-size="10" fill="#333">{start}</text>'
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - PAD - 1}" font-size="10" fill="#333" '
        f'text-anchor="end">{end}</text>'
    )
    return Chart(
        title, head + body + "</svg>", human(points[-1][1], unit), human(peak, unit), len(points)
    )
