"""Parse one JSON object while keeping at most N items of its top-level lists.

Headless, standard library only. ``json.loads`` builds every item of a list before anyone can
look at it: one 64 MiB trace line listing 10**6 processes became 445 MB of dicts. Here the
top-level object is walked key by key with :meth:`json.JSONDecoder.raw_decode` (the
standard library's own scanner, one value at a time), and a list under a capped key is
decoded item by item: the first ``cap`` items are kept, the rest are decoded one at a time
(so malformed JSON is still an error) and only counted. Memory is the text plus the kept
items, whatever the list's length.

The result equals ``json.loads(text)`` with the capped lists cut to their first ``cap``
items (a repeated key keeps its last value, as ``json.loads`` does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace (RFC 8259, section 2)


def _skip(text: str, index: int) -> int:
    return _SPACE.match(text, index).end()  # type: ignore[union-attr]  # matches the empty string


def _value(text: str, index: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, index)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def _capped_list(text: str, index: int, cap: int) -> tuple[list[Any], int, int]:
    """The list starting at ``text[index] == "["``: (first ``cap`` items, end index, items left out)."""
    kept: list[Any] = []
    left_out = 0
    index = _skip(text, index + 1)
    if text.startswith("]", index):
        return kept, index + 1, 0
    while True:
        item, index = _value(text, index)
        if len(kept) < cap:
            kept.append(item)
        else:
            left_out += 1  # decoded (so a broken item is still an error) and let go
        index = _skip(text, index)
        if text.startswith(",", index):
            index = _skip(text, index + 1)
        elif text.startswith("]", index):
            return kept, index + 1, left_out
        else:
            raise ValueError(f"expected ',' or ']' at character {index}")


def load_capped(text: str, caps: Mapping[str, int]) -> tuple[dict[str, Any], dict[str, int]]:
    """Parse ``text``, a JSON object, keeping at most ``caps[key]`` items of each list under
    a capped top-level key.

    Returns:
        (object, left_out): ``left_out`` maps each capped key that had more items to how
        many were left out.

    Raises:
        ValueError: not JSON, not a JSON object, or nested too deeply (``json.JSONDecodeError``
            is a ValueError).
    """
    index = _skip(text, 0)
    if not text.startswith("{", index):
        raise ValueError("not a JSON object")
    out: dict[str, Any] = {}
    left_out: dict[str, int] = {}
    index = _skip(text, index + 1)
    if text.startswith("}", index):
        index += 1
    else:
        while True:
            if not text.startswith('"', index):
                raise ValueError(f"expected a key at character {index}")
            key, index = _value(text, index)
            index = _skip(text, index)
            if not text.startswith(":", index):
                raise ValueError(f"expected ':' at character {index}")
            index = _skip(text, index + 1)
            cap = caps.get(key)
            if cap is not None and text.startswith("[", index):
                value, index, extra = _capped_list(text, index, cap)
                if extra:
                    left_out[key] = extra
                else:
                    left_out.pop(key, None)  # a repeated key: the last value counts
            else:
                value, index = _value(text, index)
                left_out.pop(key, None)
            out[key] = value
            index = _skip(text, index)
            if text.startswith(",", index):
                index = _skip(text, index + 1)
            elif text.startswith("}", index):
                index += 1
                break
            else:
                raise ValueError(f"expected ',' or '}}' at character {index}")
    if _skip(text, index) != len(text):
        raise ValueError(f"extra data at character {index}")
    return out, left_out


def cap_lists(record: dict[str, Any], caps: Mapping[str, int]) -> dict[str, int]:
    """Cut the capped lists of an already parsed ``record`` in place (a short line, where
    ``json.loads`` is cheaper and its items are few); returns what :func:`load_capped` would."""
    left_out: dict[str, int] = {}
    for key, cap in caps.items():
        value = record.get(key)
        if isinstance(value, list) and len(value) > cap:
            left_out[key] = len(value) - cap
            del value[cap:]
    return left_out
