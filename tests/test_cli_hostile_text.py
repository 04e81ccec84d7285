"""The one-line errors of the commands, given hostile names and a broken HTTP peer.

A path the user typed may come from a glob of a shared directory, so it can hold a terminal
escape; a ``--prometheus`` URL may be mistyped; a port may answer something that is not HTTP.
Each gets one line on stderr, with the escape shown as visible text (``\\x1b``), and an exit
code, never a traceback (issue 23's review; ``replay`` and ``compare`` had the same fault).
"""

from __future__ import annotations

import socket
import threading

import pytest
from cli_inprocess import run_cli

ESC_NAME = "evil\x1b[31mred\x07"
SHOWN = "evil\\x1b[31mred\\x07"


pytestmark = pytest.mark.usefixtures("no_user_config")  # tests/conftest.py


def _one_literal_line(stderr: str) -> str:
    assert stderr.count("\n") == 1, stderr
    assert "\x1b" not in stderr and "\x07" not in stderr and "Traceback" not in stderr, stderr
    return stderr


def test_record_into_a_directory_with_an_escape_in_its_name(tmp_path):
    target = tmp_path / ESC_NAME
    target.mkdir()
    done = run_cli("record", "--quiet", "-o", str(target), "--duration", "1")
    assert done.returncode == 2
    assert f"{SHOWN} is a directory" in _one_literal_line(done.stderr)


def test_record_into_a_missing_directory_with_an_escape_in_its_name(tmp_path):
    done = run_cli("record", "--quiet", "-o", str(tmp_path / ESC_NAME / "t.jsonl"), "--duration", "1")
    assert done.returncode == 2
    assert f"cannot write {tmp_path}/{SHOWN}/t.jsonl" in _one_literal_line(done.stderr)


def test_estimate_with_a_missing_deepspeed_file_with_an_escape_in_its_name(tmp_path):
    done = run_cli("estimate", "gpt2", "--deepspeed", str(tmp_path / f"{ESC_NAME}.json"))
    assert done.returncode == 2
    assert f"{SHOWN}.json" in _one_literal_line(done.stderr)


def test_dashboard_with_a_missing_config_file_with_an_escape_in_its_name(tmp_path):
    done = run_cli("--config", str(tmp_path / f"{ESC_NAME}.toml"))
    assert done.returncode == 2
    assert f"{SHOWN}.toml" in _one_literal_line(done.stderr)


def test_measure_with_an_unknown_argument_holding_an_escape():
    done = run_cli("measure", "gpt2", "--on", "meta", "--bogus", ESC_NAME)
    assert done.returncode == 2
    assert SHOWN in _one_literal_line(done.stderr)


def test_demo_recording_into_a_directory_with_an_escape_in_its_name(tmp_path):
    target = tmp_path / ESC_NAME
    target.mkdir()
    done = run_cli("demo", "--headless", "--record", str(target))
    assert done.returncode == 2
    assert f"{SHOWN} is a directory" in _one_literal_line(done.stderr)


@pytest.mark.parametrize("url", [
    "http://[::1:9090",           # unbalanced bracket: urllib raised "Invalid IPv6 URL"
    "http://host:99999",          # no port
    "http://ho st:9090",          # http.client refused it at the first query (InvalidURL)
    "http://a\x1b[31mb:9090",     # an escape (and a bracket)
    "http://:9090",               # no host
])
def test_fleet_refuses_a_url_it_cannot_send_in_one_line(url):
    done = run_cli("fleet", "--prometheus", url, "--once", timeout=60)
    assert done.returncode == 2
    assert "--prometheus wants an http(s) URL" in _one_literal_line(done.stderr)


class _RawPeer:
    """A TCP port that answers every request with ``reply`` and closes: not HTTP, or HTTP cut short."""

    def __init__(self, reply: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.reply = reply
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            with conn:
                conn.recv(65536)
                conn.sendall(self.reply)

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("reply", [
    b"garbage\r\n\r\n",                                                    # no status line
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",        # a broken chunk
], ids=["no-status-line", "broken-chunk"])
def test_fleet_once_against_a_peer_that_is_not_http_says_so_in_one_line(reply):
    peer = _RawPeer(reply)
    try:
        done = run_cli("fleet", "--prometheus", peer.url, "--once", timeout=60)
    finally:
        peer.close()
    assert done.returncode == 1
    assert f"{peer.url}: broken HTTP answer" in _one_literal_line(done.stderr)
