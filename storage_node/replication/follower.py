"""The copy loop of one followed log: fetch from the leader, check, write, acknowledge.

Runs on its own thread. Each round fetches from the copy's end (which acknowledges that
end as durable), checks the shipment (position, CRCs, whole batches), writes it at exactly
that position, indexes it as recovery would and waits for its fsync. After a start or an
epoch change it first asks the leader where its own newest epoch ended and truncates a tail
the leader does not have (KIP-101).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import requests

from storage_node.errors import CorruptData
from storage_node.mtls import PeerIdentity
from storage_node.replication import shipping
from storage_node.replication.hosted_log import HostedLog

log = logging.getLogger(__name__)
WAIT_MS = 1000  # a fetch's long poll on the leader
BACKOFF_S = 0.2


class Follower:
    def __init__(
        self,
        hosted: HostedLog,
        node_id: str,
        address_of: Callable[[str], str | None],
        headers: dict[str, str],
        verify: str | bool,
        truncate: Callable[[HostedLog, int, int | None], None],
        identity: PeerIdentity | None = None,
    ) -> None:
        self.hosted = hosted
        self.node_id = node_id
        self.address_of = address_of
        self.headers = headers
        self.verify = verify
        self.truncate = truncate
        self.stop = threading.Event()
        # with an identity the node's certificate is presented to the leader (mTLS)
        self.session = identity.session() if identity is not None else requests.Session()
        self.checked_epoch = -1  # the leader epoch whose divergence check was done
        self.last_error: str | None = None
        self.leader_end = 0
        self.thread = threading.Thread(
            target=self._run, name=f"msgstore-follow-{hosted.id}", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.session.close()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                if not self._round():
                    self.stop.wait(BACKOFF_S)
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any one failure
                self.last_error = repr(exc)
                hosted = self.hosted
                extra = {"log": hosted.id, "epoch": hosted.epoch}
                log.warning("following log %s: %s", hosted.id, exc, extra=extra)
                self.stop.wait(BACKOFF_S)

    def _get(self, path: str, params: dict[str, Any], timeout: float) -> requests.Response:
        hosted = self.hosted
        address = self.address_of(hosted.leader)
        if address is None:
            raise ConnectionError(f"leader {hosted.leader} of log {hosted.id} has no address")
        return self.session.get(
            f"{address}/v1/replication/logs/{hosted.id}/{path}",
            params=params,
            headers=self.headers,
            timeout=timeout,
            verify=self.verify,
        )

    def _round(self) -> bool:
        """One fetch; False when the caller should back off."""
        hosted = self.hosted
        epoch = hosted.epoch
        if epoch < hosted.fenced_epoch or hosted.role != "follower":
            return False  # a newer epoch is being decided: follow nobody meanwhile
        store = hosted.store
        store.resume_after_write_error()  # a failed write of a copy: recover it in place
        if self.checked_epoch != epoch:
            resp = self._get("epoch-end", {"epoch": epoch, "of": hosted.epochs.latest}, 5.0)
            if resp.status_code != 200:
                self.last_error = f"epoch-end: HTTP {resp.status_code} {resp.text[:200]}"
                return False
            end = int(resp.json()["end"])
            if store.log_ends().end > end:
                log.warning(
                    "log %s: truncating %d bytes past epoch end %d",
                    hosted.id,
                    store.log_ends().end - end,
                    end,
                    extra={"log": hosted.id, "epoch": epoch},
                )
                self.truncate(hosted, end, None)
                store = hosted.store
            self.checked_epoch = epoch
        position = store.log_ends().end
        params = {
            "position": position,
            "epoch": epoch,
            "follower": self.node_id,
            "wait_ms": WAIT_MS,
            "topics": len(store.list_topics()),
        }
        resp = self._get("fetch", params, WAIT_MS / 1000 + 10.0)
        if resp.status_code != 200:
            self.last_error = f"fetch: HTTP {resp.status_code} {resp.text[:200]}"
            self._refused(resp)
            return False
        self.last_error = None
        h = resp.headers
        self.leader_end = int(h[shipping.H_DURABLE_END])
        if int(h[shipping.H_POSITION]) != position:
            raise CorruptData(f"asked for position {position}, got {h[shipping.H_POSITION]}")
        topics = h.get(shipping.H_TOPICS)
        if topics:
            hosted.ensure_topics(json.loads(topics))
        if h.get(shipping.H_NODE_IP):
            hosted.remember_node_ip(h[shipping.H_NODE_IP])
        data = resp.content
        if data:  # checked by the log before anything is written
            store.append_copied(data, position, int(h[shipping.H_SEGMENT]))
        history = json.loads(h.get(shipping.H_EPOCHS, "[]"))
        hosted.epochs.replace([(int(e), int(p)) for e, p in history])
        return True

    def _refused(self, resp: requests.Response) -> None:
        """A fetch the leader refused: a newer epoch (wait for the routing table), a copy
        ahead of the leader or before its start (check again / start over)."""
        try:
            err = resp.json().get("error", {})
        except ValueError:
            return
        code = err.get("code")
        if code in ("fenced", "invalid_argument"):
            self.checked_epoch = -1
        start = err.get("log_start")
        hosted = self.hosted
        if isinstance(start, int) and start > hosted.store.log_ends().end:
            self.truncate(hosted, 0, start)  # nothing before ``start`` exists any more
