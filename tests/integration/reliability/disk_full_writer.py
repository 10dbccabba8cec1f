"""Child process for the disk-full test: appends until the filesystem refuses more bytes.

Usage: disk_full_writer.py CONFIG_JSON TOPIC LIMIT_BYTES

With LIMIT_BYTES > 0 the process lowers its own RLIMIT_FSIZE (SIGXFSZ ignored), so a write
that would grow any file past LIMIT_BYTES fails with EFBIG; this works unprivileged on any
POSIX system. With LIMIT_BYTES == 0 the data folder is expected to sit on a small filesystem
that fills up for real (ENOSPC); a ballast file there is deleted to make room again.

Prints JSON lines: one per acknowledged batch, then the error, whether every acknowledged
message could still be read back, and the result of one more batch after room was made.
Then it kills itself with SIGKILL, leaving the store to crash recovery.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from pathlib import Path

from support import config_from_json, fill_batch

from storage_node.store import Store, TopicConfig

BALLAST = "ballast"


def say(record: dict) -> None:
    print(json.dumps(record), flush=True)


def main() -> None:
    config = config_from_json(sys.argv[1])
    topic, limit = sys.argv[2], int(sys.argv[3])
    store = Store.open(config)
    store.create_topic(TopicConfig(name=topic, partitions=1))
    acked: list[tuple[int, int, str]] = []
    results = store.append(topic, fill_batch(0))
    acked.extend((r.partition, r.offset, r.msg_id) for r in results)
    say({"batch": 0, "results": [[r.partition, r.offset, r.msg_id] for r in results]})

    if limit > 0:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

    batch = 1
    while True:
        try:
            results = store.append(topic, fill_batch(batch))
        except Exception as exc:  # the test decides whether this was the right error
            say({"error": type(exc).__name__, "code": getattr(exc, "code", None), "batch": batch})
            break
        acked.extend((r.partition, r.offset, r.msg_id) for r in results)
        say({"batch": batch, "results": [[r.partition, r.offset, r.msg_id] for r in results]})
        batch += 1
        if batch > 100_000:
            say({"error": "never full"})
            break

    readable = True
    for batch_no, start in ((b, b * 10) for b in range(batch)):
        for index, message in enumerate(fill_batch(batch_no)):
            partition, offset, msg_id = acked[start + index]
            try:
                got = store.read(topic, partition, offset, max_messages=1).messages
                same = bool(got) and got[0].value == message.value
                same = same and store.get_message(msg_id).value == message.value
            except Exception:
                same = False
            readable = readable and same
    say({"readable_while_full": readable})

    if limit > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, hard))
    else:
        (Path(config.data_dir).parent / BALLAST).unlink()
    try:
        results = store.append(topic, fill_batch(batch + 1))
        say({"after": batch + 1, "results": [[r.partition, r.offset, r.msg_id] for r in results]})
    except Exception as exc:
        say({"after_error": f"{type(exc).__name__}: {exc}"})
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
