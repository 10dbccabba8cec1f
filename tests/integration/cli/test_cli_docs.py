"""docs/CLI.md's "Errors and exit status" examples, run as written against a real local
cluster: each command's output and exit status must be what the document shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "CLI.md"
CLI = f"{sys.executable} -m storage_node.cli"


def examples() -> list[tuple[str, list[str], int]]:
    """(command, expected output lines, expected exit status) of the section's text block."""
    text = DOC.read_text()
    section = text.split("## Errors and exit status", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```text\n(.*?)```", section, re.S)
    assert block is not None, "the section has no example block"
    found = []
    command, lines = None, []
    for line in block.group(1).splitlines():
        if line.startswith("$ "):
            command, lines = line[2:], []
        elif (m := re.fullmatch(r"\[exit (\d+)\]", line)) is not None:
            assert command is not None
            found.append((command, lines, int(m.group(1))))
            command = None
        else:
            lines.append(line)
    return found


EXAMPLES = examples()


def test_the_section_has_examples_of_every_exit_status():
    assert {status for _, _, status in EXAMPLES} == {0, 1, 2}


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("docs") / "c")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGSTORE_")}
    up = subprocess.run(
        f"{CLI} local up --nodes 2 --data-dir {data_dir}",
        shell=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=True,
    )
    address = up.stdout.split()[1]
    subprocess.run(
        f"{CLI} topic create orders --partitions 6 --endpoint {address}",
        shell=True,
        capture_output=True,
        env=env,
        timeout=120,
        check=True,
    )
    yield address
    subprocess.run(f"{CLI} local down --data-dir {data_dir}", shell=True, env=env, timeout=120)


@pytest.mark.parametrize(("command", "expected", "status"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_documented_example(endpoint, command, expected, status):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGSTORE_")}
    env["MSGSTORE_ENDPOINT"] = endpoint
    script = f'set -o pipefail\nmsgstore() {{ {CLI} "$@"; }}\n{command}\n'
    proc = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert (proc.stdout + proc.stderr).splitlines() == expected
    assert proc.returncode == status
