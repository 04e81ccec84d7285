"""A small, defensive client of the Prometheus HTTP API for ``gpumem-tui fleet``.

Reads ``/api/v1/query`` and ``/api/v1/query_range`` (see
https://prometheus.io/docs/prometheus/latest/querying/api/, "Instant queries", "Range
queries" and "Expression query result formats") with the standard library.

Whatever the server answers is untrusted, so the answer is bounded before it is parsed:

- at most :data:`MAX_RESPONSE_BYTES` are read (a ``Content-Length`` above it is refused
  before reading);
- at most :data:`MAX_JSON_VALUES` JSON values (counted from the ``{``, ``[`` and ``,`` bytes,
  an upper bound: every value after the first of an array or object follows a comma) are
  decoded, so that an answer of millions of tiny objects cannot take gigabytes;
- at most :data:`MAX_SERIES` series are kept per answer (:attr:`Answer.left_out` counts the
  rest), and of each series' labels only :data:`KEPT_LABELS`, each cut to
  :data:`MAX_LABEL_CHARS` characters.

Values are returned as floats exactly as parsed (NaN and infinities included, ``None`` when
the text is not a number): range and meaning checks belong to the caller, who knows the unit.
Timestamps of ``query_range`` points are checked here: a point whose time is not a finite
number of seconds between 0 and :data:`MAX_EPOCH` is dropped and counted.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from gpumem_tui.support.text import printable
from gpumem_tui.support.units import MiB

__all__ = ["Answer", "PrometheusClient", "PrometheusError", "MAX_RESPONSE_BYTES", "MAX_SERIES"]

MAX_RESPONSE_BYTES = 32 * MiB
"""A Prometheus answer larger than this is refused (bytes)."""
MAX_JSON_VALUES = 2_000_000
"""Upper bound on the JSON values decoded per answer (an instant-vector series with six labels
counts ~11: ~180k series fit; the worst answer under it, millions of ``{}``, decodes to ~150 MB)."""
MAX_SERIES = 200_000
"""Series kept per answer; the rest are counted in :attr:`Answer.left_out`."""
MAX_LABEL_CHARS = 1024
"""A label value is cut to this many characters."""
MAX_EPOCH = 2.0**33
"""Latest plausible sample time, epoch seconds (year 2242)."""
_UNSENDABLE = re.compile(r"[\x00-\x20\x7f]")
"""What http.client refuses in a URL (its ``_contains_disallowed_url_pchar_re``)."""
KEPT_LABELS = frozenset({"instance", "job", "gpu", "name", "modelName", "pid", "command"})
"""The labels fleet reads; the others are dropped while parsing."""


class PrometheusError(RuntimeError):
    """Prometheus cannot be read (down, timed out, an error, too large, or not Prometheus); one line."""


class Answer(list):
    """The series of one answer (a list) with ``left_out``: series beyond :data:`MAX_SERIES`
    and, for ``query_range``, ``bad_times``: points dropped for an impossible timestamp."""

    left_out: int = 0
    bad_times: int = 0


class PrometheusClient:
    """Instant and range queries against one Prometheus server.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:9090``.
        timeout: seconds per request (also sent as the query's own ``timeout``).

    Raises:
        PrometheusError: (constructor) the URL is not http(s); (query methods) the server is
            down or slow (the OS error or "timed out"), answers with an error (its ``error``
            text), answers more than the limits above, or is not Prometheus (says what answered).
    """

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        wanted = f"--prometheus wants an http(s) URL such as http://127.0.0.1:9090, got {url!r}"
        try:
            parsed = urllib.parse.urlparse(url)
            parsed.port  # noqa: B018 -- raises ValueError for a port that is no number in 0-65535
        except ValueError:  # "Invalid IPv6 URL": an unbalanced bracket in the host
            raise PrometheusError(wanted) from None
        # a space or control character: http.client refuses it at the first query (InvalidURL)
        if parsed.scheme not in ("http", "https") or not parsed.hostname or _UNSENDABLE.search(url):
            raise PrometheusError(wanted)
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _read(self, address: str) -> tuple[bytes, str]:
        """The body (at most MAX_RESPONSE_BYTES + 1 bytes) and its content type."""
        try:
            with urllib.request.urlopen(address, timeout=self.timeout) as resp:  # noqa: S310 - http(s) only
                _refuse_declared_size(self.url, resp.headers.get("Content-Length"))
                return resp.read(MAX_RESPONSE_BYTES + 1), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:  # Prometheus answers 400/422/503 with a JSON error
            kind = exc.headers.get("Content-Type", "")
            if "json" not in kind:
                raise PrometheusError(f"{self.url} answered HTTP {exc.code} ({printable(kind, 60) or 'no content type'}): "
                                      "is it a Prometheus server?") from None
            _refuse_declared_size(self.url, exc.headers.get("Content-Length"))
            return exc.read(MAX_RESPONSE_BYTES + 1), kind
        except TimeoutError:
            raise PrometheusError(f"{self.url}: no answer within {self.timeout:g} s") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise PrometheusError(f"{self.url}: no answer within {self.timeout:g} s") from None
            raise PrometheusError(f"{self.url}: cannot connect ({printable(str(reason), 200)})") from None
        except http.client.HTTPException as exc:  # no HTTP status line, a body cut short, a bad chunk
            raise PrometheusError(f"{self.url}: broken HTTP answer ({type(exc).__name__}): "
                                  "is it a Prometheus server?") from None

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        query = urllib.parse.urlencode({**params, "timeout": f"{self.timeout:g}s"})
        body, kind = self._read(f"{self.url}{path}?{query}")
        if len(body) > MAX_RESPONSE_BYTES:
            raise PrometheusError(f"{self.url}: answer larger than {MAX_RESPONSE_BYTES // MiB} MiB; not read "
                                  "(narrow the query or the fleet)")
        values = body.count(b",") + body.count(b"{") + body.count(b"[")
        if values > MAX_JSON_VALUES:
            raise PrometheusError(f"{self.url}: answer of about {values} JSON values (limit {MAX_JSON_VALUES}); not read")
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            start = printable(body[:60].decode("utf-8", "replace"), 80)
            raise PrometheusError(
                f"{self.url} is not a Prometheus API: it answered {printable(kind, 60) or 'no content type'} starting {start!r}"
            ) from None
        if not isinstance(data, dict) or "status" not in data:
            raise PrometheusError(f"{self.url} is not a Prometheus API: its JSON has no 'status'")
        if data["status"] != "success":
            raise PrometheusError(f"Prometheus error: {printable(str(data.get('errorType', '?')), 60)}: "
                                  f"{printable(str(data.get('error', '?')), 200)}")
        return data.get("data")

    def query(self, promql: str) -> Answer:
        """An instant vector: ``[(labels, value)]``; value is a float (NaN, inf kept) or None
        when Prometheus's text is not a number."""
        data = self._get("/api/v1/query", {"query": promql})
        items, left_out = _result(data, "vector")
        out = Answer((_labels(item), _value(item.get("value"))) for item in items)
        out.left_out = left_out
        return out

    def query_range(self, promql: str, start: float, end: float, step: float) -> Answer:
        """A range vector: ``[(labels, [(epoch seconds, value)])]``; values as in :meth:`query`.

        Points whose timestamp is not a number in [0, MAX_EPOCH] are dropped
        (``Answer.bad_times`` counts them)."""
        data = self._get("/api/v1/query_range", {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                 "step": f"{step:g}"})
        items, left_out = _result(data, "matrix")
        out = Answer()
        out.left_out = left_out
        for item in items:
            values = item.get("values")
            points = []
            for pair in values if isinstance(values, list) else ():
                when = _time(pair)
                if when is None:
                    out.bad_times += 1
                else:
                    points.append((when, _value(pair)))
            out.append((_labels(item), points))
        return out


def _refuse_declared_size(url: str, length: str | None) -> None:
    if length is not None and length.strip().isdigit() and int(length) > MAX_RESPONSE_BYTES:
        raise PrometheusError(f"{url}: answer of {int(length) // MiB} MiB is larger than "
                              f"{MAX_RESPONSE_BYTES // MiB} MiB; not read (narrow the query or the fleet)")


def _result(data: Any, kind: str) -> tuple[list[dict], int]:
    """The series objects of an answer (at most MAX_SERIES) and how many were left out."""
    if not isinstance(data, dict) or data.get("resultType") != kind or not isinstance(data.get("result"), list):
        raise PrometheusError(f"unexpected Prometheus answer: wanted a {kind}")
    result = data["result"]
    return [item for item in result[:MAX_SERIES] if isinstance(item, dict)], max(len(result) - MAX_SERIES, 0)


def _labels(item: Mapping[str, Any]) -> dict[str, str]:
    metric = item.get("metric")
    if not isinstance(metric, dict):
        return {}
    return {k: str(v)[:MAX_LABEL_CHARS] for k, v in metric.items() if k in KEPT_LABELS}


def _value(pair: Any) -> float | None:
    """The value of a ``[time, "value"]`` pair as Prometheus writes it (a string), or None."""
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], (str, int, float)):
        return None
    try:
        return float(pair[1])
    except (ValueError, OverflowError):
        return None


def _time(pair: Any) -> float | None:
    """The time of a ``[time, "value"]`` pair in epoch seconds, or None when impossible."""
    if not isinstance(pair, list) or len(pair) != 2 or isinstance(pair[0], bool) or not isinstance(pair[0], (int, float, str)):
        return None
    try:
        when = float(pair[0])
    except (ValueError, OverflowError):
        return None
    return when if math.isfinite(when) and 0 <= when <= MAX_EPOCH else None
