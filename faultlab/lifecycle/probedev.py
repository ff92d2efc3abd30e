"""Throw-away probe devices (``flprb<8 hex>``): an ifb device that ``faultlab doctor``
and nic-slow's netem check make in a node's network namespace to try a qdisc on, and
delete at once.

Like every object faultlab makes, a probe device lives under a lease (``probe-<8
hex>``, the same hex as the device): the record is written and its watchdog started
*before* the device is made, so a controller SIGKILLed in between leaves a device its
watchdog deletes within ``PROBE_LEASE_S`` and that ``faultlab status`` shows and
``recover`` removes. The device also carries the alias ``PROBE_ALIAS``: a probe device
whose lease was lost entirely (record deleted and watchdog killed) is removed by
``recover`` only when it is an ifb device with that alias, the mark faultlab sets on
the devices it makes; any other ``flprb*`` device is shown, never removed.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from typing import Iterator

from faultlab.lifecycle.cmd import Cmd
from faultlab.lifecycle.lease import Lease
from faultlab.nodes import Node

#: a probe device's name: ``flprb`` and 8 hex digits (its lease is ``probe-<hex>``)
PROBE_DEV = re.compile(r"^flprb([0-9a-f]{8})$")
#: the alias faultlab sets on each probe device it makes (``ip link set dev D alias``)
PROBE_ALIAS = "faultlab-probe"
#: how long a probe device may outlive a killed controller (s): its lease's deadline
PROBE_LEASE_S = 60.0


@contextlib.contextmanager
def probe_ifb(node: Node) -> Iterator[tuple[str, str | None]]:
    """Make a probe ifb device in ``node``'s network namespace, under its own lease;
    yields ``(device, error)``: error is None when the device exists, else the line
    that says why it could not be made (then there is no device).

    On exit the device is deleted and the lease released (the lease is kept when the
    delete fails: its watchdog retries at the deadline). Raises NodeError (one line)
    when the lease cannot be written; nothing is made then."""
    hexid = secrets.token_hex(4)
    dev = f"flprb{hexid}"
    delete = Cmd(("ip", "link", "del", dev), "net", "the throw-away probe device")
    lease = Lease.create_for(node, f"probe-{hexid}", "probe", dev, {}, [delete], time.time() + PROBE_LEASE_S)
    kept = False
    try:
        add = node.run(["ip", "link", "add", dev, "type", "ifb"], scope="net")
        if add.returncode != 0:
            yield dev, add.stderr.strip() or "cannot create an ifb device"
            return
        try:
            node.run(["ip", "link", "set", "dev", dev, "alias", PROBE_ALIAS], scope="net")
            yield dev, None
        finally:
            kept = not _delete(node, dev)
    finally:
        if not kept:  # (kept: the device is still there; its lease's watchdog deletes it)
            lease.release()


def _delete(node: Node, dev: str) -> bool:
    """Delete probe device ``dev``; True when it is gone. Raises nothing."""
    try:
        node.run(["ip", "link", "del", dev], scope="net")
        return node.run(["ip", "link", "show", "dev", dev], scope="net").returncode != 0
    except Exception:
        return False
