"""The test clusters' kubectl runner sends a request again only when the API server was not
reached, so a loaded machine's missed TLS handshake is not a test failure while a refusal
from the server still is."""

from __future__ import annotations

from pathlib import Path

import cluster_tools
import pytest
from cluster_tools import KubectlError, _run


def _flaky(tmp_path: Path, failures: int, stderr: str) -> list[str]:
    """A command that fails `failures` times printing `stderr`, then prints "ok"."""
    count = tmp_path / "count"
    count.write_text("0")
    script = tmp_path / "flaky.sh"
    script.write_text(
        f"n=$(cat {count}); echo $((n + 1)) > {count}\n"
        f'if [ "$n" -lt {failures} ]; then echo "{stderr}" >&2; exit 1; fi\n'
        "echo ok\n"
    )
    return ["bash", str(script)]


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_tools, "_UNREACHED_PAUSE_S", 0.0)


def test_an_unreached_api_server_is_asked_again(tmp_path: Path) -> None:
    argv = _flaky(tmp_path, 2, "Unable to connect to the server: net/http: TLS handshake timeout")
    assert _run(argv, {}, None, True, 10).stdout == "ok\n"
    assert (tmp_path / "count").read_text() == "3\n"


def test_an_answer_of_the_server_is_never_sent_again(tmp_path: Path) -> None:
    argv = _flaky(tmp_path, 1, 'Error from server (AlreadyExists): pods "x" already exists')
    with pytest.raises(KubectlError, match="AlreadyExists"):
        _run(argv, {}, None, True, 10)
    assert (tmp_path / "count").read_text() == "1\n"


def test_a_server_that_stays_away_fails_after_the_last_try(tmp_path: Path) -> None:
    argv = _flaky(tmp_path, 100, "dial tcp 127.0.0.1:1: connect: connection refused")
    with pytest.raises(KubectlError, match="connection refused"):
        _run(argv, {}, None, True, 10)
    assert (tmp_path / "count").read_text() == f"{cluster_tools._UNREACHED_TRIES}\n"


CUT = (
    "error: error reading from error stream: next reader: websocket: close 1006 (abnormal closure)"
)


def test_an_exec_cut_after_the_whole_result_gives_the_result() -> None:
    out = 'progress\n{"acked": [1, 2], "unknown": []}\n'
    assert cluster_tools.exec_result(1, out, CUT) == {"acked": [1, 2], "unknown": []}


@pytest.mark.parametrize(
    ("returncode", "out", "err"),
    [
        (1, '{"acked": []}\n', "Traceback: the workload failed"),  # not a cut stream
        (1, '{"acked": [1, 2', CUT),  # the result itself was cut
        (1, "", CUT),
        (0, "no json\n", ""),
    ],
)
def test_an_exec_that_failed_or_printed_no_whole_result_is_a_failure(
    returncode: int, out: str, err: str
) -> None:
    with pytest.raises(AssertionError):
        cluster_tools.exec_result(returncode, out, err)
