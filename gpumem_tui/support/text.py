"""Make untrusted text (process names, command lines, file contents) safe to show.

Anyone on a shared box can name a process anything: Rich markup (``[bold red]``,
``[link=...]``), ANSI escape sequences that move the cursor or retitle the terminal, bidi
overrides that reorder what is displayed, bytes that are not UTF-8, or 100 KB of text.

Two helpers, each for one destination:

- :func:`printable` -- for the screen. Control and format characters become visible escapes
  (``\\x1b``, ``\\n``, ``\\u202e``), bytes that were not valid UTF-8 become ``\\xNN``, and long
  text is cut with an ellipsis and a ``(N bytes)`` note. Rich markup is *not* escaped here:
  the UI renders the result with ``rich.text.Text(printable(s))``, which never parses markup,
  so ``[bold]`` stays literal text.
- :func:`json_safe` -- for JSON and traces. Keeps the text whole (``json.dumps`` escapes
  control characters itself) but replaces lone surrogates, which are not valid Unicode and
  cannot be encoded as UTF-8, with U+FFFD.

Headless: imports nothing beyond the standard library.
"""

from __future__ import annotations

import re
import sys
import unicodedata

DEFAULT_LIMIT = 4096
"""Default cap on the length of :func:`printable`'s result, in characters."""

# Categories that must never reach a terminal raw: C0/C1 controls (Cc), format characters
# such as bidi overrides and zero-width joiners (Cf), lone surrogates (Cs) and the Unicode
# line/paragraph separators (Zl, Zp) that some terminals treat as newlines.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Quick pre-filter: everything ASCII-printable needs no per-character work.
_ASCII_SAFE = re.compile(r"[ -~]*\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if 0xDC80 <= code <= 0xDCFF:
        # surrogateescape: the OS handed us byte (code - 0xDC00), which was not valid UTF-8.
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _is_unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in _UNSAFE_CATEGORIES


def byte_length(text: str) -> int:
    """Length of ``text`` in bytes as the OS stored it (UTF-8, surrogateescape restored).

    Lone surrogates that do not come from surrogateescape count as 3 bytes each.
    """
    try:
        return len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:  # a surrogate outside U+DC80..U+DCFF
        return sum(1 if "\udc80" <= ch <= "\udcff" else len(ch.encode("utf-8", "surrogatepass"))
                   for ch in text)


def printable(text: str | bytes | None, limit: int = DEFAULT_LIMIT) -> str:
    """Return ``text`` as a single line that is safe and literal on a terminal.

    - ``None`` gives ``""``; ``bytes`` are decoded as UTF-8 with ``surrogateescape`` so invalid
      bytes survive and are shown as ``\\xNN``.
    - Characters of Unicode categories Cc, Cf, Cs, Zl, Zp become visible escapes: ``\\n``,
      ``\\r``, ``\\t``, ``\\xNN`` (code points up to U+00FF, e.g. ESC is ``\\x1b``),
      ``\\uNNNN`` or ``\\UNNNNNNNN``. So an ANSI sequence ``ESC[31m`` shows as ``\\x1b[31m``.
      Backslashes already in the text are left alone (this is for reading, not round-trips).
    - If the escaped text is longer than ``limit`` characters it is cut, and
      ``"… (N bytes)"`` is appended, N being the length of the original text in bytes;
      the whole result is then at most ``limit`` characters. When the note would take more
      than half of ``limit`` (narrow table cells) only ``"…"`` marks the cut.
    - Rich markup is left as is: render the result with ``rich.text.Text``, never as markup.

    Raises ``ValueError`` if ``limit`` < 1. Cost: O(min(len(text), limit)).
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "surrogateescape")
    if len(text) <= limit and _ASCII_SAFE.match(text):
        return text
    # Escapes only lengthen the text, so the first `limit + 1` characters decide the result.
    head = text[: limit + 1]
    pieces: list[str] = []
    length = 0
    overflow = len(text) > limit
    for ch in head:
        piece = _escape_char(ch) if (ch < " " or ch > "~") and _is_unsafe(ch) else ch
        pieces.append(piece)
        length += len(piece)
        if length > limit:
            overflow = True
            break
    if not overflow:
        return "".join(pieces)
    note = f"… ({byte_length(text)} bytes)"
    if len(note) * 2 > limit:  # a narrow cell: keep the text, mark the cut with "…" only
        note = "…"
    room = max(limit - len(note), 0)
    kept: list[str] = []
    used = 0
    for piece in pieces:  # never cut an escape in half
        if used + len(piece) > room:
            break
        kept.append(piece)
        used += len(piece)
    return ("".join(kept) + note)[: max(limit, len(note))]


def json_safe(text: str | bytes | None) -> str | None:
    """Return ``text`` unchanged except that it is valid Unicode (encodable as UTF-8).

    Bytes that were not valid UTF-8 (decoded with ``surrogateescape`` by the OS layer, as
    psutil does) and any other lone surrogates become U+FFFD. Control characters are kept:
    ``json.dumps`` escapes them (``\\u001b``). ``None`` stays ``None``; ``bytes`` are decoded
    as UTF-8 with replacement.
    """
    if text is None:
        return None
    if isinstance(text, (bytes, bytearray)):
        return bytes(text).decode("utf-8", "replace")
    return _SURROGATE.sub("\ufffd", text)


def print_error(prog: str, message: object, limit: int = DEFAULT_LIMIT) -> None:
    """Print ``PROG: MESSAGE`` as one line on stderr, the message through :func:`printable`
    (cut to ``limit`` characters).

    A command's error text often carries what the user or another user's file gave it: a
    path (from a glob of a shared directory), a config value, an exception's text. Shown raw,
    an ESC in it drives the user's terminal. ``prog`` is the program's own name, shown as is.
    """
    print(f"{prog}: {printable(str(message), limit)}", file=sys.stderr)

