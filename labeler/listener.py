"""Who listens at a TCP address of this host: the uids owning the listening sockets
(``/proc/net/tcp``, ``/proc/net/tcp6``) that a connection to ``host:port`` would
reach, when ``host`` is one of this host's addresses.

A port is no one's: any local user may listen on a port that a service root means
to reach there is not holding, so an address of this host names whoever listens
on it now, not the service it was written down for.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct

_LISTEN = "0A"
_TABLES = {socket.AF_INET: "/proc/net/tcp", socket.AF_INET6: "/proc/net/tcp6"}


def _address(hexaddr: str, family: int) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address of a ``/proc/net/tcp*`` field (32-bit words in host order)."""
    words = [int(hexaddr[i:i + 8], 16) for i in range(0, len(hexaddr), 8)]
    return ipaddress.ip_address(socket.inet_ntop(family, struct.pack(f"={len(words)}I", *words)))


def _is_local(ip: str, family: int) -> bool:
    """Whether ``ip`` is an address of this host (a socket can be bound to it)."""
    with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((ip, 0))
        return True
    return False


def listener_uids(host: str, port: int) -> set[int] | None:
    """The uids of the sockets listening on ``port`` at ``host`` or on every address,
    for each address of ``host`` that is this host's; empty when none listens there;
    None when no address of ``host`` is this host's (a remote host, a name that does
    not resolve)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    uids: set[int] | None = None
    for family, _, _, _, sa in infos:
        if family not in _TABLES or not _is_local(sa[0], family):
            continue
        if uids is None:
            uids = set()
        ip = ipaddress.ip_address(sa[0].split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # a connection to ::ffff:a.b.c.d reaches the IPv4 listeners of a.b.c.d
        for fam, table in _TABLES.items():
            with contextlib.suppress(OSError):
                with open(table) as f:
                    rows = f.read().splitlines()[1:]
                for row in rows:
                    cols = row.split()
                    if len(cols) < 8 or cols[3] != _LISTEN:
                        continue
                    local, lport = cols[1].rsplit(":", 1)
                    addr = _address(local, fam)
                    if int(lport, 16) == port and (addr == ip or addr.is_unspecified
                                                   or (isinstance(ip, ipaddress.IPv4Address) and getattr(addr, "ipv4_mapped", None) == ip)):
                        uids.add(int(cols[7]))
    return uids
