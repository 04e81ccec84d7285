"""serve's access rules as pure functions: Host parsing, the names each bind answers to (DNS
rebinding), the same-origin rule, the token comparison, the terminal size clamp."""

from __future__ import annotations

import socket

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gpumem_tui.remote.serve_access import (
    MAX_HEIGHT,
    MAX_WIDTH,
    MIN_HEIGHT,
    MIN_WIDTH,
    HostPort,
    HostRule,
    canonical_host,
    new_token,
    origin_matches,
    parse_host,
    terminal_size,
    token_matches,
)


@pytest.mark.parametrize("header,parsed", [
    ("127.0.0.1:8000", HostPort("127.0.0.1", 8000)),
    ("LocalHost:8000", HostPort("localhost", 8000)),
    ("[::1]:8000", HostPort("::1", 8000)),
    ("[0:0:0:0:0:0:0:1]:8000", HostPort("::1", 8000)),  # one address, one spelling
    ("gpubox.example", HostPort("gpubox.example", None)),
    ("", None), (None, None), ("a b:80", None), ("host:99999", None), ("[::1", None), ("[nothex]:80", None),
    ('"><script>alert(1)</script>', None), ("evil.example:80:80", None), ("-bad.example", None),
])
def test_host_headers_are_parsed_strictly(header, parsed):
    assert parse_host(header) == parsed


def test_allowed_names_have_no_port_and_one_spelling():
    assert canonical_host("GpuBox.Example") == "gpubox.example" and canonical_host("0:0::1") == "::1"
    for bad in ("gpubox.example:80", "a b", "", "[::1]", "under_score"):
        assert canonical_host(bad) is None, bad


def test_on_loopback_only_loopback_names_with_the_port_are_served():
    rule = HostRule.for_bind("127.0.0.1", 8000)
    for header in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "LOCALHOST:8000"):
        assert rule.allows(parse_host(header)), header
    # DNS rebinding sends the attacker's name; another port is another origin
    for header in ("evil.example:8000", "localhost.evil.example:8000", "127.0.0.1.nip.io:8000",
                   "127.0.0.1:8001", "127.0.0.1", f"{socket.gethostname()}:8000", "0.0.0.0:8000"):
        assert not rule.allows(parse_host(header)), header
    assert not rule.allows(None)


def test_on_every_interface_this_machines_own_names_and_the_allowed_ones_are_served():
    rule = HostRule.for_bind("0.0.0.0", 8000, ["gpubox.example"])
    for header in (f"{socket.gethostname()}:8000", "127.0.0.1:8000", "gpubox.example:8000"):
        assert rule.allows(parse_host(header)), header
    for header in ("evil.example:8000", "0.0.0.0:8000", "gpubox.example:8001"):
        assert not rule.allows(parse_host(header)), header
    # a specific address answers to itself (and --allow-host names), not to loopback names
    specific = HostRule.for_bind("192.0.2.10", 8000)
    assert specific.allows(parse_host("192.0.2.10:8000")) and not specific.allows(parse_host("localhost:8000"))


def test_port_80_may_be_left_out_of_the_host():
    assert HostRule.for_bind("127.0.0.1", 80).allows(parse_host("localhost"))


@pytest.mark.parametrize("origin,same", [
    (None, True),  # a top-level navigation carries no Origin
    ("http://127.0.0.1:8000", True), ("http://127.0.0.1:8000/", True),
    ("http://evil.example", False), ("http://evil.example:8000", False), ("null", False),
    ("https://127.0.0.1:8000", False), ("http://127.0.0.1:8001", False), ("http://127.0.0.1", False),
    ("http://localhost:8000", False),  # another name is another origin, even for the same socket
    ("http://user@127.0.0.1:8000", False), ("http://127.0.0.1:8000/path", False), ("", False),
    ("http://[::1", False),
])
def test_the_origin_must_be_the_origin_the_host_names(origin, same):
    assert origin_matches(origin, HostPort("127.0.0.1", 8000)) is same


def test_ipv6_origins_compare_by_address():
    assert origin_matches("http://[0::1]:8000", HostPort("::1", 8000))


def test_tokens_are_random_and_compared_whole():
    token = new_token()
    assert len(token) >= 43 and token != new_token()
    assert token_matches(token, token)
    for wrong in (None, "", token[:-1], token + "x", token.upper() if token.upper() != token else token + "A",
                  "é" * len(token)):
        assert not token_matches(wrong, token), wrong


@given(st.integers(), st.integers())
def test_any_whole_number_size_is_clamped_into_range(width, height):
    w, h = terminal_size(width, height)
    assert MIN_WIDTH <= w <= MAX_WIDTH and MIN_HEIGHT <= h <= MAX_HEIGHT
    if MIN_WIDTH <= width <= MAX_WIDTH:
        assert w == width
    if MIN_HEIGHT <= height <= MAX_HEIGHT:
        assert h == height


@given(st.text(max_size=12))
def test_text_that_is_not_a_plain_whole_number_is_refused(text):
    assume(not (text.isascii() and text.isdigit()))
    assert terminal_size(text, "24") is None and terminal_size("80", text) is None


def test_sizes_from_the_query_and_defaults():
    assert terminal_size("20000", "20000") == (MAX_WIDTH, MAX_HEIGHT)
    assert terminal_size(None, None) == (80, 24)
    assert terminal_size("0", "0") == (MIN_WIDTH, MIN_HEIGHT)
    for bad in (True, 1.5, [80], {"w": 1}, "9" * 5000):
        assert terminal_size(bad, 24) is None, bad
