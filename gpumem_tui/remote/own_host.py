"""What names this machine: the loopback names, its host names and its interface addresses.

Shared by the two servers that check a request's ``Host`` header against DNS rebinding: the
exporter (:mod:`gpumem_tui.remote.exporter_http`) and ``serve`` (:mod:`gpumem_tui.remote.serve_access`).
"""

from __future__ import annotations

import socket

#: The names a loopback-bound server answers to (IPv6 without brackets).
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def host_names() -> set[str]:
    """This machine's host name and FQDN (``socket.gethostname()``, ``socket.getfqdn()``), as
    the system spells them; empty ones left out."""
    return {name for name in (socket.gethostname(), socket.getfqdn()) if name}


def interface_addresses() -> set[str]:
    """The IPv4 and IPv6 addresses of this machine's interfaces (``psutil.net_if_addrs``), as
    lower-case text without an IPv6 zone (``fe80::1%eth0`` -> ``fe80::1``: a Host header has none)."""
    import psutil

    found: set[str] = set()
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                found.add(address.address.split("%", 1)[0].lower())
    return found
