"""Bridge anti-spoofing: a docker node's bridge port carries its own MAC and IPv4 address only.

Host-like nodes keep CAP_NET_ADMIN (tc in their own network namespace), so their root
may add a peer's address or change its MAC and answer for the peer on the testbed's
shared bridge (ARP spoofing: the peer's traffic cut or intercepted). The host pins each
node's port, the host side of its veth pair, with an ebtables chain ``fl<id>-<node>``
jumped to from the bridge's FORWARD and INPUT chains: frames from the port whose
Ethernet or ARP source MAC is not the node's, ARP whose sender address is not the
node's, IPv4 from another source address, and IPv6 (faultlab's traffic is IPv4) are
dropped. :func:`remove` undoes it; the chain and jumps are named by the testbed's
state so that ``down`` (also from a state file after a kill) removes them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from faultlab.errors import FaultlabError

_LINK = re.compile(r"^\d+:\s*eth0@if(\d+):", re.M)


def chain(tb_id: str, node: str) -> str:
    """The ebtables chain of ``node`` of testbed ``tb_id``."""
    return f"fl{tb_id}-{node}"


def host_port(sandbox: str) -> str:
    """The host side of the veth pair whose other end is ``eth0`` in the network
    namespace at ``sandbox`` (dockerd's SandboxKey). Raises FaultlabError when it is
    not found."""
    cp = subprocess.run(["nsenter", f"--net={sandbox}", "ip", "-o", "link", "show", "eth0"], capture_output=True,
                        text=True, timeout=30)
    m = _LINK.search(cp.stdout)
    if m:
        for name in os.listdir("/sys/class/net"):
            try:
                with open(f"/sys/class/net/{name}/ifindex") as f:
                    if f.read().strip() == m.group(1):
                        return name
            except OSError:
                continue
    raise FaultlabError(f"the host side of eth0 in {sandbox} was not found ({' '.join((cp.stdout + cp.stderr).split())[:200]})",
                        field="testbed", fix="see `docker inspect` of the node; retry `faultlab testbed up`")


def _ebtables(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    exe = shutil.which("ebtables")
    if exe is None:
        raise FaultlabError("ebtables not found: host-like nodes' bridge ports are pinned with it", field="testbed",
                            fix="apt-get install ebtables")
    cp = subprocess.run([exe, *args], capture_output=True, text=True, timeout=30)
    if check and cp.returncode != 0:
        raise FaultlabError(f"ebtables {' '.join(args)}: {' '.join(cp.stderr.split())[:200]}", field="testbed",
                            fix="check the bridge family of nftables (`ebtables -L`)")
    return cp


def apply(name: str, port: str, mac: str, address: str) -> None:
    """Pin ``port`` to ``mac`` and ``address`` with chain ``name`` (replaced when it
    exists). Raises FaultlabError when ebtables is missing or refuses a rule."""
    remove(name, port)
    _ebtables("-N", name, "-P", "RETURN")
    for rule in (["-s", "!", mac], ["-p", "ARP", "--arp-mac-src", "!", mac], ["-p", "ARP", "--arp-ip-src", "!", address],
                 ["-p", "IPv4", "--ip-src", "!", address], ["-p", "IPv6"]):
        _ebtables("-A", name, *rule, "-j", "DROP")
    for parent in ("FORWARD", "INPUT"):
        _ebtables("-A", parent, "-i", port, "-j", name)


def remove(name: str, port: str) -> None:
    """Remove chain ``name`` and its jumps from ``port`` (missing ones are fine)."""
    if shutil.which("ebtables") is None:
        return
    for parent in ("FORWARD", "INPUT"):
        while _ebtables("-D", parent, "-i", port, "-j", name, check=False).returncode == 0:
            pass
    _ebtables("-F", name, check=False)
    _ebtables("-X", name, check=False)


def teardown_argv(name: str, port: str) -> list[tuple[str, ...]]:
    """The argv lines (idempotent, for a watchdog's sh) that :func:`remove` runs once."""
    return [("ebtables", "-D", p, "-i", port, "-j", name) for p in ("FORWARD", "INPUT")] + \
        [("ebtables", "-F", name), ("ebtables", "-X", name)]
