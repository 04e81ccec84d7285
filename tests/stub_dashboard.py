"""A stand-in for ``gpumem-tui dashboard`` under textual-serve, for tests/test_serve_sessions.py.

    python stub_dashboard.py LOG polite|stubborn

Speaks the start of Textual's web-driver protocol (the ``__GANGLION__`` line textual-serve's
``AppService.run`` waits for), starts a sleeping child of its own (so a test can see that the
whole process group ends), sends the terminal data ``ready``, and writes JSON lines to LOG: its pid and ``COLUMNS``/``ROWS``, the
child's pid, every meta packet it reads from stdin (``polite``), and each SIGTERM it ignores
(``stubborn``: it never reads stdin and ignores SIGTERM, like the busy dashboard of the issue).
"""

import json
import os
import signal
import subprocess
import sys
import time

log = open(sys.argv[1], "a", buffering=1)


def note(**fields):
    log.write(json.dumps(fields) + "\n")


mode = sys.argv[2]
if mode == "stubborn":
    signal.signal(signal.SIGTERM, lambda *_: note(ignored="SIGTERM"))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
note(pid=os.getpid(), columns=os.environ["COLUMNS"], rows=os.environ["ROWS"], child=child.pid)
sys.stdout.buffer.write(b"__GANGLION__\n" + b"D" + len(b"ready").to_bytes(4, "big") + b"ready")
sys.stdout.flush()  # "ready" reaches the browser as terminal data
if mode == "stubborn":
    while True:  # a dashboard that will not end on SIGTERM: idles until killed (no timing is tested)
        time.sleep(0.2)
stdin = sys.stdin.buffer
while len(head := stdin.read(5)) == 5:  # textual-serve's packet: kind (1 byte), size (4, big-endian), payload
    payload = stdin.read(int.from_bytes(head[1:], "big"))
    if head[:1] == b"M":
        meta = json.loads(payload)
        note(meta=meta)
        if meta.get("type") == "quit":
            break
