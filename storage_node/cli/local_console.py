"""The web console of a local cluster: ``msgstore local up`` starts one ``msgstore
console`` process beside the nodes, ``local status`` shows it and ``local down`` stops it.
Its pid, port and URL are kept in DIR/console.json (the port stays across down/up)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import requests

from storage_node.cli.local_state import alive, pid_running
from storage_node.cli.ports import free_port, port_free
from storage_node.errors import InvalidArgument, Unavailable

CONSOLE_FILE = "console.json"
CONSOLE_LOG = "console.log"


@dataclass
class ConsoleProcess:
    pid: int
    port: int
    url: str
    marker: str  # an argument of its command line only it has (its --endpoint list)


class LocalConsole:
    def __init__(self, directory: str | os.PathLike[str], host: str = "127.0.0.1") -> None:
        self.dir = Path(directory).resolve()
        self.host = host
        self.log = self.dir / CONSOLE_LOG
        state = self.dir / CONSOLE_FILE
        self.process = ConsoleProcess(**json.loads(state.read_text())) if state.exists() else None

    def running(self) -> bool:
        p = self.process
        return p is not None and pid_running(p.pid, p.marker)

    def _save(self) -> None:
        assert self.process is not None
        (self.dir / CONSOLE_FILE).write_text(json.dumps(asdict(self.process), indent=2) + "\n")

    def start(
        self,
        endpoints: list[str],
        token: str | None = None,
        ca: str | None = None,
        admin: bool = False,
        scrape_seconds: float = 10.0,
        timeout: float = 30.0,
    ) -> ConsoleProcess:
        """Start the console (its token through the environment, never on the command
        line); returns once it answers."""
        if self.running():
            raise InvalidArgument(f"a console already runs for {self.dir}")
        port = self.process.port if self.process else 0
        if not port or not port_free(self.host, port):
            port = free_port(self.host)
        command = [sys.executable, "-m", "storage_node.cli", "console"]
        command += ["--endpoint", ",".join(endpoints), "--host", self.host, "--port", str(port)]
        command += ["--scrape-seconds", str(scrape_seconds)]
        command += ["--ca", ca] if ca else []
        command += ["--admin"] if admin else []
        env = {k: v for k, v in os.environ.items() if k != "MSGSTORE_CONSOLE_TOKEN"}
        if token:
            env["MSGSTORE_CONSOLE_TOKEN"] = token
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        url = f"http://{self.host}:{port}"
        # the whole argument: a process is found by an exact argument of its command line
        self.process = ConsoleProcess(proc.pid, port, url, ",".join(endpoints))
        self._save()
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise Unavailable(f"the console exited ({proc.returncode}); see {self.log}")
            try:
                if requests.get(url + "/healthz", timeout=2).status_code == 200:
                    return self.process
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise Unavailable(f"the console did not answer in {timeout}s; see {self.log}")
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM the console (SIGKILL if it lingers); whether it was running."""
        p = self.process
        if p is None or not self.running():
            return False
        os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while alive(p.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(p.pid):
            os.kill(p.pid, signal.SIGKILL)
        p.pid = 0
        self._save()
        return True
