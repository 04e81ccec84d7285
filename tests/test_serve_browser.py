"""``gpumem-tui serve`` in a real browser (issue 12): headless Chromium (Debian's ``chromium``)
driven by Playwright opens the URL serve prints (with its token), and the dashboard's own text
must arrive in xterm.js.

textual-serve draws the terminal with xterm.js on a canvas, so the DOM holds no text. The page
keeps its ``Terminal`` in a local variable; an init script catches it when textual.js assigns
``this.terminal = new Terminal(...)`` (a setter on ``Object.prototype`` for that one name, which
then stores an ordinary own property), and the test reads xterm.js's screen buffer through its
public API (``buffer.active.getLine(y).translateToString()``), i.e. what the page shows.

The served dashboard runs on the fake NVML (tests/fleet_shim: 2 GPUs, a real sleeping process
with 3 GiB on GPU 0), so the GPU table has rows on this GPU-less machine.

``scripts/test.sh`` installs ``chromium`` when it is missing; under CI (``CI`` set) a missing
browser fails the test, elsewhere it is skipped.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest
from waiting import HANG_TIMEOUT, wait_until

TESTS = Path(__file__).resolve().parent

# Catches the page's xterm.js Terminal as textual.js stores it (see the module docstring).
CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "terminal", {value, writable: true, configurable: true, enumerable: true});
    if (value && value.buffer && value.buffer.active) window.__gpumemTerminal = value;
  },
});
"""

# The terminal's visible rows as text, or null before the terminal exists.
SCREEN_TEXT = """() => {
  const term = window.__gpumemTerminal;
  if (!term) return null;
  const buffer = term.buffer.active, rows = [];
  for (let y = 0; y < term.rows; y++) {
    const line = buffer.getLine(buffer.viewportY + y);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
}"""


@pytest.fixture
def chromium() -> str:
    """The system Chromium's path; skipped (failed under CI) when it is not installed."""
    path = shutil.which("chromium")
    if path is None:
        message = "the 'chromium' browser is missing: scripts/test.sh installs it (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_token_url(server: subprocess.Popen, stdout: Path) -> str:
    """The ``http://127.0.0.1:PORT/?token=...`` line serve prints, once the port answers with the page."""
    def answering() -> str | None:
        printed = re.findall(r"^http://127\.0\.0\.1:\d+/\?token=\S+$", stdout.read_text(), re.MULTILINE)
        if printed:
            try:
                with urllib.request.urlopen(printed[0], timeout=30):
                    return printed[0]
            except OSError:
                pass
        if server.poll() is not None:
            raise AssertionError(f"gpumem-tui serve exited early: {server.stderr.read()}")
        return None

    return wait_until(answering, what="gpumem-tui serve to print a token URL that answers", poll=0.2)


@pytest.fixture
def served_dashboard(tmp_path):
    """``gpumem-tui serve`` on a free loopback port over the fake NVML; yields (the URL with the
    token it printed, pid on GPU 0).

    The server runs in its own process group and ends its dashboards (each in a group of its
    own) when it gets SIGTERM; any it left are killed after it, even when the test failed."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])  # killed at the end
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS / "fleet_shim"), str(TESTS.parent)]),
           "GPUMEM_FAKE_NVML": "2", "GPUMEM_FAKE_PID": str(sleeper.pid)}
    stdout = tmp_path / "serve.out"
    with stdout.open("w") as out:
        server = subprocess.Popen([sys.executable, "-m", "gpumem_tui", "serve", "--port", str(port)],
                                  env=env, stdout=out, stderr=subprocess.PIPE, text=True, start_new_session=True)
    dashboards: list[psutil.Process] = []
    try:
        url = _wait_for_token_url(server, stdout)
        yield url, sleeper.pid
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            dashboards = psutil.Process(server.pid).children(recursive=True)
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        for process in dashboards:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        sleeper.kill()
        sleeper.wait(timeout=10)


def _wait_for_screen(page, *contains: str, timeout_ms: int = int(HANG_TIMEOUT * 1000)) -> str:
    """Waits until the terminal's visible text holds every string of ``contains``; returns that text."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    try:
        page.wait_for_function(
            f"(want) => {{ const text = ({SCREEN_TEXT})(); return text !== null && want.every((w) => text.includes(w)); }}",
            arg=list(contains), timeout=timeout_ms)
    except PlaywrightTimeoutError:
        screen = page.evaluate(SCREEN_TEXT)
        if screen is None:  # textual.js no longer stores its Terminal as `this.terminal`
            raise AssertionError("the page's xterm.js Terminal was never caught (see CATCH_TERMINAL)") from None
        raise AssertionError(f"{list(contains)} not all on the browser's screen in {timeout_ms} ms:\n{screen}") from None
    return page.evaluate(SCREEN_TEXT)


def test_the_dashboard_runs_in_headless_chromium_and_takes_keys(chromium, served_dashboard, tmp_path):
    # playwright imported here, not at the top: this is its only test, and every xdist worker
    # collects this module (~0.2 s of CPU each to import it)
    from playwright.sync_api import sync_playwright

    url, pid = served_dashboard
    assert "?token=" in url  # the URL serve printed: the page and its websocket need the token
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.add_init_script(CATCH_TERMINAL)
            page.goto(url)

            # the dashboard's GPU table and process table arrive in the browser's terminal
            screen = _wait_for_screen(page, str(pid), "NVIDIA A100-SXM4-80GB", "3,072 MiB")
            lines = screen.splitlines()
            header = next(line for line in lines if "gpumem-tui" in line)
            assert "2 GPUs" in header and "read-only" in header  # served --readonly by default
            gpu_rows = [line.split() for line in lines if "NVIDIA A100-SXM4-80GB" in line]
            assert [row[0] for row in gpu_rows] == ["0", "1"]
            process_row = next(line.split() for line in lines if str(pid) in line.split())
            assert process_row[:2] == ["0", str(pid)] and "3,072" in process_row  # GPU 0, 3 GiB from NVML
            assert "Filter syntax" not in screen  # the key help is not open yet

            # a key pressed in the browser reaches the app: ? opens the key help
            page.focus(".xterm-helper-textarea")
            # Textual's Footer does not redraw while the page is not focused (Footer.bindings_changed
            # returns early without app_focus), so `e` (the estimator, mounted after the first frame)
            # shows once the terminal has the focus
            _wait_for_screen(page, "e Estimator")
            page.keyboard.press("?")
            screen = _wait_for_screen(page, "Filter syntax")
            assert "Show the key bindings" in screen
            assert "SIGKILL" not in screen and "signal_kill" not in screen  # read-only: no signal keys
            page.keyboard.press("Escape")
            page.wait_for_function(f"() => !({SCREEN_TEXT})().includes('Filter syntax')", timeout=int(HANG_TIMEOUT * 1000))
            assert "NVIDIA A100-SXM4-80GB" in page.evaluate(SCREEN_TEXT)
        except BaseException:
            # what the browser showed, to look at when this fails (pytest prints tmp_path)
            page.screenshot(path=tmp_path / "page.png")
            (tmp_path / "screen.txt").write_text(page.evaluate(SCREEN_TEXT) or "(no terminal)")
            print(f"browser screenshot and screen text: {tmp_path}")
            raise
        finally:
            browser.close()
