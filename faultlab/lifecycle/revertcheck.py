"""Whether a revert line that failed had nothing left to do.

faultlab's revert lines are idempotent in effect, not all in exit status: ``ip link
del``, ``tc qdisc del ... root handle H``, ``rmdir``, ``ip netns del``, ``iptables
-D`` and a write of a limit into a file of a faultlab cgroup (``write_cmd``) fail
when their object is already gone (a fault half-applied when its controller
was killed; a revert the controller finished before it died). A failed line counts
as done only when it is one of these removals, as faultlab writes them (optionally
inside ``ip netns exec NS`` or ``nsenter --net=PATH --``), and a read-only look
(``ip link show``, ``tc qdisc show``, ``iptables -C``, the path) finds its object
absent. Any other failure is real: the caller keeps the lease (record and watchdog)
so that its watchdog, or ``faultlab revert``/``recover``, retries.

Only for lines of this host's lease records (a remote node's lines are not looked at
here: there, any failure keeps the record).
"""

from __future__ import annotations

import os
import shlex
import subprocess

from faultlab.lifecycle.cmd import WRITE_SH
from faultlab.lifecycle.names import CGROUP

_NETNS_DIR = "/run/netns"


def _look(argv: list[str]) -> tuple[int, str, str] | None:
    """(returncode, stdout, stderr) of a read-only command, None when it cannot run."""
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return cp.returncode, cp.stdout, cp.stderr


def _split_prefix(argv: list[str]) -> tuple[list[str], list[str], bool]:
    """(prefix, command, its namespace gone): the ``ip netns exec NS`` or ``nsenter
    --net=PATH --`` that runs a command in a node's network namespace, the command,
    and whether that namespace no longer exists (then nothing in it is left)."""
    if argv[:3] == ["ip", "netns", "exec"] and len(argv) > 4:
        ns = argv[3]
        gone = "/" not in ns and not os.path.lexists(os.path.join(_NETNS_DIR, ns))
        return argv[:4], argv[4:], gone
    if argv[:1] == ["nsenter"] and len(argv) > 3 and argv[1].startswith("--net=") and argv[2] == "--":
        return argv[:3], argv[3:], not os.path.lexists(argv[1][len("--net="):])
    return [], argv, False


def _link_gone(pre: list[str], name: str) -> bool:
    r = _look([*pre, "ip", "link", "show", "dev", name])
    return r is not None and r[0] != 0 and "does not exist" in r[2]


def _qdisc_gone(pre: list[str], dev: str, handle: str) -> bool:
    r = _look([*pre, "tc", "qdisc", "show", "dev", dev])
    if r is None:
        return False
    code, out, err = r
    if code != 0:
        return "Cannot find device" in err
    return not any(ln.split()[2:3] == [handle] and " root " in f" {ln} " for ln in out.splitlines() if ln.startswith("qdisc "))


def _iptables_rule_gone(rule: list[str]) -> bool:
    r = _look(["iptables", "-C", *rule])
    return r is not None and r[0] == 1 and "does a matching rule exist" in (r[1] + r[2])


def _cgroup_write_gone(cmd: list[str]) -> bool:
    """``sh -c WRITE sh VALUE PATH`` (``cmd.write_cmd``) into a file of a
    faultlab cgroup (``.../faultlab-<fault id>/FILE``) that is gone: its limits went
    with it (a fault killed before its cgroup was made, or reverted already)."""
    if len(cmd) != 6 or cmd[:2] != ["sh", "-c"] or cmd[2] != WRITE_SH or cmd[3] != "sh":
        return False
    folder = os.path.dirname(cmd[5])
    return os.path.isabs(folder) and CGROUP.match(os.path.basename(folder)) is not None and not os.path.lexists(folder)


def already_gone(line: str) -> bool:
    """True when revert ``line`` (a shell line of a lease record) is a removal whose
    object is verifiably not there now; False for every other line (its failure is
    real). Raises nothing."""
    try:
        argv = shlex.split(line)
    except ValueError:
        return False
    pre, cmd, ns_gone = _split_prefix(argv)
    if not cmd:
        return False
    if cmd[:3] == ["ip", "link", "del"] and len(cmd) == 4:
        return ns_gone or _link_gone(pre, cmd[3])
    if cmd[:4] == ["tc", "qdisc", "del", "dev"] and len(cmd) == 8 and cmd[5:7] == ["root", "handle"]:
        return ns_gone or _qdisc_gone(pre, cmd[4], cmd[7])
    if pre:
        return False
    if _cgroup_write_gone(cmd):
        return True
    if cmd[0] == "rmdir" and len(cmd) == 2:
        return not os.path.lexists(cmd[1])
    if cmd[:3] == ["ip", "netns", "del"] and len(cmd) == 4 and "/" not in cmd[3]:
        return not os.path.lexists(os.path.join(_NETNS_DIR, cmd[3]))
    if cmd[:2] == ["iptables", "-D"] and len(cmd) > 2:
        return _iptables_rule_gone(cmd[2:])
    return False
