"""The exporter's ``/metrics`` body: Prometheus text format 0.0.4, written fast, and its WSGI app.

Why not ``prometheus_client.exposition.generate_latest``: at 512 process rows (about 1,800
series) it spends ~30 ms a scrape checking and escaping every label name and value of every
sample again (prometheus_client 0.26, ``exposition.sample_line``), over the issue's 10 ms.
:class:`TextEncoder` writes the same format from the same prometheus_client metric families,
keeping each label set's rendered text from one scrape to the next (process rows and their
labels change little between polls), and :class:`MetricsApp` serves one rendering per poll to
every scraper (gzip when asked, as prometheus_client's app does), encoded by the polling loop
right after the poll while somebody scrapes.

Format: https://prometheus.io/docs/instrumenting/exposition_formats/ ("Text-based format"):
``# HELP`` text escapes backslash and line feed; label values escape backslash, double quote
and line feed; a counter's samples and HELP / TYPE lines carry the ``_total`` suffix (as
prometheus_client writes them). Values are Python float reprs, which Prometheus parses
(Go ``strconv.ParseFloat``); the callers never pass NaN or infinities.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterable, Iterator

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# On a 285 KB exposition of 1,536 process samples: level 1 took 0.7 ms CPU for 10.4 KB, level 6
# 2.1 ms for 9.1 KB, level 9 (gzip.compress's default, what prometheus_client uses) 6.4 ms for
# 9.0 KB (measured on the development VM): the cheapest level keeps nearly all the saving.
GZIP_LEVEL = 1


def _escape_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


class TextEncoder:
    """Text format 0.0.4 of prometheus_client metric families; thread-safe.

    ``encode(families) -> bytes``. Label names must be valid Prometheus names (they are the
    exporter's own constants: not checked again). The rendered text of each label set seen in
    the previous call is reused; sets not seen in this call are forgotten, so the cache holds
    at most one scrape's label sets.
    """

    def __init__(self) -> None:
        self._labels: dict[tuple, str] = {}
        self._lock = threading.Lock()

    def encode(self, families: Iterable[object]) -> bytes:
        """The exposition of ``families`` (prometheus_client ``Metric`` objects), UTF-8."""
        with self._lock:
            old, fresh = self._labels, {}
            # one label dict shared by several samples (a process row's families) is rendered
            # once: by identity within this call (the dict is kept in the entry, so its id
            # cannot be reused by another dict meanwhile), by content across calls
            by_id: dict[int, tuple[dict, str]] = {}
            out: list[str] = []
            append = out.append
            for family in families:
                name = f"{family.name}_total" if family.type == "counter" else family.name
                append(f"# HELP {name} {_escape_help(family.documentation)}\n# TYPE {name} {family.type}\n")
                for sample in family.samples:
                    labels = sample.labels
                    if labels:
                        entry = by_id.get(id(labels))
                        if entry is not None:
                            text = entry[1]
                        else:
                            key = (*labels, *labels.values())
                            text = fresh.get(key) or old.get(key)
                            if text is None:
                                text = "{" + ",".join(f'{k}="{_escape_value(v)}"' for k, v in labels.items()) + "}"
                            fresh[key] = text
                            by_id[id(labels)] = (labels, text)
                        append(f"{sample.name}{text} {float(sample.value)!r}\n")
                    else:
                        append(f"{sample.name} {float(sample.value)!r}\n")
            self._labels = fresh
        return "".join(out).encode("utf-8")


class MetricsApp:
    """A WSGI app answering every GET with the exposition of ``render()``'s families.

    ``render() -> (version, families)``: ``version`` changes whenever the data changes (the
    exporter's poll counter); while it does not, every scraper gets the same bytes without
    encoding again. Gzip when the request's ``Accept-Encoding`` names it.

    :meth:`prepare`, called by the polling loop after each poll, encodes the new data at once
    when somebody scraped since the previous poll (in the form that scrape asked for), so the
    next scrape only sends bytes; nobody scraping, nothing is encoded ahead.
    """

    def __init__(self, render: Callable[[], tuple[object, Iterable[object]]]) -> None:
        self._render = render
        self._encoder = TextEncoder()
        self._lock = threading.Lock()
        self._version: object = object()
        self._plain = b""
        self._gzip: bytes | None = None
        self._asked: bool | None = None  # the last scrape's gzip wish, None: no scrape since prepare

    def _body(self, compressed: bool) -> bytes:
        with self._lock:
            version, families = self._render()
            if version != self._version or version is None:
                self._version, self._plain, self._gzip = version, self._encoder.encode(families), None
            if not compressed:
                return self._plain
            if self._gzip is None:
                self._gzip = gzip.compress(self._plain, compresslevel=GZIP_LEVEL)
            return self._gzip

    def prepare(self) -> None:
        """Encode the current data now if a scrape came since the last call (else nothing)."""
        asked, self._asked = self._asked, None
        if asked is not None:
            self._body(asked)

    def __call__(self, environ: dict, start_response: Callable) -> Iterator[bytes] | list[bytes]:
        if environ.get("PATH_INFO") == "/favicon.ico":
            start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "0")])
            return [b""]
        compressed = "gzip" in environ.get("HTTP_ACCEPT_ENCODING", "")
        self._asked = compressed
        data = self._body(compressed)
        headers = [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(data)))]
        if compressed:
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [data]
