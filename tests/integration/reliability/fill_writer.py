"""Child process for the corruption tests: writes a known set of messages, then waits to be
killed with SIGKILL so the store is left exactly as a crash leaves it (no clean shutdown).

Usage: fill_writer.py CONFIG_JSON TOPIC BATCHES

Prints one JSON line: the acknowledged results and ``list_files()`` at that moment.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict

from support import config_from_json, fill_batch

from storage_node.store import Store, TopicConfig


def main() -> None:
    config = config_from_json(sys.argv[1])
    topic, batches = sys.argv[2], int(sys.argv[3])
    store = Store.open(config)
    store.create_topic(TopicConfig(name=topic, partitions=1))
    acked = []
    for batch in range(batches):
        results = store.append(topic, fill_batch(batch))
        acked.extend([r.partition, r.offset, r.msg_id] for r in results)
    files = [asdict(f) for f in store.list_files()]
    print(json.dumps({"acked": acked, "files": files}), flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
