"""The progress bar of `msgstore produce` appears on a terminal (a pty) and never in a pipe."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

CLI = [sys.executable, "-m", "storage_node.cli"]


def run(*args: str, **kw):
    proc = subprocess.run([*CLI, *args], capture_output=True, timeout=180, **kw)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc


def read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_progress_bar_on_a_terminal_and_not_in_a_pipe(tmp_path):
    data_dir = str(tmp_path / "c")
    up = run("local", "up", "--nodes", "1", "--data-dir", data_dir)
    try:
        ep = ["--endpoint", up.stdout.decode().split()[1]]
        run("topic", "create", "bar", "--partitions", "2", *ep)
        data = tmp_path / "in.jsonl"
        data.write_bytes(b"".join(b'{"i": %d}\n' % i for i in range(5000)))
        master, slave = pty.openpty()
        # a terminal of 24 rows x 100 columns (a fresh pty is 0 x 0: no room for a bar)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        try:
            proc = subprocess.Popen(
                [*CLI, "produce", "bar", "--file", str(data), *ep],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=slave,
            )
            os.close(slave)
            terminal = read_all(master)
            proc.wait(120)
        finally:
            os.close(master)
        assert proc.returncode == 0, terminal
        assert b"produce bar" in terminal and b"5000" in terminal, terminal
        assert b"\r" in terminal and b"msg" in terminal, terminal  # tqdm's bar with updates
        assert b"produced 5000 message(s) to bar" in terminal
        piped = run("produce", "bar", "--file", str(data), *ep)
        assert b"\r" not in piped.stderr
        assert piped.stderr.decode().splitlines() == ["produced 5000 message(s) to bar"]
    finally:
        run("local", "down", "--data-dir", data_dir)
