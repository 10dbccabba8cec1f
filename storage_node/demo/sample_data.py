"""Deterministic sample data: JSON lines of e-commerce order events.

Each order goes through a realistic lifecycle (created → paid → packed → shipped →
delivered, sometimes cancelled or refunded), so a key lookup by order id shows an order's
history and tags separate event types. The same seed always gives the same bytes, so the
demo and benchmarks are reproducible without shipping a large file in the repository.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DEFAULT_ROWS = 300_000
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
REGIONS = ("eu-west", "eu-central", "us-east", "us-west", "ap-south", "ap-northeast")
PAYMENTS = ("card", "paypal", "bank_transfer", "apple_pay", "gift_card")
CURRENCY = {
    "eu-west": "EUR",
    "eu-central": "EUR",
    "us-east": "USD",
    "us-west": "USD",
    "ap-south": "INR",
    "ap-northeast": "JPY",
}
CARRIERS = ("dhl", "ups", "fedex", "postnl", "yamato")


def _lifecycle(rng: random.Random) -> list[str]:
    roll = rng.random()
    if roll < 0.06:
        return ["created", "cancelled"]
    steps = ["created", "paid", "packed", "shipped", "delivered"]
    if roll < 0.10:
        return steps[:2] + ["refunded"]
    if roll < 0.14:
        return steps + ["returned", "refunded"]
    return steps


def order_events(rows: int = DEFAULT_ROWS, seed: int = 20260101) -> Iterator[dict[str, Any]]:
    """Yield ``rows`` events in time order (orders interleave like a real stream)."""
    rng = random.Random(seed)
    active: list[dict[str, Any]] = []
    now = START_MS
    next_order = 1
    emitted = 0
    while emitted < rows:
        now += rng.randint(5, 400)
        if not active or (len(active) < 2000 and rng.random() < 0.35):
            region = rng.choice(REGIONS)
            items: list[dict[str, Any]] = [
                {
                    "sku": f"SKU-{rng.randint(1, 5000):05d}",
                    "qty": rng.randint(1, 4),
                    "price": round(rng.uniform(2, 250), 2),
                }
                for _ in range(rng.randint(1, 4))
            ]
            active.append(
                {
                    "order_id": f"ord-{next_order:08d}",
                    "customer_id": f"cust-{rng.randint(1, 40_000):06d}",
                    "region": region,
                    "currency": CURRENCY[region],
                    "items": items,
                    "amount": round(sum(i["qty"] * i["price"] for i in items), 2),
                    "payment": rng.choice(PAYMENTS),
                    "steps": _lifecycle(rng),
                    "step": 0,
                }
            )
            next_order += 1
        index = rng.randrange(len(active))
        order = active[index]
        event_type = order["steps"][order["step"]]
        event: dict[str, Any] = {
            "event_id": f"evt-{emitted + 1:09d}",
            "event_type": event_type,
            "ts": now,
            "order_id": order["order_id"],
            "customer_id": order["customer_id"],
            "region": order["region"],
            "amount": order["amount"],
            "currency": order["currency"],
        }
        if event_type == "created":
            event["items"] = order["items"]
        elif event_type == "paid":
            event["payment"] = order["payment"]
        elif event_type == "shipped":
            event["carrier"] = rng.choice(CARRIERS)
            event["tracking"] = f"TRK{rng.randint(10**9, 10**10 - 1)}"
        yield event
        emitted += 1
        order["step"] += 1
        if order["step"] >= len(order["steps"]):
            active[index] = active[-1]
            active.pop()


def ensure_sample_file(path: str | os.PathLike[str], rows: int = DEFAULT_ROWS) -> Path:
    """Write the JSON-lines file unless it exists with the right number of rows."""
    target = Path(path)
    if target.exists():
        with open(target, "rb") as fh:
            if sum(1 for _ in fh) == rows:
                return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for event in order_events(rows):
            fh.write(json.dumps(event, separators=(",", ":")))
            fh.write("\n")
    os.replace(tmp, target)
    return target
