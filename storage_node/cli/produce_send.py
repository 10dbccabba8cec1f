"""Sending for ``msgstore produce``: lines in batches, the account of what is stored, and the
exact resume of a batch that was only partly stored.

Every run sends under one producer id (``--producer-id``, else a new one) and numbers its
sub-batches from the clock, so no two runs of one producer id share a sequence. A sub-batch
a node did not confirm is named in the resume advice as ``--retry SEQ:LINE@PARTITION,...``:
the resumed run sends exactly those lines again as one sub-batch under the same producer id
and sequence to the same partitions, and a node that had stored it answers its first result
and writes nothing (the idempotency table, docs/NODE_API.md). So a resume stores every line
once, whether or not the failed sub-batch had reached the node.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

from storage_node.cli.produce_input import Line
from storage_node.client.common import SequenceSource
from storage_node.errors import InvalidArgument, MsgStoreError

# refusals that concern single messages: the rest of their batch can still be stored
MESSAGE_ERRORS = {
    "invalid_batch",
    "invalid_argument",
    "message_too_large",
    "request_too_large",
    "duplicate_msg_id",
}


@dataclass
class Unconfirmed:
    """A sub-batch the cluster did not confirm: its lines (and their partitions), its
    sequence, and the error."""

    lines: list[Line]
    sequence: int | None
    error: MsgStoreError

    def token(self) -> str:
        """``SEQ:LINE@PARTITION,...``, the value of ``--retry`` that resends it."""
        lines = ",".join(f"{ln.number}@{ln.message.partition}" for ln in self.lines)
        return f"{self.sequence}:{lines}"


class SendFailed(Exception):
    """Sub-batches of a batch were not confirmed (``unconfirmed``); ``stored`` holds the
    lines of the batch that are, with their results."""

    def __init__(self, unconfirmed: list[Unconfirmed], stored: list[Any]) -> None:
        super().__init__(unconfirmed[0].error.message)
        self.error = unconfirmed[0].error
        self.unconfirmed = unconfirmed
        self.stored = stored

    @property
    def refused(self) -> list[Line]:
        return sorted((ln for u in self.unconfirmed for ln in u.lines), key=lambda ln: ln.number)


@dataclass
class RetryGroup:
    """One ``--retry`` value: a sequence and the lines (with partitions) it carried."""

    sequence: int
    partitions: dict[int, int]  # line number -> partition

    @classmethod
    def parse(cls, text: str) -> RetryGroup:
        try:
            seq, _, items = text.partition(":")
            partitions = {}
            for item in items.split(","):
                line, _, part = item.partition("@")
                partitions[int(line)] = int(part)
            sequence = int(seq)
        except ValueError:
            raise InvalidArgument(
                f"--retry takes SEQ:LINE@PARTITION,... as a failed run printed it, got {text!r}"
            ) from None
        if sequence < 0 or not partitions or min(partitions) < 1 or min(partitions.values()) < 0:
            raise InvalidArgument(f"--retry {text!r}: numbers must not be negative")
        return cls(sequence, partitions)


class OneSequence:
    """The sequence of a resent sub-batch: its messages must go to one node as one batch."""

    def __init__(self, producer_id: str, sequence: int) -> None:
        self.producer_id = producer_id
        self.sequence = sequence
        self.used = False

    def next(self) -> int:
        if self.used:
            raise InvalidArgument(
                f"the lines of --retry sequence {self.sequence} now belong to several nodes "
                "(the topic's partitions moved): they cannot be resent as one batch"
            )
        self.used = True
        return self.sequence


def producer_sequences(args: argparse.Namespace) -> SequenceSource:
    """This run's producer id and sequences: numbered from the clock in microseconds, so a
    later run of the same producer id never reuses a sequence of an earlier one."""
    producer_id = args.producer_id or f"produce-{uuid.uuid4().hex}"
    return SequenceSource(producer_id, first=time.time_ns() // 1000)


class Producer:
    """Sends lines in batches and keeps the account of what is stored."""

    def __init__(self, args: argparse.Namespace, client: Any, bar: Any) -> None:
        self.args = args
        self.client = client
        self.bar = bar
        self.stored = 0
        self.through = args.skip  # every line up to here is stored or was skipped
        self.bad: list[tuple[int, str]] = []
        self.reject = open(args.reject_file, "ab") if args.reject_file else None  # noqa: SIM115
        self.skip_bad = args.skip_bad or args.reject_file is not None
        self.sequences = producer_sequences(args)
        client.core.sequences = self.sequences  # the client's batches carry this producer id

    @property
    def producer_id(self) -> str:
        return self.sequences.producer_id

    def reject_line(self, line_no: int, raw: bytes, reason: str) -> None:
        self.bad.append((line_no, reason))
        print(f"line {line_no}: {reason}", file=sys.stderr)
        if self.reject is not None:
            self.reject.write(raw + b"\n")
            self.reject.flush()

    def send(
        self, lines: list[Line], sequences: OneSequence | None = None
    ) -> list[tuple[Line, dict[str, Any]]]:
        """Store a batch; refused messages are found by halving the refused sub-batches
        (an oversized request is split the same way) and set aside as bad lines; sub-batches
        that failed otherwise raise SendFailed once the rest of the batch is sent."""
        stored: list[tuple[Line, dict[str, Any]]] = []
        unconfirmed: list[Unconfirmed] = []
        todo = [lines]
        while todo:
            part = todo.pop()
            results, failures = self.client.produce_partial(
                self.args.topic, [line.message for line in part], sequences
            )
            for line, result in zip(part, results, strict=True):
                if result is not None:
                    stored.append((line, result))
            for indices, err in failures:
                refused = [part[i] for i in indices]
                if err.code not in MESSAGE_ERRORS or sequences is not None:
                    unconfirmed.append(Unconfirmed(refused, err.details.get("sequence"), err))
                elif len(refused) == 1:
                    self.reject_line(
                        refused[0].number, refused[0].raw, f"{err.code}: {err.message}"
                    )
                else:
                    half = len(refused) // 2
                    todo.extend([refused[half:], refused[:half]])
        stored.sort(key=lambda pair: pair[0].number)
        if unconfirmed:
            raise SendFailed(unconfirmed, stored)
        self.stored += len(stored)
        if self.bar is not None:
            self.bar.update(len(stored))
        return stored

    def resend(self, group: RetryGroup, lines: dict[int, Line]) -> list[tuple[Line, Any]]:
        """A ``--retry`` group as the one sub-batch it was: same producer id, sequence and
        partitions (a copy the node stored is answered, not written again)."""
        missing = sorted(set(group.partitions) - set(lines))
        if missing:
            raise InvalidArgument(
                f"--retry names line {missing[0]}, which the input does not hold as a message"
            )
        batch = []
        for number in sorted(group.partitions):
            line = lines[number]
            line.message.partition = group.partitions[number]
            batch.append(line)
        return self.send(batch, OneSequence(self.producer_id, group.sequence))


def failure_report(failed: SendFailed, producer: Producer, batch_end: int) -> str:
    """What a partly stored batch left and the one command that resumes it exactly once."""
    refused = failed.refused
    numbers = ", ".join(str(ln.number) for ln in refused[:20]) + (
        ", ..." if len(refused) > 20 else ""
    )
    stored = producer.stored + len(failed.stored)
    retry = " ".join(f"--retry {u.token()}" for u in failed.unconfirmed)
    unsure = any(u.error.details.get("maybe_sent") for u in failed.unconfirmed)
    return (
        f"stored {stored} message(s); {len(refused)} line(s) of the batch ending at line "
        f"{batch_end} are not confirmed ({numbers})"
        + (", perhaps stored" if unsure else "")
        + f", every other line through line {batch_end} is stored. Resume exactly once "
        f"with: --skip {batch_end} --producer-id {producer.producer_id} {retry}"
    )
