"""printable() / json_safe(): hostile process names stay literal and bounded."""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from gpumem_tui.support.text import byte_length, json_safe, printable


def test_plain_ascii_is_unchanged():
    cmd = "python train.py --lr 3e-4 --batch 32"
    assert printable(cmd) == cmd


def test_ansi_escape_is_shown_not_executed():
    out = printable("\x1b[31mred\x1b[0m\x1b]0;pwned\x07")
    assert "\x1b" not in out and "\x07" not in out
    assert out == "\\x1b[31mred\\x1b[0m\\x1b]0;pwned\\x07"


def test_newlines_tabs_and_c1_controls_are_escaped():
    assert printable("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    assert printable("x\x9by") == "x\\x9by"  # C1 CSI
    assert printable("del\x7f") == "del\\x7f"


def test_bidi_override_and_line_separator_are_escaped():
    out = printable("evil\u202etxt.exe\u2028next")
    assert out == "evil\\u202etxt.exe\\u2028next"


def test_non_ascii_printable_text_is_kept():
    assert printable("模型训练 café") == "模型训练 café"


def test_invalid_utf8_bytes_are_shown_as_hex():
    raw = b"train\xff\xfe.py"
    assert printable(raw) == "train\\xff\\xfe.py"
    # psutil hands us such bytes as surrogateescape strings
    assert printable(raw.decode("utf-8", "surrogateescape")) == "train\\xff\\xfe.py"


def test_lone_surrogate_not_from_bytes_is_escaped():
    assert printable("a\ud800b") == "a\\ud800b"


def test_rich_markup_stays_literal_when_rendered_with_text():
    hostile = "[bold red]boom[/] [link=https://evil.example]click[/link]"
    out = printable(hostile)
    assert out == hostile
    console = Console(width=200, record=True, color_system=None)
    console.print(Text(out))
    assert hostile in console.export_text()


def test_long_text_is_capped_with_byte_count():
    out = printable("x" * 100_000, limit=80)
    assert len(out) <= 80
    assert out.endswith("… (100000 bytes)")
    assert out.startswith("x" * 50)


def test_cap_counts_original_bytes_and_never_splits_an_escape():
    text = "\x1b" * 1000
    out = printable(text, limit=40)
    assert len(out) <= 40
    assert out.endswith("… (1000 bytes)")
    body = out[: -len("… (1000 bytes)")]
    assert body == "\\x1b" * (len(body) // 4)


def test_cap_applies_after_escaping():
    # 20 chars of input become 80 chars of escapes: must be cut at limit 50
    out = printable("\x1b" * 20 + "tail", limit=50)
    assert len(out) <= 50 and "(24 bytes)" in out


def test_narrow_limit_uses_plain_ellipsis():
    assert printable("[red]eve\x1b", limit=10) == "[red]eve…"


def test_exact_fit_is_not_cut():
    assert printable("ab\ncd", limit=6) == "ab\\ncd"


def test_bad_limit_raises():
    with pytest.raises(ValueError):
        printable("x", limit=0)


def test_none_gives_empty_string():
    assert printable(None) == ""
    assert json_safe(None) is None


def test_byte_length_restores_surrogateescape():
    assert byte_length(b"a\xffb".decode("utf-8", "surrogateescape")) == 3
    assert byte_length("é") == 2


def test_json_safe_replaces_surrogates_and_keeps_controls():
    text = b"run\xff".decode("utf-8", "surrogateescape") + "\x1b[31m\ud800"
    safe = json_safe(text)
    assert safe == "run\ufffd\x1b[31m\ufffd"
    dumped = json.dumps({"c": safe}, ensure_ascii=False)
    dumped.encode("utf-8")  # must not raise
    assert json.loads(dumped)["c"] == safe


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(), max_size=300), st.integers(min_value=1, max_value=200))
def test_printable_never_emits_unsafe_characters(text, limit):
    out = printable(text, limit=limit)
    assert len(out) <= limit
    for ch in out:
        assert unicodedata.category(ch) not in {"Cc", "Cf", "Cs", "Zl", "Zp"}
    out.encode("utf-8")
    if len(text) <= limit and all(unicodedata.category(c) not in {"Cc", "Cf", "Cs", "Zl", "Zp"} for c in text):
        assert out == text
