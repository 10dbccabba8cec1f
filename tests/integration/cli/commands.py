"""Running `msgstore ...` as a user does: a real process of this checkout's CLI."""

from __future__ import annotations

import os
import subprocess
import sys

CLI = [sys.executable, "-m", "storage_node.cli"]


def run(
    *args: str,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
    timeout: float = 180,
) -> subprocess.CompletedProcess[bytes]:
    """The command's result (``env`` over this process' environment); ``check``: it
    exited 0, else its stderr is the failure."""
    proc = subprocess.run(
        [*CLI, *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if check:
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc
