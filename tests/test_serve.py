"""gpumem-tui serve: readonly by default, loopback by default, one-line errors, the page served.

The page in a real browser (headless Chromium, the GPU table read from xterm.js, keys sent):
tests/test_serve_browser.py.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import time
import urllib.request

from gpumem_tui.serve import dashboard_command


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_served_dashboard_is_readonly_unless_signals_are_allowed():
    assert dashboard_command(["--interval", "2"], allow_signals=False).endswith("dashboard --interval 2 --readonly")
    assert "--readonly" not in dashboard_command([], allow_signals=True)
    assert dashboard_command(["--readonly"], allow_signals=False).count("--readonly") == 1
    assert "'a b'" in dashboard_command(["--probe-dir", "a b"], allow_signals=False)  # quoted for the shell


def _serve(*args, timeout=20):
    return subprocess.run([sys.executable, "-m", "gpumem_tui", "serve", *args], capture_output=True, text=True, timeout=timeout)


def test_port_in_use_and_bad_port_are_one_line_exit_2():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = _serve("--port", str(busy.getsockname()[1]))
    assert r.returncode == 2 and "cannot listen" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = _serve("--port", "70000")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_a_host_that_cannot_be_bound_is_one_line_exit_2():
    # 203.0.113.7 is TEST-NET-3 (RFC 5737): no interface here has it, and binding needs no DNS
    for host, says in (("203.0.113.7", "cannot listen on 203.0.113.7:"), ("", "--host must not be empty")):
        r = _serve("--host", host, "--port", str(_free_port()))
        assert r.returncode == 2 and says in r.stderr, (host, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_serves_the_page_on_loopback_and_warns_elsewhere():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpumem_tui", "serve", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as resp:
                    page = resp.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.3)
        assert f"ws://127.0.0.1:{port}/ws" in page and "gpumem-tui" in page
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "--readonly" in proc.stderr.read()
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpumem_tui", "serve", "--host", "0.0.0.0", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "warning: serving on 0.0.0.0, not loopback" in proc.stderr.read()


def _page(port: int, host_header: str | None) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.putrequest("GET", "/", skip_host=True)
        if host_header is not None:
            conn.putheader("Host", host_header)
        conn.endheaders()
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def test_the_page_points_the_browser_back_at_the_address_it_used():
    # served on every interface, a remote browser must not be told to open ws://0.0.0.0/...
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpumem_tui", "serve", "--host", "0.0.0.0", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                page = _page(port, f"gpubox.example:{port}")
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.3)
        assert f"ws://gpubox.example:{port}/ws" in page and f"http://gpubox.example:{port}/static/js/textual.js" in page
        assert "0.0.0.0" not in page
        assert f"ws://[::1]:{port}/ws" in _page(port, f"[::1]:{port}")
        # a Host header that is not a host name goes nowhere near the page: --host is used
        page = _page(port, '"><script>alert(1)</script>')
        assert "alert(1)" not in page and f"ws://0.0.0.0:{port}/ws" in page
    finally:
        proc.terminate()
        proc.wait(timeout=10)
