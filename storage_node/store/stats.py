"""A store's counters and the stats document built from them and its parts."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from storage_node.formats.filenames import STATES, State
from storage_node.store.commitlog import CommitLog
from storage_node.store.types import FileInfo

T = TypeVar("T")
COUNTERS = (
    "appended_messages",
    "appended_bytes",
    "append_batches",
    "duplicate_batches",
    "reads",
    "key_lookups",
    "msgid_lookups",
    "checkpoints",
    "compacted_segments",
    "compacted_key_indexes",
    "uploaded_files",
    "expired_files",
)


def new_counters() -> dict:
    """The counters every store starts with (others, such as error counts, appear when
    first counted)."""
    return dict.fromkeys(COUNTERS, 0)


def count(counters: dict, name: str, n: int = 1) -> None:
    """``n`` more of ``name`` (a counter that appears when first counted)."""
    counters[name] = counters.get(name, 0) + n


def counted(counters: dict, task: str, run: Callable[[int], T], arg: int) -> T:
    """``run(arg)``, counted in ``<task>_runs`` and, when it raises, ``<task>_failures`` (a
    background task's runs; ``count_error`` is for errors a task survives)."""
    count(counters, f"{task}_runs")
    try:
        return run(arg)
    except Exception:
        count(counters, f"{task}_failures")
        raise


def count_error(counters: dict, name: str, text: str) -> None:
    """Count an error under ``<name>_errors`` and keep its ``text`` as ``last_<name>_error``
    (the server exports the count as a metric, the text with the stats)."""
    counters[f"{name}_errors"] = counters.get(f"{name}_errors", 0) + 1
    counters[f"last_{name}_error"] = text


def describe(
    counters: dict,
    log: CommitLog,
    files: list[FileInfo],
    topics: int,
    ready: bool,
    recovery: dict,
) -> dict:
    """The stats document: counters, log positions and statistics, files by kind and
    state, stored and uploaded bytes, readiness and the recovery report."""
    out: dict = dict(counters)
    out.update({f"log_{k}": v for k, v in log.stats.items()})
    out["log_start"] = log.start_pos
    out["log_end"] = log.end
    out["log_durable_end"] = log.durable_end
    out["topics"] = topics
    for state in STATES:
        out[f"segments_{state}"] = sum(1 for f in files if f.kind == "segment" and f.state == state)
        out[f"key_indexes_{state}"] = sum(
            1 for f in files if f.kind == "key_index" and f.state == state
        )
    out["stored_bytes"] = sum(f.stored_size for f in files if f.state != State.UPLOADED)
    out["uploaded_bytes"] = sum(f.stored_size for f in files if f.state == State.UPLOADED)
    out["ready"] = ready
    out["recovery"] = recovery
    return out
