"""What validating JSON bodies and answers with the pydantic models would cost on the hot
paths, against the hand-written code the node uses there, measured in the same run.

Prints JSON lines:
  produce_json   median µs to turn a JSON produce body into packed columns: the node's path
                 (envelope model + column check, ``column_us``) against validating every
                 message with the ``Batch`` model (``model_us``); ratio_model_vs_column
  lookup_json    median µs to build a key-lookup answer of N messages: the node's
                 ``message_to_json`` + json.dumps (``hand_us``) against the ``LookupResult``
                 model (``model_us``); ratio_model_vs_hand

Runs are interleaved (hand, model, hand, model, ...) so machine noise hits both alike.

Usage: python bench/json_validation.py [--rounds 9]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from storage_node.server.api_models import Batch, LookupResult  # noqa: E402
from storage_node.server.json_batch import decode_json_batch  # noqa: E402
from storage_node.store import Message  # noqa: E402
from storage_node.wire.message_json import message_to_json  # noqa: E402


def produce_body(n: int) -> bytes:
    rng = random.Random(1)
    return json.dumps(
        {
            "messages": [
                {"value": "".join(rng.choices("abcdef0123456789", k=100)), "key": f"key-{i}"}
                for i in range(n)
            ]
        }
    ).encode()


def by_model(body: bytes) -> object:
    return Batch.model_validate_json(body).packed()


def messages(n: int) -> list[Message]:
    return [
        Message("t", i % 4, i, f"key-{i}", None, f"app-0a000001-1-{i}", 1, 2, b"x" * 100)
        for i in range(n)
    ]


def lookup_by_hand(found: list[Message]) -> bytes:
    doc = {"messages": [message_to_json(m) for m in found], "limit_reached": False}
    return json.dumps(doc).encode()


def lookup_by_model(found: list[Message]) -> bytes:
    answer = LookupResult(
        messages=[message_to_json(m) for m in found], limit_reached=False, unreachable_nodes=[]
    )
    return answer.model_dump_json(exclude_none=True).encode()


def timed(fn, arg, reps: int) -> float:
    started = time.perf_counter()
    for _ in range(reps):
        fn(arg)
    return (time.perf_counter() - started) / reps * 1e6


def compare(name: str, a, b, arg, reps: int, rounds: int, labels: tuple[str, str]) -> dict:
    first, second = [], []
    for _ in range(rounds):
        first.append(timed(a, arg, reps))
        second.append(timed(b, arg, reps))
    x, y = statistics.median(first), statistics.median(second)
    return {
        "bench": name,
        labels[0]: round(x, 1),
        labels[1]: round(y, 1),
        f"ratio_{labels[1][:-3]}_vs_{labels[0][:-3]}": round(y / x, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    for n in (10, 1000):
        body, reps = produce_body(n), max(20, 20_000 // n)
        row = compare(
            "produce_json",
            lambda raw: decode_json_batch(raw, 100_000),
            by_model,
            body,
            reps,
            args.rounds,
            ("column_us", "model_us"),
        )
        print(json.dumps({**row, "messages": n}))
    for n in (32, 1000):
        found, reps = messages(n), max(20, 20_000 // n)
        row = compare(
            "lookup_json",
            lookup_by_hand,
            lookup_by_model,
            found,
            reps,
            args.rounds,
            ("hand_us", "model_us"),
        )
        print(json.dumps({**row, "messages": n}))


if __name__ == "__main__":
    main()
